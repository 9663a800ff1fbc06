"""The nginx GridFS module under hostile data and failures (issue 13): unsafe
stored header values, credentials in the URI, MongoDB stopped under load,
chunks larger than the window, clients that leave mid-stream. The outage
and client-abort tests also run on the module's ASan + UBSan build, which
must write no report. Real nginx, real FerretDB, real sockets."""
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gridfs
import pymongo
import pytest
import requests

from support.docker_helpers import REPO, docker, remove_container
from support.nginx_gridfs_build import NGINX_BIN, Nginx, build_module
from support.processes import free_port

from hosts import mongo_auth_options
from lab_compose import settings_in

DB = "nginx_gridfs_hardening"
TIMEOUT = 30
BIG_CHUNK = 16 * 1024 * 1024  # the largest chunkSize the module accepts
PASSWORD = "S3cret-h13-pw"


@pytest.fixture(scope="module")
def stored(mongo_uri):
    client = pymongo.MongoClient(mongo_uri)
    client.drop_database(DB)
    bucket = gridfs.GridFSBucket(client[DB])
    data = {"1KB.bin": os.urandom(1024), "1MB.bin": os.urandom(1_000_000),
            "10MB.bin": os.urandom(10_000_000), "big-chunks.bin": os.urandom(2 * BIG_CHUNK + 123),
            "chunk-and-a-byte.bin": os.urandom(BIG_CHUNK + 1)}
    for name in ("1KB.bin", "1MB.bin", "10MB.bin"):
        bucket.upload_from_stream(name, data[name])
    for name in ("big-chunks.bin", "chunk-and-a-byte.bin"):
        bucket.upload_from_stream(name, data[name], chunk_size_bytes=BIG_CHUNK)
    # Values a writer (or an attacker with write access) may have stored.
    for name, fields in {
        "crlf-type.html": {"contentType": "text/html\r\nSet-Cookie: owned=1"},
        # PostgreSQL (under FerretDB) cannot store NUL: another control byte
        "ctl-type.txt": {"contentType": "text/plain\x0bevil\x7f"},
        "quote-md5.bin": {"md5": 'abc"\r\nX-Injected: 1'},
    }.items():
        file_id = bucket.upload_from_stream(name, b"<p>payload</p>")
        client[DB]["fs.files"].update_one({"_id": file_id}, {"$set": fields})
    files_dir = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-files-"))
    files_dir.chmod(0o755)
    yield data
    client.drop_database(DB)
    client.close()
    shutil.rmtree(files_dir, ignore_errors=True)


def start_nginx(uri: str, http_extra: str = "", threads: int = 8, sanitize: bool = False,
                files: dict[str, bytes] | None = None) -> Nginx:
    """files: written into the directory of /static/, which http_extra
    names as @FILES@."""
    prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
    files_dir = prefix / "files"
    files_dir.mkdir()
    for name, data in (files or {}).items():
        (files_dir / name).write_bytes(data)
    return Nginx(build_module(sanitize), uri, files_dir, prefix, DB, http_extra.replace("@FILES@", str(files_dir)),
                 threads, sanitize)


def stop_nginx(server: Nginx) -> None:
    """Stopped, then failed if the sanitizer wrote a report (its text in
    the message, whatever else failed)."""
    server.stop()
    try:
        server.assert_no_sanitizer_report()
    finally:
        shutil.rmtree(server.prefix, ignore_errors=True)


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "asan"])
def sanitize(request) -> bool:
    return request.param


@pytest.fixture(scope="module")
def nginx(stored, mongo_uri):
    server = start_nginx(mongo_uri)
    yield server
    stop_nginx(server)


def get(nginx, path, **headers):
    return requests.get(nginx.url(path), headers=headers, timeout=TIMEOUT)


def raw_get(port: int, path: str) -> bytes:
    """The response as bytes on the wire: requests would hide a split."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


# --- 1. safe headers ---

@pytest.mark.parametrize("name,expected_type", [("crlf-type.html", "text/html"), ("ctl-type.txt", "text/plain")])
def test_unsafe_content_type_falls_back_to_the_extension(nginx, stored, name, expected_type):
    wire = raw_get(nginx.port, f"/files/{name}")
    head, _, body = wire.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert body == b"<p>payload</p>"
    assert b"Set-Cookie" not in head and b"evil" not in head and b"\x0b" not in head
    content_type = re.search(rb"\r\nContent-Type: ([^\r\n]*)", head).group(1).decode()
    assert content_type.startswith(expected_type)


def test_unsafe_md5_falls_back_to_the_modules_etag(nginx, stored):
    wire = raw_get(nginx.port, "/files/quote-md5.bin")
    head = wire.partition(b"\r\n\r\n")[0]
    assert b"X-Injected" not in head
    etag = re.search(rb"\r\nETag: ([^\r\n]*)", head).group(1).decode()
    assert re.fullmatch(r'"[0-9a-f]{24}-[0-9a-f]+-[0-9a-f]+"', etag), etag


def test_unsafe_values_are_logged_once_per_request_and_escaped(nginx, stored):
    before = nginx.log().count("not a safe header value")
    raw_get(nginx.port, "/files/crlf-type.html")
    time.sleep(0.2)
    log = nginx.log()
    lines = [line for line in log.splitlines() if "not a safe header value" in line]
    assert len(lines) == before + 1
    assert "text/html\\x0d\\x0aSet-Cookie: owned=1" in lines[-1]
    # the raw CR/LF never reached the log: no line starts with the payload
    assert not any(line.startswith("Set-Cookie") for line in log.splitlines())


# --- 2. no secrets in logs ---

def all_log_text(server: Nginx) -> str:
    return "".join(p.read_text(errors="replace") for p in server.prefix.rglob("*.log"))


def test_password_in_the_uri_never_reaches_a_log(stored):
    dead = free_port()  # nothing listens: every request fails and is logged
    server = start_nginx(f"mongodb://labuser:{PASSWORD}@127.0.0.1:{dead}/?authSource=admin",
                         http_extra="error_log stderr debug;")
    try:
        statuses = {get(server, "/files/1KB.bin").status_code for _ in range(3)}
        assert statuses == {503}
        time.sleep(0.5)
    finally:
        server.stop()
    stderr = server.proc.stderr.read().decode(errors="replace")
    text = all_log_text(server) + stderr
    assert "gridfs: MongoDB unavailable" in text, "the failures are logged"
    assert f"127.0.0.1:{dead}" in text, "hosts are logged"
    assert PASSWORD not in text
    assert "labuser" not in text
    shutil.rmtree(server.prefix, ignore_errors=True)


@pytest.mark.native  # the module built, nginx
def test_password_in_an_invalid_uri_is_not_in_the_config_error(tmp_path):
    module = build_module()
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"""
pid {tmp_path}/nginx.pid;
error_log {tmp_path}/error.log;
load_module {module};
events {{ }}
http {{
    mongo "mongodb://labuser:{PASSWORD}@127.0.0.1:notaport/";
    server {{ listen 127.0.0.1:{free_port()}; location /f/ {{ gridfs lab; }} }}
}}
""")
    result = subprocess.run([NGINX_BIN, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "e.log")],
                            capture_output=True, text=True, timeout=30)
    output = result.stdout + result.stderr + "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert result.returncode != 0
    assert "invalid mongo URI" in output and "<credentials>@127.0.0.1:notaport" in output, output
    assert PASSWORD not in output and "labuser" not in output


def test_a_login_the_deployment_refuses_is_a_500_and_the_right_one_serves(stored):
    """A wrong password is the configuration's error: 500, no Retry-After
    (a 503 would tell clients to come back for what no retry mends), the
    password in no log. The lab's mongo image with a login (the FerretDB
    stand-in refuses it at the first query, as PostgreSQL's 28P01; MongoDB
    at the handshake, as AuthenticationFailed)."""
    image = settings_in(REPO / "local.env")["MONGO_IMAGE"]
    options = mongo_auth_options(image)
    name, port = f"lab-login-{os.getpid()}", free_port()
    remove_container(name)
    docker("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:27017", "-e", "MONGO_INITDB_ROOT_USERNAME=labuser",
           "-e", f"MONGO_INITDB_ROOT_PASSWORD={PASSWORD}", image)
    try:
        right = f"mongodb://labuser:{PASSWORD}@127.0.0.1:{port}/?{options}"
        client = pymongo.MongoClient(right, serverSelectionTimeoutMS=2000)
        deadline = time.monotonic() + 60
        while True:
            try:
                client.admin.command("ping")
                break
            except pymongo.errors.PyMongoError:
                assert time.monotonic() < deadline, docker("logs", name)
                time.sleep(0.5)
        gridfs.GridFSBucket(client[DB]).upload_from_stream("1KB.bin", stored["1KB.bin"])
        client.close()
        wrong = start_nginx(right.replace(PASSWORD, "not-the-password"))
        try:
            answers = [get(wrong, "/files/1KB.bin") for _ in range(3)]
        finally:
            stop_nginx(wrong)
        assert [(r.status_code, r.headers.get("Retry-After")) for r in answers] == [(500, None)] * 3, \
            all_log_text(wrong)[-2000:]
        assert PASSWORD not in all_log_text(wrong) and "not-the-password" not in all_log_text(wrong)
        served = start_nginx(right)
        try:
            answer = get(served, "/files/1KB.bin")
        finally:
            stop_nginx(served)
        assert answer.status_code == 200 and answer.content == stored["1KB.bin"]
    finally:
        remove_container(name)


# --- 3. fail fast ---

@pytest.fixture
def own_nginx(stored, mongo_uri, sanitize):
    # Stopped (SIGTERM), FerretDB keeps serving its open connections for 3 s,
    # then cancels what they still wait for: a lookup sent on one is held 3 s
    # (then a 503), however fast the module fails once it knows. The lab
    # bounds that with its deadline (REQUEST_DEADLINE_MS); so does this test.
    server = start_nginx(mongo_uri, "gridfs_deadline 500ms;", sanitize=sanitize)
    yield server
    stop_nginx(server)


def test_mongodb_stopped_under_load_fails_fast_and_recovers(own_nginx, stored, ferretdb):
    nginx = own_nginx
    assert get(nginx, "/files/1KB.bin").status_code == 200
    results = []  # (start, end, status)
    stop = threading.Event()

    def load():
        while not stop.is_set():
            started = time.monotonic()
            try:
                status = get(nginx, "/files/1KB.bin").status_code
            except requests.RequestException as exc:
                status = repr(exc)
            results.append((started, time.monotonic(), status))

    workers = [threading.Thread(target=load) for _ in range(8)]
    for w in workers:
        w.start()
    restarting = restarted = None
    try:
        time.sleep(1)
        ferretdb.stop()
        time.sleep(4)
        # start() returns once the port answers, so answers between these two
        # instants may already be 200s: the outage ends where the restart begins
        restarting = time.monotonic()
        ferretdb.start()
        restarted = time.monotonic()
        time.sleep(6)
    finally:
        if restarted is None:
            ferretdb.start()
        stop.set()
        for w in workers:
            w.join(60)
    failures = [r for r in results if r[2] != 200]
    assert failures, "the outage was not seen"
    # a 500 names its cause in the error log ("... failed: <the server's words>")
    assert {r[2] for r in failures} == {503}, (
        {r[2] for r in failures}, [line for line in nginx.log().splitlines() if "failed: " in line][:5])
    first_failure = min(end for _, end, _ in failures)
    during = [r for r in results if first_failure <= r[0] and r[1] <= restarting]
    took = sorted(end - start for start, end, _ in during)
    slowest, median = took[-1], took[len(took) // 2]
    print(f"\noutage: {len(during)} answers after the first 503, median {median * 1000:.0f} ms, "
          f"slowest {slowest * 1000:.0f} ms")
    assert during and all(status == 503 for _, _, status in during)
    assert slowest < 1.0, f"a 503 took {slowest:.2f} s"
    # failed fast, not by the deadline: once the module knows, a 503 at once
    assert median < 0.1, f"the median 503 took {median:.2f} s"
    recovered = min((end for start, end, status in results if status == 200 and start >= restarted), default=None)
    assert recovered is not None, "no 200 after MongoDB came back"
    print(f"recovery: first 200 {recovered - restarted:.2f} s after MongoDB was back")
    assert recovered - restarted < 5.0


def test_queue_deadline_answers_503_without_querying(stored, mongo_uri, ferretdb, sanitize):
    # One thread, a frozen database: the first job holds the thread through
    # four socket timeouts (its read and the retry: 20 s at the default 5 s,
    # 6 s at 1.5 s), the others wait in the queue past gridfs_queue_timeout.
    with_socket_timeout = mongo_uri + ("&" if "?" in mongo_uri else "?") + "socketTimeoutMS=1500"
    server = start_nginx(with_socket_timeout, "gridfs_queue_timeout 300ms;", threads=1, sanitize=sanitize)
    try:
        assert get(server, "/files/1KB.bin").status_code == 200
        ferretdb.pause()
        try:
            with ThreadPoolExecutor(12) as pool:
                statuses = list(pool.map(lambda _: get(server, "/files/1KB.bin").status_code, range(12)))
        finally:
            ferretdb.resume()
        assert 503 in statuses
        assert "more than gridfs_queue_timeout" in server.log()
    finally:
        stop_nginx(server)


def test_unreachable_deployment_is_503_before_any_header(stored, sanitize):
    # Read before the headers: a failure is a 5xx with a complete body.
    server = start_nginx(f"mongodb://127.0.0.1:{free_port()}/", sanitize=sanitize)
    try:
        wire = raw_get(server.port, "/files/1MB.bin")
        assert wire.startswith(b"HTTP/1.1 503")
    finally:
        stop_nginx(server)


# --- 4. bounded memory ---

def test_chunks_larger_than_the_window_right_bytes_bounded_memory(nginx, stored):
    before = nginx.worker_status("VmHWM")
    r = get(nginx, "/files/big-chunks.bin")
    assert r.status_code == 200 and r.content == stored["big-chunks.bin"]
    ranged = get(nginx, "/files/big-chunks.bin", Range=f"bytes={BIG_CHUNK - 5}-{BIG_CHUNK + 4}")
    assert ranged.content == stored["big-chunks.bin"][BIG_CHUNK - 5:BIG_CHUNK + 5]
    growth_mib = (nginx.worker_status("VmHWM") - before) / 1024
    print(f"\n32 MiB file in 16 MiB chunks: worker peak RSS grew {growth_mib:.0f} MiB")
    # One chunk in the window, plus the driver's transient buffers for one
    # reply (its read buffer, grown by doubling, and the document's copy):
    # about 4 chunks, against 8 if the module read the file whole.
    assert growth_mib < 5 * BIG_CHUNK / 2**20


def test_window_is_gridfs_buffer_size_rounded_up_to_whole_chunks(stored, mongo_uri):
    server = start_nginx(mongo_uri, "gridfs_buffer_size 300k;")
    try:
        server.debug_log.write_text("")
        assert get(server, "/traced/1MB.bin").content == stored["1MB.bin"]
        windows = [(int(a), int(b)) for a, b in
                   re.findall(r"gridfs read chunks (\d+)-(\d+)", server.debug_log.read_text())]
        # 300 KiB is 1.2 chunks of 255 KiB: two chunks a request, less than
        # the buffer plus one chunk; the 4-chunk file streams in windows of
        # half of it, one chunk each, one sending while the next is read
        assert windows == [(0, 0), (1, 1), (2, 2), (3, 3)]
    finally:
        stop_nginx(server)


def test_without_a_spare_client_each_window_is_a_query(stored, mongo_uri, slow_reader):
    # maxPoolSize=2: one response at a time may hold a client (half the
    # pool); the others read a window per query, with the same bytes.
    server = start_nginx(mongo_uri + "?maxPoolSize=2")
    try:
        server.debug_log.write_text("")
        holder = slow_reader(server.port, "/traced/10MB.bin")
        deadline = time.monotonic() + TIMEOUT
        while "gridfs cursor opened" not in server.debug_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "gridfs cursor opened" in server.debug_log.read_text()
        server.debug_log.write_text("")
        assert get(server, "/traced/10MB.bin").content == stored["10MB.bin"]
        log = server.debug_log.read_text()
        assert "gridfs cursor opened" not in log
        # this request's windows (the holder may read its next one meanwhile)
        reads = re.findall(r"\*(\d+) gridfs read chunks (\d+)-", log)
        (conn,) = {c for c, first in reads if first == "0"}
        assert len([c for c, _ in reads if c == conn]) == 16  # 39 chunks, 3 and 2 a window
        holder.close()
        # the held client went back to the pool: the next response streams
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            server.debug_log.write_text("")
            assert get(server, "/traced/10MB.bin").content == stored["10MB.bin"]
            if "gridfs cursor opened" in server.debug_log.read_text():
                break
            time.sleep(0.2)
        assert "gridfs cursor opened" in server.debug_log.read_text()
    finally:
        stop_nginx(server)


def database_connections(server: Nginx, database_port: int) -> int:
    """The worker's established TCP connections to the database: one per
    pooled client it ever used (a client keeps its connection), and the
    driver's monitor."""
    (pid,) = server.worker_pids()
    out = subprocess.run(["ss", "-Htnp", "state", "established", f"( dport = :{database_port} )"],
                         capture_output=True, text=True, timeout=10, check=True).stdout
    return sum(f"pid={pid}," in line for line in out.splitlines())


def test_the_pool_bounds_the_drivers_connections_and_their_read_buffers(stored, mongo_uri, ferretdb,
                                                                         slow_reader):
    """libmongoc keeps each pooled connection's read buffer at the largest
    reply it carried, so past the active responses the worker's memory is
    bounded by its pool: maxPoolSize connections, 32 unless the URI sets it.
    24 clients stall 10 MB responses on 4 threads: at most 16 hold a client
    (half the pool) and 4 query, where libmongoc's own default of 100 let
    all 24 hold one. Then reads of a file of a 16 MiB chunk and a byte (two
    windows: a held client's reply, or a query's, of 16 MiB each): idle
    again, the worker's RSS has grown by at most 32 MiB per connection.
    POOL_RSS_READS=1000 makes it the measurement quoted in
    docs/serving-paths.md (6 min here); 6 by default."""
    server = start_nginx(mongo_uri, "gridfs_queue_timeout 60s;", threads=4)  # all 24 are served
    try:
        assert get(server, "/files/1KB.bin").status_code == 200
        rss_before = server.worker_status("VmRSS")
        stalled = [slow_reader(server.port, "/files/10MB.bin") for _ in range(24)]
        # a pooled client keeps its connection: the count only grows, and
        # settles once every response has stalled holding its client or not
        seen, still_since = -1, time.monotonic()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and time.monotonic() - still_since < 5:
            now = database_connections(server, ferretdb.port)
            if now != seen:
                seen, still_since = now, time.monotonic()
            time.sleep(0.25)
        print(f"\n24 stalled 10 MB responses, 4 threads: {seen} connections to the database")
        # 16 held, 4 querying for the others (a query per window), the
        # monitor and at most one ping of the module's; 25 with the old pool
        assert 16 < seen <= 16 + 4 + 2, seen
        for sock in stalled:
            sock.close()
        time.sleep(1)

        reads = int(os.environ.get("POOL_RSS_READS", "6"))
        with ThreadPoolExecutor(min(reads, 20)) as pool:
            whole = sum(pool.map(lambda _: get(server, "/files/chunk-and-a-byte.bin").content
                                 == stored["chunk-and-a-byte.bin"], range(reads)))
        assert whole == reads
        connections = database_connections(server, ferretdb.port)
        time.sleep(1)  # the last responses' windows freed
        growth_mib = (server.worker_status("VmRSS") - rss_before) / 1024
        bound_mib = connections * 2 * BIG_CHUNK / 2**20
        print(f"then {reads} reads of a 16 MiB chunk and a byte: idle RSS {growth_mib:.0f} MiB above the "
              f"start, over {connections} connections (bound {bound_mib:.0f} MiB: 32 MiB each)")
        assert growth_mib <= bound_mib + 16
    finally:
        stop_nginx(server)


@pytest.fixture
def slow_reader():
    sockets = []

    def start(port: int, path: str) -> socket.socket:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(TIMEOUT)
        s.connect(("127.0.0.1", port))
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        sockets.append(s)
        return s

    yield start
    for s in sockets:
        s.close()


# --- 6. clients leaving mid-stream ---

def leave_mid_stream(port: int, path: str, reset: bool) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    s.recv(100_000)
    if reset:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def open_fds(nginx, db_port: int) -> tuple[int, int]:
    """The worker's descriptors: those that are not connections to the
    database, and those that are (the driver's pool keeps its clients'
    connections open, up to maxPoolSize: not a leak)."""
    (pid,) = nginx.worker_pids()
    to_db = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == db_port:
                to_db.add(fields[9])  # inode
    fds = os.listdir(f"/proc/{pid}/fd")
    db = 0
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        db += target.startswith("socket:[") and target[8:-1] in to_db
    return len(fds) - db, db


@pytest.fixture
def patient_nginx(stored, mongo_uri, sanitize):
    """No load shedding: 30 clients of 10 MB files queue past 1 s on FerretDB."""
    server = start_nginx(mongo_uri, "gridfs_queue_timeout 60s;", sanitize=sanitize)
    yield server
    stop_nginx(server)


def test_clients_leaving_mid_stream_under_load(patient_nginx, stored, mongo_uri):
    nginx = patient_nginx
    db_port = int(mongo_uri.rsplit(":", 1)[1].strip("/"))
    # Warm up: every thread busy at once, so the driver's pool has opened
    # all the database connections it will keep.
    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(lambda _: get(nginx, "/files/1MB.bin").content == stored["1MB.bin"], range(32)))
    fds_before, _ = open_fds(nginx, db_port)
    log_before = len(nginx.log())
    with ThreadPoolExecutor(30) as pool:
        list(pool.map(lambda i: leave_mid_stream(nginx.port, "/files/10MB.bin", i % 2 == 0), range(90),
                      timeout=120))
    # Every request ends (its jobs complete, its sockets close).
    deadline = time.monotonic() + 30
    while open_fds(nginx, db_port)[0] > fds_before and time.monotonic() < deadline:
        time.sleep(0.2)
    fds_after, db_connections = open_fds(nginx, db_port)
    print(f"\nworker descriptors: {fds_before} before, {fds_after} after; {db_connections} database connections")
    assert fds_after <= fds_before, "descriptors leaked"
    assert db_connections <= 100, "more database connections than the pool's clients"
    r = get(nginx, "/files/10MB.bin")
    assert r.content == stored["10MB.bin"]
    new_log = nginx.log()[log_before:]
    assert "[alert]" not in new_log and "[crit]" not in new_log and "[emerg]" not in new_log
    assert "exited on signal" not in new_log
    assert not re.search(r"\[error\].*gridfs", new_log), new_log[-2000:]
    # every response that held a client gave it back: more than half the
    # pool's clients (50) have come and gone, and responses still stream
    nginx.debug_log.write_text("")
    assert get(nginx, "/traced/10MB.bin").content == stored["10MB.bin"]
    assert "gridfs cursor opened at chunk 0" in nginx.debug_log.read_text()


RELOAD_SECONDS = 30  # issue 38: a reload every second for 30 s
RELOAD_CLIENTS = 100


def fetch_until(url: str, data: bytes, until: float, tally: dict[str, int], lock: threading.Lock) -> None:
    """One keep-alive client asking for url until `until`: each answer
    counted whole (200, every byte), clean (503 with Retry-After) or broken
    (anything else: a cut, a reset, a wrong byte)."""
    with requests.Session() as session:
        while time.monotonic() < until:
            try:
                r = session.get(url, timeout=TIMEOUT)
                kind = ("whole" if r.status_code == 200 and r.content == data else
                        "clean" if r.status_code == 503 and "Retry-After" in r.headers else "broken")
            except requests.RequestException:
                kind = "broken"
            with lock:
                tally[kind] = tally.get(kind, 0) + 1


def test_a_reload_every_second_under_load_breaks_no_more_than_static_files(stored, mongo_uri):
    """nginx -s reload every second for 30 s while 100 clients ask for 1 MB
    from GridFS and 100 for the same bytes from disk, in the same nginx: no
    more broken answers from the module than from the static location
    (a keep-alive connection closed as its next request goes out breaks
    either alike), and no worker exits under a request in flight. Before
    issue 38's hold, a worker shutting down left its queries' and waiters'
    sockets open ("open socket left") and cut their answers."""
    server = start_nginx(mongo_uri, "gridfs_deadline 3s; gridfs_queue_timeout 10s; gridfs_max_responses 180;",
                         files={"1MB.bin": stored["1MB.bin"]})
    try:
        assert get(server, "/files/1MB.bin").content == stored["1MB.bin"]
        log_before = len(server.log())
        tallies = {"gridfs": {}, "static": {}}
        lock = threading.Lock()
        began = time.monotonic()
        until = began + RELOAD_SECONDS
        with ThreadPoolExecutor(2 * RELOAD_CLIENTS) as pool:
            clients = [pool.submit(fetch_until, server.url(f"/{where}/1MB.bin"), stored["1MB.bin"], until,
                                   tallies["gridfs" if where == "files" else "static"], lock)
                       for where in ("files", "static") for _ in range(RELOAD_CLIENTS)]
            reloads = 0
            for second in range(1, RELOAD_SECONDS):  # on a schedule: 200 busy threads make a sleep late
                time.sleep(max(0.0, began + second - time.monotonic()))
                server.proc.send_signal(signal.SIGHUP)
                reloads += 1
            for client in clients:
                client.result(timeout=TIMEOUT + RELOAD_SECONDS)
        print(f"\n{reloads} reloads; 1 MB answers from GridFS {tallies['gridfs']}, from disk {tallies['static']}")
        # the old workers finish their requests and go
        deadline = time.monotonic() + TIMEOUT
        while len(server.worker_pids()) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(server.worker_pids()) == 1, "an old worker is still there"
        assert tallies["gridfs"].get("whole", 0) > 0 and tallies["static"].get("whole", 0) > 0
        assert tallies["gridfs"].get("broken", 0) <= tallies["static"].get("broken", 0), tallies
        new_log = server.log()[log_before:]
        for word in ("open socket", "[alert]", "[crit]", "[emerg]", "exited on signal"):
            assert word not in new_log, new_log[new_log.index(word) - 500:][:1500]
        assert get(server, "/files/1MB.bin").content == stored["1MB.bin"]
    finally:
        stop_nginx(server)


def test_worker_never_crashed(nginx):
    log = nginx.log()
    assert "exited on signal" not in log
    assert "[alert]" not in log and "[emerg]" not in log


def waits_in_line(port: int, path: str) -> socket.socket:
    """A GET whose client reads nothing (a small window: it stalls a large
    body's sending), or leaves before the answer."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
    return sock


def reset(sock: socket.socket) -> None:
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()


# a server of the same worker: a location whose 503 page is sent at 1 KB/s
# (its request outlives its deadline by long), one without gridfs_deadline
FALLBACK = """
    server {{
        listen 127.0.0.1:{port};
        location /fallback/ {{
            gridfs {db} field=filename type=string;
            error_page 503 /slow/page.html;
        }}
        location /slow/ {{ alias @FILES@/; limit_rate 1k; }}
        location /no-deadline/ {{
            gridfs {db} field=filename type=string;
            gridfs_deadline 0;
            gridfs_queue_timeout 1s;
            gridfs_overload_log_level info;
        }}
    }}
"""


def test_responses_past_the_cap_wait_in_line_and_may_leave_it(stored, mongo_uri, sanitize):
    """gridfs_max_responses: two stalled 10 MB responses hold both places;
    five requests that leave while in line, then three that wait: once a
    stalled client goes, its place passes down the line and the three are
    served in turn; a request that finds no place by gridfs_deadline is a
    503 then. Places pass from one request's cleanup to another's posted
    event: the sanitizer sees every hand-over. Then (issue 38) a request
    past its deadline in line leaves the line at once, though its request
    lives on (its 503's error page is sent slowly): the next place goes to
    the one behind it (before, to the request gone elsewhere: the worker
    crashed); and without gridfs_deadline, the wait is bounded by
    gridfs_queue_timeout (before, it had no bound). The 503s are logged at
    gridfs_overload_log_level's level (before, at info whatever the
    error_log's level)."""
    fallback_port = free_port()
    server = start_nginx(mongo_uri, "gridfs_max_responses 2;\n    gridfs_deadline 2s;\n"
                         + FALLBACK.format(db=DB, port=fallback_port), sanitize=sanitize,
                         files={"page.html": b"busy" * 16384})
    held = []
    try:
        held = [waits_in_line(server.port, "/files/10MB.bin") for _ in range(2)]
        for sock in held:
            sock.settimeout(TIMEOUT)
            assert sock.recv(64).startswith(b"HTTP/1.1 200 OK")
        for sock in [waits_in_line(server.port, "/files/1KB.bin") for _ in range(5)]:
            time.sleep(0.05)
            reset(sock)
        with ThreadPoolExecutor(3) as pool:
            waiting = [pool.submit(get, server, "/files/1KB.bin") for _ in range(3)]
            time.sleep(0.5)
            assert not any(answer.done() for answer in waiting)
            reset(held.pop())
            answers = [answer.result() for answer in waiting]
        assert [a.status_code for a in answers] == [200] * 3
        assert all(a.content == stored["1KB.bin"] for a in answers)
        reset(held.pop())
        held.append(waits_in_line(server.port, "/files/10MB.bin"))
        held[0].settimeout(TIMEOUT)
        assert held[0].recv(64).startswith(b"HTTP/1.1 200 OK")
        held.append(waits_in_line(server.port, "/files/10MB.bin"))
        held[1].settimeout(TIMEOUT)
        assert held[1].recv(64).startswith(b"HTTP/1.1 200 OK")
        began = time.monotonic()
        refused = get(server, "/files/1KB.bin")
        assert refused.status_code == 503 and 1.9 < time.monotonic() - began < 3
        # at gridfs_overload_log_level's level: error by default
        assert re.search(r"\[error\].*waited for one of the 2 places of gridfs_max_responses", server.log())

        workers = server.worker_pids()
        gone = waits_in_line(fallback_port, "/fallback/1KB.bin")  # its 503's page is not read
        held.append(gone)
        time.sleep(1)
        with ThreadPoolExecutor(1) as pool:
            behind = pool.submit(get, server, "/files/1KB.bin")  # its deadline: 1 s after gone's
            time.sleep(1.5)  # gone's deadline has passed, behind's has not
            reset(held.pop(0))
            answer = behind.result()
        assert (answer.status_code, answer.content) == (200, stored["1KB.bin"])
        gone.settimeout(TIMEOUT)
        assert gone.recv(64).startswith(b"HTTP/1.1 503")
        assert server.worker_pids() == workers and "exited on signal" not in server.log()

        held.append(waits_in_line(server.port, "/files/10MB.bin"))  # both places held again
        held[-1].settimeout(TIMEOUT)
        assert held[-1].recv(64).startswith(b"HTTP/1.1 200 OK")
        began = time.monotonic()
        unbounded = requests.get(f"http://127.0.0.1:{fallback_port}/no-deadline/1KB.bin", timeout=TIMEOUT)
        assert unbounded.status_code == 503 and 0.9 < time.monotonic() - began < 2
        assert re.search(r"\[info\].*longer than gridfs_queue_timeout \(1000 ms\): 503", server.log())
    finally:
        for sock in held:
            reset(sock)
        stop_nginx(server)


@pytest.mark.native  # the module built, nginx
@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_bad_cap_on_responses_stops_nginx_at_start(value, tmp_path):
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"load_module {build_module()};\nevents {{}}\nhttp {{ gridfs_max_responses {value}; }}\n")
    result = subprocess.run([NGINX_BIN, "-t", "-p", str(tmp_path), "-e", "stderr", "-c", str(conf)], text=True,
                            capture_output=True, timeout=30)
    assert result.returncode != 0
    assert "gridfs_max_responses" in result.stderr, result.stderr


def test_admission_sheds_and_clients_leave_in_line_cleanly(stored, mongo_uri):
    """gridfs_admission (issue 39) under closed-loop overload at 1 MB, in
    the ASan build (test_admission.py times the plain one): 60 clients
    asking again at once, while others leave in line (a reset after the
    request); whole answers and 503s with Retry-After only, each body
    whole, and no sanitizer report, alert or crash: the line's entries,
    turns and timers all released."""
    server = start_nginx(mongo_uri, "gridfs_deadline 2s; gridfs_admission on; gridfs_overload_log_level info;",
                         sanitize=True)
    tally, lock = {"whole": 0, "refused": 0, "wrong": 0, "reset": 0}, threading.Lock()
    until = time.monotonic() + 4

    def ask():
        with requests.Session() as session:
            while time.monotonic() < until:
                r = session.get(f"{server.url()}/files/1MB.bin", timeout=30)
                kind = ("whole" if r.status_code == 200 and r.content == stored["1MB.bin"]
                        else "refused" if r.status_code == 503 and r.headers.get("Retry-After") == "1" else "wrong")
                with lock:
                    tally[kind] += 1

    def leave():
        while time.monotonic() < until:
            reset(waits_in_line(server.port, "/files/1MB.bin"))
            with lock:
                tally["reset"] += 1
            time.sleep(0.02)

    try:
        with ThreadPoolExecutor(64) as pool:
            for future in [pool.submit(ask) for _ in range(60)] + [pool.submit(leave) for _ in range(4)]:
                future.result()
        print(f"\nadmission at 60 clients: {tally}")
        assert tally["whole"] and tally["refused"] and not tally["wrong"], tally
        assert "refused by gridfs_admission" in server.log() or "its turn of gridfs_admission" in server.log()
        log = server.log()
        assert "exited on signal" not in log and "[alert]" not in log, log[-2000:]
    finally:
        stop_nginx(server)
