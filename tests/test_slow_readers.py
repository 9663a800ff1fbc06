"""Slow readers (issue 24) on node, flask and flask-postgres, run as the real
processes against real FerretDB and PostgreSQL: 40 clients request a
multi-chunk file and read nothing. While they stall, other clients get
whole bodies within seconds (node with fewer MongoDB slots than stalled
clients: a stalled response holds no slot); after the send timeout
(SEND_TIMEOUT_MS, 60 s by default, a few seconds here) every stalled
response is closed, cut short, and none before, while a client reading
slowly but steadily is not cut (the timer runs between writes, not over a
chunk or the body, as nginx's send_timeout); the service's resident
memory stays bounded meanwhile, within the container's limit at the Python
paths' connection cap."""
import hashlib
import os
import random
import runpy
import select
import socket
import struct
import threading
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gridfs
import psycopg
import pytest
import requests
from pymongo import MongoClient

import postgres_store
from service_processes import (GUNICORN_CONF, flask_postgres_service, flask_service, node_service,
                               postgres_database)

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
PER_STALLED_MIB = 2
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


@pytest.fixture(params=["node", "flask", "flask-postgres"])
def service(request):
    if request.param == "flask-postgres":
        started = flask_postgres_service(request.getfixturevalue("postgres_db"))
    else:
        request.getfixturevalue("gridfs_db")
        make = node_service if request.param == "node" else flask_service
        started = make(request.getfixturevalue("mongo_uri"), DB_NAME)
    # A long request deadline: FerretDB, slow with 40 bodies starting at
    # once on a shared machine, must not turn the stalled requests into 503s.
    started.env.update(SEND_TIMEOUT_MS=str(SEND_TIMEOUT_S * 1000), NODE_MAX_STREAMS=str(NODE_SLOTS),
                       REQUEST_DEADLINE_MS="20000")
    started.start()
    yield started
    started.stop()


def rss_mib(pid: int) -> float:
    """Resident memory of pid and its children (gunicorn's workers), MiB."""
    pids = [pid] + [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
                    if _parent(stat) == pid]
    total_kib = 0
    for each in pids:
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except FileNotFoundError:
            continue
        total_kib += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return total_kib / 1024


def _parent(stat: Path) -> int | None:
    try:
        # after the command's closing parenthesis: state, then the parent's pid
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return None


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


def closures(service) -> int:
    return service.log_path.read_text(errors="replace").count(CLOSED_LINE)


def test_stalled_readers_hold_no_slot_are_closed_by_the_send_timeout_and_memory_stays_bounded(service, content):
    digest = hashlib.sha256(content).hexdigest()
    warm = requests.get(f"{service.url}/files/{NAME}", timeout=30)  # connected, code loaded
    assert warm.status_code == 200 and hashlib.sha256(warm.content).hexdigest() == digest
    pid = service.proc.pid
    idle = rss_mib(pid)

    stop_slow = threading.Event()
    slow_pool = ThreadPoolExecutor(1)
    slow = slow_pool.submit(slow_reader, service.port, stop_slow)
    stalled = [stalled_client(service.port) for _ in range(STALLED)]
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
        stalled_rss = peak = rss_mib(pid)  # the stalled responses alone
        with ThreadPoolExecutor(SERVED) as pool:
            answers = list(pool.map(lambda _: timed_get(service), range(SERVED)))
        peak = max(peak, rss_mib(pid))
        for response, elapsed in answers:
            assert response.status_code == 200, (response.status_code, response.text[:200], service.log())
            assert hashlib.sha256(response.content).hexdigest() == digest
            assert elapsed < 5, f"a request took {elapsed:.1f} s while {STALLED} clients stalled"
        # Nothing was closed before its time: the timer runs from the last
        # write that went out, after the stall began.
        assert time.monotonic() - stall_began < SEND_TIMEOUT_S - 0.5, "serving the others took too long"
        assert closures(service) == 0, service.log()

        deadline = all_stalled + 2 * SEND_TIMEOUT_S + 6
        while closures(service) < STALLED and time.monotonic() < deadline:
            peak = max(peak, rss_mib(pid))
            time.sleep(0.2)
        closed_after = time.monotonic() - stall_began
        assert closures(service) == STALLED, (
            f"{closures(service)} of {STALLED} stalled responses closed within {closed_after:.1f} s\n{service.log_path.read_text()}")
        for sock in stalled:
            received, end = drain(sock)
            assert end == "closed" and 0 < received < SIZE, (received, end)
        # The slow reader, one piece outstanding longer than the send timeout
        # but taking bytes all along, was not cut (nor counted above).
        time.sleep(max(0.0, stall_began + 2.5 * SEND_TIMEOUT_S - time.monotonic()))
        stop_slow.set()
        slow_received, slow_end = slow.result()
        assert slow_end == "open" and slow_received > 0, (slow_received, slow_end)
        assert closures(service) == STALLED
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
    assert peak - idle < STALLED * PER_STALLED_MIB, f"{peak - idle:.1f} MiB for {STALLED} stalled responses"
    if service.name.startswith("flask"):
        # gunicorn.conf.py's arithmetic: its connection cap of stalled
        # responses, each as large as measured here, fit the container.
        cap = runpy.run_path(str(GUNICORN_CONF))["worker_connections"]
        assert idle + cap * each < TARGET_MEM_MIB, (idle, cap, each)


@pytest.mark.parametrize("value", ["0", "60s", "-1"])
def test_a_bad_send_timeout_stops_gunicorn_at_start(value):
    service = flask_service("mongodb://127.0.0.1:1/", DB_NAME)  # never reached
    result = subprocess.run(service.command, cwd=service.cwd, capture_output=True, text=True, timeout=30,
                            env={**os.environ, **service.env, "SEND_TIMEOUT_MS": value})
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"SEND_TIMEOUT_MS must be a positive whole number of milliseconds, got {value!r}"], result.stderr
