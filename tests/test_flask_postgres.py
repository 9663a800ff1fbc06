"""The flask-postgres path natively: real gunicorn + gevent, real PostgreSQL
(the session's server for the files the real seed writes; a server of this
module's own for outages), real nginx as the reference. Its bytes, Range,
304 and hostile names are also checked beside the GridFS paths in
test_serving_paths.py; here: the seed's files byte for byte, the
conformance suite, what the chunked SQL layout implies (only the needed
chunks read, streamed chunk by chunk), untrusted stored values, and the
database stopped, frozen or slow."""
import hashlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from email.utils import formatdate, parsedate_to_datetime
from pathlib import Path

import psycopg
import pytest
import requests

from seed import postgres_store
from seed import loader
from bench.checks.conformance import Server, check
from support.modules import module_from_file
from support.processes import PostgresServer, wait_for_port
from support.service_processes import REPO, NginxStatic, flask_postgres_service, postgres_database

DB = "lab_flask_postgres_test"
CHUNK = postgres_store.CHUNK_SIZE
SEED_SIZES = "1B 1KB 255KB 300KB 1MB"  # one byte, within a chunk, a chunk exactly, across, several


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def get(service, name: str, **headers) -> requests.Response:
    return requests.get(f"{service.url}/files/{name}", headers=headers, timeout=30)


@pytest.fixture(scope="module")
def seeded(postgres, mongo_uri):
    """(postgres_url, files_dir, manifest): the real seed run into GridFS,
    onto disk and into a database of its own in the session's PostgreSQL."""
    url = postgres_database(postgres.url, DB)
    base = Path(tempfile.mkdtemp(prefix="lab-flask-postgres-"))
    base.chmod(0o755)  # nginx's workers run as nobody
    files_dir = base / "files"
    env = {"MONGO_URI": mongo_uri, "GRIDFS_DB": DB, "FILE_SIZES": SEED_SIZES, "FILES_DIR": str(files_dir),
           "POSTGRES_URL": url, "SEED_MONGO_TIMEOUT": "10", "SEED_POSTGRES_TIMEOUT": "10", "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "seed"], cwd=REPO / "loadgen", env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    files_dir.chmod(0o755)
    manifest = json.loads((files_dir / "manifest.json").read_text())
    yield url, files_dir, manifest
    subprocess.run(["rm", "-rf", str(base)], check=False, timeout=60)


@pytest.fixture(scope="module")
def connection(seeded):
    with psycopg.connect(seeded[0], autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="module")
def service(seeded):
    server = flask_postgres_service(seeded[0]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def nginx(seeded):
    server = NginxStatic(seeded[1]).start()
    yield server
    server.stop()


def test_every_seeded_file_is_served_byte_for_byte(seeded, service):
    manifest = seeded[2]
    assert [f["name"] for f in manifest["files"]] == [f"{s}.bin" for s in SEED_SIZES.split()]
    for f in manifest["files"]:
        assert f["stores"] == ["gridfs", "disk", "postgres"]
        response = get(service, f["name"])
        assert response.status_code == 200, f["name"]
        assert response.headers["Content-Length"] == str(f["size"])
        assert sha256(response.content) == f["sha256"], f["name"]


def test_conforms_to_nginx_static(seeded, nginx, service):
    results = check(nginx.url, service.url, seeded[2]["files"])
    failed = [f"{r.case}: expected {r.expected}, got {r.got}" for r in results if not r.passed]
    assert not failed, "\n".join(failed) + "\n--- log ---\n" + service.log()


def shifted_date(http_date: str, seconds: int) -> str:
    return formatdate(parsedate_to_datetime(http_date).timestamp() + seconds, usegmt=True)


def test_where_werkzeug_differs_the_answer_is_nginx_s(nginx, service):
    """The cases lab_http/preconditions.py names for keeping nginx's logic by
    hand: each answered as nginx answers it, which Werkzeug's
    make_conditional would not."""
    name = "1KB.bin"
    for server in (nginx, service):
        full = get(server, name)
        etag, last_modified = full.headers["ETag"], full.headers["Last-Modified"]
        cases = [
            ({"If-Modified-Since": shifted_date(last_modified, 86400)}, 200),  # exact match only
            ({"If-None-Match": etag, "If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}, 200),  # both must hold
            ({"Range": "bytes=0-9", "If-Range": "W/" + etag}, 200),  # a weak tag never matches
            ({"Range": "bytes=0-9", "If-Range": shifted_date(last_modified, 86400)}, 200),  # exact date only
            ({"Range": "bytes=0-9", "If-Range": last_modified}, 206),
        ]
        for headers, expected in cases:
            response = get(server, name, **headers)
            assert response.status_code == expected, (server.url, headers)
            assert len(response.content) == (10 if expected == 206 else 1024)


def test_range_reads_only_the_chunks_it_needs(connection, service):
    data = loader.file_bytes(5 * CHUNK + 100)
    file_id = postgres_store.insert_file(connection, "sparse.bin", data, "application/octet-stream")
    connection.execute("DELETE FROM chunks WHERE file_id = %s AND n IN (0, 1, 5)", (file_id,))
    start, end = 2 * CHUNK + 7, 4 * CHUNK + 9  # chunks 2, 3 and 4, which are all there
    response = get(service, "sparse.bin", Range=f"bytes={start}-{end}")
    assert response.status_code == 206
    assert response.content == data[start:end + 1]
    # The missing chunks are noticed where they are needed: a clean 500 (a
    # corrupt file, not an unavailable store: issue 39) when the first chunk
    # of the answer is missing, logged as that, not as a body cut short.
    midway = service.log_path.read_text().count("failed midway")
    assert get(service, "sparse.bin").status_code == 500
    assert get(service, "sparse.bin", Range="bytes=-10").status_code == 500
    assert "missing or of the wrong size" in service.log()
    assert service.log_path.read_text().count("failed midway") == midway


def test_body_streams_chunk_by_chunk(connection, service):
    """A chunk missing midway: the chunks before it have gone out already
    (200, full Content-Length), then the connection is cut short."""
    data = loader.file_bytes(20 * CHUNK)
    file_id = postgres_store.insert_file(connection, "holed.bin", data, "application/octet-stream")
    connection.execute("DELETE FROM chunks WHERE file_id = %s AND n = 12", (file_id,))
    answer = Server(service.url).request("GET", "/files/holed.bin")
    assert answer.status == 200
    assert answer.header("content-length") == str(len(data))
    assert answer.body == data[:12 * CHUNK]
    assert "failed midway" in service.log()


def test_stored_content_type_is_checked_before_it_becomes_a_header(connection, service):
    postgres_store.insert_file(connection, "evil.txt", b"x", "text/html\r\nX-Injected: 1")
    postgres_store.insert_file(connection, "page.html", b"<p>", "text/html; charset=utf-8")
    evil = get(service, "evil.txt")
    assert evil.status_code == 200 and evil.content == b"x"
    assert evil.headers["Content-Type"] == "text/plain" and "X-Injected" not in evil.headers
    assert get(service, "page.html").headers["Content-Type"] == "text/html; charset=utf-8"


def test_missing_or_bad_postgres_url_is_named(tmp_path):
    for env, expected in (({}, "POSTGRES_URL is not set"),
                          ({"POSTGRES_URL": "mysql://lab:s3cret-pw@db/lab"}, "must start with postgresql://"),
                          ({"POSTGRES_URL": "postgresql://lab:s3cret-pw@db/lab?no_such_option=1"}, "cannot be parsed")):
        service = flask_postgres_service("")
        service.env = {k: v for k, v in {**service.env, **env}.items() if v}
        with pytest.raises(RuntimeError) as failure:
            service.start()
        assert expected in str(failure.value)
        assert "s3cret-pw" not in str(failure.value)


# --- outages: a PostgreSQL server of this module's own -----------------------

def postmaster_pid(server: PostgresServer) -> int:
    return int((server.datadir / "postmaster.pid").read_text().split()[0])


def stop_fast(server: PostgresServer) -> None:
    """Fast shutdown (SIGINT): open sessions are ended, unlike SIGTERM's."""
    os.kill(postmaster_pid(server), signal.SIGINT)
    server.proc.wait(30)


def start_again(server: PostgresServer) -> None:
    server.proc = subprocess.Popen(server.proc.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for_port(server.port, "postgres", server.proc)


def wait_until_accepting(url: str) -> None:
    """Listening is not ready: PostgreSQL refuses sessions while it starts up."""
    deadline = time.monotonic() + 20
    while True:
        try:
            psycopg.connect(url, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.fixture(scope="module")
def own_postgres():
    server = PostgresServer().start()
    try:
        url = postgres_database(server.url, "lab_outage")
        with psycopg.connect(url, autocommit=True) as conn:
            postgres_store.create_schema(conn)
            postgres_store.insert_file(conn, "1KB.bin", loader.file_bytes(1024), "application/octet-stream")
        yield server, url
    finally:
        if server.proc.poll() is not None:
            start_again(server)  # so that stop() finds it running and removes its directory
        server.stop()


def wait_for_200(service, name: str = "1KB.bin", timeout: float = 20) -> requests.Response:
    deadline = time.monotonic() + timeout
    while (response := get(service, name)).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    return response


def test_postgres_stopped_is_503_quickly_then_recovers(own_postgres):
    server, url = own_postgres
    service = flask_postgres_service(url).start()
    try:
        assert get(service, "1KB.bin").status_code == 200  # the pool holds a connection now
        # Restarted while idle: the pooled connection is dead, and the next
        # request notices, reconnects and answers (no 503).
        stop_fast(server)
        start_again(server)
        wait_until_accepting(url)
        assert get(service, "1KB.bin").status_code == 200
        stop_fast(server)
        for attempt in range(3):
            started = time.monotonic()
            response = get(service, "1KB.bin")
            elapsed = time.monotonic() - started
            assert response.status_code == 503 and response.headers["Retry-After"] == "1", attempt
            assert elapsed < 5, f"503 took {elapsed:.1f} s"
        assert requests.get(f"{service.url}/health", timeout=5).status_code == 200
        assert "PostgreSQL unavailable" in service.log(), "the cause is logged"
        start_again(server)
        response = wait_for_200(service)
        assert response.status_code == 200 and response.content == loader.file_bytes(1024)
    finally:
        service.stop()
        if server.proc.poll() is not None:
            start_again(server)


def test_path_started_while_postgres_is_down_recovers(own_postgres):
    server, url = own_postgres
    stop_fast(server)
    service = None
    try:
        service = flask_postgres_service(url).start()  # /health needs no database
        assert get(service, "1KB.bin").status_code == 503
        start_again(server)
        assert wait_for_200(service).status_code == 200
    finally:
        if server.proc.poll() is not None:
            start_again(server)
        if service is not None:
            service.stop()


def test_frozen_postgres_does_not_block_the_worker(own_postgres):
    """The postmaster stopped (SIGSTOP): new connections hang until the
    connect timeout. Meanwhile the same gevent worker still answers /health:
    the driver waits cooperatively, not in a blocking C call."""
    server, url = own_postgres
    service = flask_postgres_service(url).start()
    pid = postmaster_pid(server)
    statuses, elapsed = [], []

    def fetch():
        started = time.monotonic()
        statuses.append(get(service, "1KB.bin").status_code)
        elapsed.append(time.monotonic() - started)

    os.kill(pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=fetch) for _ in range(6)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)  # the six are waiting on PostgreSQL now
        started = time.monotonic()
        health = requests.get(f"{service.url}/health", timeout=10)
        health_seconds = time.monotonic() - started
        for thread in threads:
            thread.join(30)
    finally:
        os.kill(pid, signal.SIGCONT)
    try:
        assert health.status_code == 200
        assert health_seconds < 1, f"/health waited {health_seconds:.1f} s behind the database"
        assert statuses == [503] * 6
        assert max(elapsed) < 5, f"503s took up to {max(elapsed):.1f} s: the waits were not concurrent"
        assert wait_for_200(service).status_code == 200
    finally:
        service.stop()


def test_a_statement_that_does_not_finish_is_cut_short(own_postgres):
    """statement_timeout ends a query PostgreSQL cannot finish (a lock
    here); a backend that stops answering altogether is cut by the client's
    own timeout. Both are 503s in about the timeout, and the path recovers."""
    server, url = own_postgres
    service = flask_postgres_service(url)
    service.env["POSTGRES_STATEMENT_TIMEOUT"] = "1"
    service.start()
    try:
        assert get(service, "1KB.bin").status_code == 200
        with psycopg.connect(url) as locker:  # a transaction: the lock holds until it ends
            locker.execute("LOCK TABLE chunks IN ACCESS EXCLUSIVE MODE")
            started = time.monotonic()
            assert get(service, "1KB.bin").status_code == 503
            assert time.monotonic() - started < 4
        assert "QueryCanceled" in service.log()
        assert get(service, "1KB.bin").status_code == 200

        with psycopg.connect(url, autocommit=True) as watcher:
            backends = [pid for (pid,) in watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'gridfs-lab-flask-postgres'")]
        assert backends, "the pool keeps its connection between requests"
        for pid in backends:
            os.kill(pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            assert get(service, "1KB.bin").status_code == 503
            assert time.monotonic() - started < 5
        finally:
            for pid in backends:
                os.kill(pid, signal.SIGCONT)
        assert "no answer from PostgreSQL" in service.log()
        assert wait_for_200(service).status_code == 200
    finally:
        service.stop()


def test_a_query_waits_for_a_busy_pool_longer_than_one_statement(own_postgres):
    """The pool's one connection busy with two statements of 0.8 s in turn,
    each within the 1 s statement timeout: a third query waits about 1.6 s
    for it and is answered. (The wait was the statement timeout: mid-body,
    a stream that waited longer was cut short, 13-18 of 50 bodies of 100 MB
    in make overload; before the head, the request's deadline bounds it.)"""
    Pool = module_from_file(REPO / "services" / "flask-postgres" / "pool.py", "flask_postgres_pool").Pool
    _, url = own_postgres
    pool = Pool(url, size=1, connect_timeout=2, statement_timeout=1.0, application_name="lab-pool-test")
    outcomes = {}

    def query(name: str, sql: str) -> None:
        started = time.monotonic()
        try:
            outcomes[name] = (pool.query(sql, ()), time.monotonic() - started)
        except Exception as error:  # noqa: BLE001 (the outcome is the test's)
            outcomes[name] = (error, time.monotonic() - started)

    holders = [threading.Thread(target=query, args=(f"holder {i}", "SELECT pg_sleep(0.8)")) for i in range(2)]
    for holder in holders:
        holder.start()
        time.sleep(0.05)  # in this order at the pool
    query("waiter", "SELECT 1")
    for holder in holders:
        holder.join(10)
    pool.close_idle()
    rows, waited = outcomes["waiter"]
    assert rows == [(1,)], rows
    assert waited > 1.2, waited
    assert all(not isinstance(outcomes[f"holder {i}"][0], Exception) for i in range(2)), outcomes
