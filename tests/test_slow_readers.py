"""Slow readers (issue 24) on every serving path, run as the real
processes against real FerretDB and PostgreSQL: 40 clients request a
multi-chunk file and read nothing. While they stall, other clients get
whole bodies within seconds (node with fewer MongoDB slots than stalled
clients: a stalled response holds no slot); after the send timeout
(SEND_TIMEOUT_MS, 60 s by default, a few seconds here) every stalled
response is closed, cut short, and none before, while a client reading
slowly but steadily is not cut (the timer runs between writes, not over a
chunk or the body, as nginx's send_timeout); the service's resident
memory stays bounded meanwhile, within the container's limit at the Python
paths' connection cap. The paths whose server is nginx or httpd
(nginx-static, httpd-static, nginx-gridfs, gridfs-fuse, nginx-cache) run
the same test with their server's own send timeout (nginx's send_timeout,
httpd's Timeout) set to SEND_TIMEOUT_S. Closures are read on the server's
side of the connections (`ss`: no longer established), and the app paths'
log lines must agree."""
import hashlib
import os
import random
import re
import runpy
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gridfs
import psycopg
import pytest
import requests
from pymongo import MongoClient

from seed import postgres_store
from support.nginx_gridfs_build import Nginx, build_module
from support.processes import rss_mib
from support.service_processes import (GUNICORN_CONF, SERVICES, LabNginxGridFS, NginxStatic, flask_postgres_service,
                               flask_service, node_service, postgres_database)
from test_gridfs_fuse import GridFSMount, NginxOnFuse, fuse_binary  # noqa: F401 (a fixture)
from test_httpd_static import HttpdStatic
from test_nginx_cache import NginxCache

DB_NAME = "lab_slow_readers_test"
NAME = "stalled.bin"
# 13 chunks of 255 KiB, three reads: far more than a stalled connection's
# socket buffers take (stalled_client).
SIZE = 3 * 1024 * 1024
STALLED = 40
# Never closed before it: gunicorn's closes SEND_TIMEOUT_S after a piece
# began to go out, Node's after one to two (its idle timer lets a socket
# whose write queue moved since the last expiry run once more).
SEND_TIMEOUT_S = 8
NODE_SLOTS = 4  # fewer than the stalled clients
SERVED = 5  # requests that must be served while the others stall
TARGET_MEM_MIB = 512  # .env's TARGET_MEM, every serving path's container limit
# A stalled response may pin one read of its store (1.25 MiB of chunks),
# the piece being sent and its objects: 2 MiB each at most, with room to spare.
# nginx-gridfs's holds its window and its pooled client's reply buffer, a
# window more (services/nginx-gridfs/nginx.conf): 2.1 MiB measured.
# gridfs-fuse's daemon keeps up to 1.74 MiB of chunks per open file
# (services/gridfs-fuse/openfiles.go), nginx reading it with direct I/O its two
# 256 KiB output buffers, and the Go heap the garbage of the ones served
# meanwhile: 2.0-2.4 MiB measured.
PER_STALLED_MIB = {"nginx-gridfs": 2.5, "gridfs-fuse": 3}
DEFAULT_PER_STALLED_MIB = 2
CLOSED_LINE = "SEND_TIMEOUT_MS"  # what each path logs as it closes a stalled response


@pytest.fixture(scope="module")
def content() -> bytes:
    return random.Random(20261125).randbytes(SIZE)


@pytest.fixture(scope="module")
def gridfs_db(mongo_uri, content):
    client = MongoClient(mongo_uri)
    try:
        client.drop_database(DB_NAME)
        gridfs.GridFSBucket(client[DB_NAME]).upload_from_stream(NAME, content)
    finally:
        client.close()


@pytest.fixture(scope="module")
def postgres_db(postgres, content) -> str:
    url = postgres_database(postgres.url, DB_NAME)
    with psycopg.connect(url, autocommit=True) as connection:
        postgres_store.create_schema(connection)
        postgres_store.insert_file(connection, NAME, content, "application/octet-stream")
    return url


@dataclass
class Served:
    """A path as this test sees it, whatever runs it."""
    name: str
    url: str
    port: int
    pids: list[int]                 # process trees whose memory counts
    log: Callable[[], str]
    closing_line: str | None = None  # what it logs as it closes a stalled response


APP_PATHS = ["node", "flask", "flask-postgres"]
SERVER_PATHS = ["nginx-static", "httpd-static", "nginx-gridfs", "gridfs-fuse", "nginx-cache"]
NGINX_SEND_TIMEOUT = f"send_timeout {SEND_TIMEOUT_S}s;"


@pytest.fixture(scope="module")
def files_dir(content):
    """NAME on disk, readable by the servers' unprivileged workers."""
    base = Path(tempfile.mkdtemp(prefix="lab-slow-readers-"))
    base.chmod(0o755)
    (base / NAME).write_bytes(content)
    (base / NAME).chmod(0o644)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def with_send_timeout(server):
    """An nginx path's own configuration, plus send_timeout in its http block."""
    config = server.config
    server.config = lambda: config().replace("\nhttp {\n", f"\nhttp {{\n    {NGINX_SEND_TIMEOUT}\n", 1)
    return server


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.native) for name in APP_PATHS + SERVER_PATHS])
def service(request):
    name = request.param
    if name in APP_PATHS:
        if name == "flask-postgres":
            started = flask_postgres_service(request.getfixturevalue("postgres_db"))
        else:
            request.getfixturevalue("gridfs_db")
            make = node_service if name == "node" else flask_service
            started = make(request.getfixturevalue("mongo_uri"), DB_NAME)
        # A long request deadline: FerretDB, slow with 40 bodies starting at
        # once on a shared machine, must not turn the stalled requests into 503s.
        started.env.update(SEND_TIMEOUT_MS=str(SEND_TIMEOUT_S * 1000), NODE_MAX_STREAMS=str(NODE_SLOTS),
                           REQUEST_DEADLINE_MS="20000")
        started.start()
        # the whole log: its closing lines are counted (log() is its tail)
        yield Served(name, started.url, started.port, [started.proc.pid],
                     lambda: started.log_path.read_text(errors="replace"), CLOSED_LINE)
        started.stop()
        return
    stops = []
    try:
        if name == "nginx-static":
            server = with_send_timeout(NginxStatic(request.getfixturevalue("files_dir"))).start()
            stops.append(server.stop)
            served = Served(name, server.url, server.port, [server.proc.pid], lambda: "")
        elif name == "httpd-static":
            server = HttpdStatic(request.getfixturevalue("files_dir"), servers=1, threads=64)
            config = server.config
            server.config = lambda: config().replace("\nTimeout 60\n", f"\nTimeout {SEND_TIMEOUT_S}\n")
            server.start()
            stops.append(server.stop)
            served = Served(name, server.url, server.port, [server.proc.pid], server.log)
        elif name in ("nginx-gridfs", "nginx-cache"):
            request.getfixturevalue("gridfs_db")
            prefix = Path(tempfile.mkdtemp(prefix="lab-slow-readers-gridfs-"))
            (prefix / "files").mkdir()
            # A long queue wait, as the app paths' deadline above: 40 bodies
            # start at once on 8 threads.
            module = Nginx(build_module(), request.getfixturevalue("mongo_uri"), prefix / "files", prefix, DB_NAME,
                           http_extra=f"{NGINX_SEND_TIMEOUT} gridfs_queue_timeout 20s;")
            stops += [module.stop, lambda: shutil.rmtree(prefix, ignore_errors=True)]
            served = Served(name, module.url(), module.port, [module.proc.pid], module.log)
            if name == "nginx-cache":
                cache = with_send_timeout(NginxCache(f"127.0.0.1:{module.port}")).start()
                stops.insert(0, cache.stop)
                served = Served(name, cache.url, cache.port, [cache.proc.pid], cache.log)
        else:  # gridfs-fuse
            request.getfixturevalue("gridfs_db")
            mount = GridFSMount(request.getfixturevalue("fuse_binary"), request.getfixturevalue("mongo_uri"),
                                DB_NAME).start()
            stops.append(mount.stop)
            server = with_send_timeout(NginxOnFuse(mount)).start()
            stops.insert(0, server.stop)
            served = Served(name, server.url, server.port, [server.proc.pid, mount.proc.pid], server.log)
        yield served
    finally:
        for stop in stops:
            stop()


def stalled_client(port: int) -> socket.socket:
    """A GET of the file whose client reads nothing, not even the head."""
    sock = small_window_socket()
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /files/{NAME} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
    return sock


def small_window_socket() -> socket.socket:
    sock = socket.socket()
    # Before connect: a small window, and Ethernet's segment size instead of
    # loopback's 64 KiB, as on the compose network (the kernel sizes the
    # server's send buffer by segments: 64 KiB ones grow it to 4 MiB).
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1448)
    return sock


def slow_reader(port: int, stop: threading.Event) -> tuple[int, str]:
    """A GET whose client takes 2 KiB every 1/8 s until `stop`: a 255 KiB
    chunk takes it twice the send timeout, but the server's socket has room
    again every few seconds.
    The bytes it received, and whether the server "closed" it or it was
    still "open"."""
    sock = small_window_socket()
    sock.settimeout(30)
    try:
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET /files/{NAME} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        received = 0
        while not stop.is_set():
            try:
                data = sock.recv(2048)
            except ConnectionResetError:
                data = b""
            if not data:
                return received, "closed"
            received += len(data)
            time.sleep(0.125)
        return received, "open"
    finally:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()


def drain(sock: socket.socket) -> tuple[int, str]:
    """Bytes the server sent before it closed, and how it ended ("closed",
    or "open" if it kept the connection past 10 s of silence)."""
    sock.settimeout(10)
    received = 0
    try:
        while data := sock.recv(65536):
            received += len(data)
    except ConnectionResetError:
        pass
    except TimeoutError:
        return received, "open"
    return received, "closed"


def timed_get(service) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.get(f"{service.url}/files/{NAME}", timeout=30)
    return response, time.monotonic() - started


def established(port: int, client_ports: set[int]) -> int:
    """How many of these clients' connections the server on `port` still
    holds established (a closed one is in FIN-WAIT or gone)."""
    out = subprocess.run(["ss", "-Htn", "state", "established", f"( sport = :{port} )"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    peers = {int(line.split()[-1].rsplit(":", 1)[1]) for line in out.splitlines() if line.strip()}
    return len(peers & client_ports)


def closures(service, client_ports: set[int]) -> int:
    """Stalled responses the server has closed."""
    return len(client_ports) - established(service.port, client_ports)


def logged_closures(service) -> int | None:
    """The closures an app path logged (None: its server logs none at warn)."""
    return service.log().count(service.closing_line) if service.closing_line else None


def test_stalled_readers_hold_no_slot_are_closed_by_the_send_timeout_and_memory_stays_bounded(service, content):
    digest = hashlib.sha256(content).hexdigest()
    warm = requests.get(f"{service.url}/files/{NAME}", timeout=30)  # connected, code loaded
    assert warm.status_code == 200 and hashlib.sha256(warm.content).hexdigest() == digest
    idle = rss_mib(service.pids)

    stop_slow = threading.Event()
    slow_pool = ThreadPoolExecutor(1)
    slow = slow_pool.submit(slow_reader, service.port, stop_slow)
    stalled = [stalled_client(service.port) for _ in range(STALLED)]
    client_ports = {sock.getsockname()[1] for sock in stalled}
    stall_began = time.monotonic()
    try:
        # Every stalled response under way (its head and first bytes wait in
        # the client's socket, unread), then a moment for its socket to fill.
        pending = list(stalled)
        while pending:
            assert time.monotonic() - stall_began < 15, f"{len(pending)} stalled requests never answered"
            ready = select.select(pending, [], [], 1)[0]
            pending = [sock for sock in pending if sock not in ready]
        all_stalled = time.monotonic()
        time.sleep(0.5)
        stalled_rss = peak = rss_mib(service.pids)  # the stalled responses alone
        with ThreadPoolExecutor(SERVED) as pool:
            answers = list(pool.map(lambda _: timed_get(service), range(SERVED)))
        peak = max(peak, rss_mib(service.pids))
        for response, elapsed in answers:
            assert response.status_code == 200, (response.status_code, response.text[:200], service.log())
            assert hashlib.sha256(response.content).hexdigest() == digest
            assert elapsed < 5, f"a request took {elapsed:.1f} s while {STALLED} clients stalled"
        # Nothing was closed before its time: the timer runs from the last
        # write that went out, after the stall began.
        assert time.monotonic() - stall_began < SEND_TIMEOUT_S - 0.5, "serving the others took too long"
        assert closures(service, client_ports) == 0 and logged_closures(service) in (0, None), service.log()

        deadline = all_stalled + 2 * SEND_TIMEOUT_S + 6
        while ((closures(service, client_ports) < STALLED or logged_closures(service) not in (STALLED, None))
               and time.monotonic() < deadline):
            peak = max(peak, rss_mib(service.pids))
            time.sleep(0.2)
        closed_after = time.monotonic() - stall_began
        assert closures(service, client_ports) == STALLED, (
            f"{closures(service, client_ports)} of {STALLED} stalled responses closed within {closed_after:.1f} s\n"
            f"{service.log()}")
        assert logged_closures(service) in (STALLED, None), service.log()
        for sock in stalled:
            received, end = drain(sock)
            assert end == "closed" and 0 < received < SIZE, (received, end)
        # The slow reader, one piece outstanding longer than the send timeout
        # but taking bytes all along, was not cut (nor counted above).
        time.sleep(max(0.0, stall_began + 2.5 * SEND_TIMEOUT_S - time.monotonic()))
        stop_slow.set()
        slow_received, slow_end = slow.result()
        assert slow_end == "open" and slow_received > 0, (slow_received, slow_end)
        assert closures(service, client_ports) == STALLED and logged_closures(service) in (STALLED, None)
    finally:
        stop_slow.set()
        slow_pool.shutdown()
        for sock in stalled:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    after = requests.get(f"{service.url}/files/{NAME}", timeout=30)
    assert after.status_code == 200 and hashlib.sha256(after.content).hexdigest() == digest
    each = (stalled_rss - idle) / STALLED
    print(f"{service.name}: RSS idle {idle:.1f} MiB, {stalled_rss:.1f} MiB with {STALLED} stalled "
          f"({each:.2f} MiB each), {peak:.1f} MiB at the peak while serving {SERVED} more; "
          f"all closed after {closed_after:.1f} s")
    bound = PER_STALLED_MIB.get(service.name, DEFAULT_PER_STALLED_MIB)
    assert peak - idle < STALLED * bound, f"{peak - idle:.1f} MiB for {STALLED} stalled responses"
    if service.name.startswith("flask"):
        # gunicorn.conf.py's arithmetic: its cap of bodies under way, each as
        # large as a stalled one measured here, and its budget for the
        # connections waiting (test_deadlines.py measures those) fit the
        # container.
        conf = runpy.run_path(str(GUNICORN_CONF))
        streams, waiting = int(conf["open_streams"]), conf["CONNECTIONS_BUDGET_MIB"]
        assert idle + streams * each + waiting < TARGET_MEM_MIB, (idle, streams, each, waiting)


@pytest.mark.parametrize("value", ["0", "60s", "-1"])
def test_a_bad_send_timeout_stops_gunicorn_at_start(value):
    service = flask_service("mongodb://127.0.0.1:1/", DB_NAME)  # never reached
    result = subprocess.run(service.command, cwd=service.cwd, capture_output=True, text=True, timeout=30,
                            env={**os.environ, **service.env, "SEND_TIMEOUT_MS": value})
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"SEND_TIMEOUT_MS must be a positive whole number of milliseconds, got {value!r}"], result.stderr


NGINX_GRIDFS_CAP = "gridfs_max_responses 180;"
PLACE_DEADLINE_MS = 1500  # gridfs_deadline here (the lab's is REQUEST_DEADLINE_MS, 3 s)


def answered_from(sock: socket.socket) -> bytes:
    """The status line a stalled client finally reads (it has been sent)."""
    sock.settimeout(10)
    return sock.recv(4096).split(b"\r\n", 1)[0]


def test_nginx_gridfs_caps_its_responses_under_way_within_its_memory(mongo_uri, gridfs_db, files_dir, content):
    """services/nginx-gridfs/nginx.conf caps the responses past their
    lookup (gridfs_max_responses), since each stalled one holds about 2 MiB
    until send_timeout: without the cap about 230 of them fill the 512 MiB
    limit and the kernel kills nginx. The lab's file, its cap set to 8 and
    its deadline to 1.5 s here: 8 stalled clients; a 9th request waits for
    a place and is a 503 at the deadline, while /health is served at once;
    one that leaves while it waits leaves the line, and the next one is
    served whole as soon as a stalled client goes.
    The lab's cap times what a stalled response holds fits the limit."""
    digest = hashlib.sha256(content).hexdigest()
    server = LabNginxGridFS(mongo_uri, DB_NAME, files_dir, {
        NGINX_GRIDFS_CAP: f"gridfs_max_responses 8;\n    gridfs_deadline {PLACE_DEADLINE_MS}ms;"})
    server.start()
    stalled = []
    try:
        # served once first, as the other memory test: the driver's pool and
        # the reply buffers malloc keeps from then on are the worker's, not
        # each stalled response's
        warm = requests.get(f"{server.url}/files/{NAME}", timeout=30)
        assert warm.status_code == 200 and hashlib.sha256(warm.content).hexdigest() == digest
        idle = rss_mib([server.proc.pid])
        stalled = [stalled_client(server.port) for _ in range(8)]
        pending, began = list(stalled), time.monotonic()
        while pending:
            assert time.monotonic() - began < 15, f"{len(pending)} stalled requests never answered\n{server.log()}"
            ready = select.select(pending, [], [], 1)[0]
            pending = [sock for sock in pending if sock not in ready]
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(timed_get, server)
            health = requests.get(f"{server.url}/health", timeout=5)
            assert health.status_code == 200 and health.elapsed.total_seconds() < 0.5
            refused, elapsed = waiting.result()
        assert refused.status_code == 503 and refused.headers.get("Retry-After") == "1", refused.status_code
        assert PLACE_DEADLINE_MS / 1000 - 0.1 < elapsed < PLACE_DEADLINE_MS / 1000 + 1, elapsed
        each = (rss_mib([server.proc.pid]) - idle) / len(stalled)
        # one that leaves while it waits gives its turn up (it leaves the line)
        left = stalled_client(server.port)
        time.sleep(0.2)
        left.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left.close()
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(timed_get, server)
            time.sleep(0.5)
            gone = stalled.pop()
            assert answered_from(gone) == b"HTTP/1.1 200 OK"
            gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            gone.close()
            answer, elapsed = waiting.result()
        assert answer.status_code == 200 and hashlib.sha256(answer.content).hexdigest() == digest
        assert 0.5 <= elapsed < PLACE_DEADLINE_MS / 1000, elapsed
    finally:
        for sock in stalled:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        server.stop()
    lab_conf = (SERVICES / "nginx-gridfs" / "nginx.conf").read_text()
    cap = int(re.search(r"gridfs_max_responses (\d+);", lab_conf)[1])
    print(f"nginx-gridfs: {each:.2f} MiB per stalled response; the lab's cap of {cap} holds {cap * each:.0f} MiB")
    assert idle + cap * PER_STALLED_MIB["nginx-gridfs"] < TARGET_MEM_MIB, (idle, cap)
    assert each < PER_STALLED_MIB["nginx-gridfs"], each


def test_nginx_gridfs_requests_still_looking_up_take_no_place(mongo_uri, ferretdb, gridfs_db, files_dir, content):
    """Only a response past its lookup holds a window, so only it takes a
    place. Before, nginx's limit_conn counted every request under way:
    those whose lookup waited for a database restarting, or whose client
    had left while it was queued (the floor benchmark's warm-up), and the
    next requests got a 503 at once. The cap at 8, the database held while
    24 requests arrive, then let go: every one is served whole."""
    digest = hashlib.sha256(content).hexdigest()
    server = LabNginxGridFS(mongo_uri, DB_NAME, files_dir, {NGINX_GRIDFS_CAP: "gridfs_max_responses 8;"})
    server.start()
    try:
        with ThreadPoolExecutor(24) as pool:
            with ferretdb.paused():
                answers = [pool.submit(timed_get, server) for _ in range(24)]
                time.sleep(1)
                assert not any(answer.done() for answer in answers)
            answers = [answer.result()[0] for answer in answers]
        statuses = [answer.status_code for answer in answers]
        assert statuses == [200] * 24, f"{statuses}\n{server.log()}"
        assert all(hashlib.sha256(answer.content).hexdigest() == digest for answer in answers)
    finally:
        server.stop()
