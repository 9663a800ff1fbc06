"""One deadline per request (REQUEST_DEADLINE_MS, issue 24) on node, flask
and flask-postgres, against real FerretDB, PostgreSQL and the real
processes: the wait for a slot and the database round trips before the head
all fit in it, or the answer is the 503 with Retry-After, whatever
NODE_STREAM_WAIT_MS, the driver's socket timeout or PostgreSQL's statement
timeout would allow."""
import contextlib
import runpy
import socket
import struct
import time

import gridfs
import psycopg
import pytest
import requests
from pymongo import MongoClient

from seed import postgres_store
from support.processes import rss_mib
from support.service_processes import GUNICORN_CONF, flask_postgres_service, flask_service, node_service, \
    postgres_database

DB_NAME = "lab_deadlines_test"
DEADLINE_S = 1.0
BIG = "big.bin"  # 12 MiB: more than a client's socket takes at once
SMALL = "small.bin"


@pytest.fixture(scope="module")
def files(mongo_uri):
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    bucket = gridfs.GridFSBucket(client[DB_NAME])
    bucket.upload_from_stream(BIG, b"b" * (12 * 1024 * 1024))
    bucket.upload_from_stream(SMALL, b"s" * 1000)
    client.close()


@pytest.fixture(scope="module")
def node(mongo_uri, files):
    service = node_service(mongo_uri, DB_NAME)
    # One slot, and a slot wait far beyond the deadline: the deadline decides.
    service.env.update(NODE_MAX_STREAMS="1", NODE_STREAM_WAIT_MS="10000",
                       REQUEST_DEADLINE_MS=str(int(DEADLINE_S * 1000)))
    service.start()
    yield service
    service.stop()


def timed_get(node, name: str) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.get(f"{node.url}/files/{name}", timeout=30)
    return response, time.monotonic() - started


def test_a_request_queued_for_a_slot_is_a_503_at_the_deadline(node, ferretdb):
    """The one slot is held by a body's later chunk read, frozen with
    FerretDB (a slot is held for database reads only): a new request waits
    for it and gets its 503 at its deadline, not at NODE_STREAM_WAIT_MS."""
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    holder.settimeout(10)
    try:
        holder.connect(("127.0.0.1", node.port))
        holder.sendall(f"GET /files/{BIG} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        assert holder.recv(1024).startswith(b"HTTP/1.1 200 ")  # the first batch is read
        ferretdb.pause()
        # Reading on takes the first batch out: the next read takes the slot and waits.
        read = 0
        with pytest.raises(TimeoutError):
            holder.settimeout(0.5)
            while data := holder.recv(65536):
                read += len(data)
        assert 0 < read < 12 * 1024 * 1024
        response, elapsed = timed_get(node, SMALL)
    finally:
        ferretdb.resume()
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        holder.close()
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert DEADLINE_S * 0.9 < elapsed < DEADLINE_S + 0.7, elapsed
    assert "no slot of 1 free within" in node.log() and "REQUEST_DEADLINE_MS" in node.log()
    deadline = time.monotonic() + 15
    while timed_get(node, SMALL)[0].status_code != 200:  # the slot came back
        assert time.monotonic() < deadline, "the slot never came back"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def flask(mongo_uri, files):
    service = flask_service(mongo_uri, DB_NAME)
    service.env.update(REQUEST_DEADLINE_MS=str(int(DEADLINE_S * 1000)))
    service.start()
    yield service
    service.stop()


@pytest.fixture(params=["node", "flask"])
def gridfs_path(request):
    return request.getfixturevalue(request.param)


def test_a_frozen_mongodb_is_a_503_at_the_deadline_then_recovers(gridfs_path, ferretdb):
    assert timed_get(gridfs_path, SMALL)[0].status_code == 200  # connected
    ferretdb.pause()
    try:
        response, elapsed = timed_get(gridfs_path, SMALL)
    finally:
        ferretdb.resume()
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert elapsed < DEADLINE_S + 0.7, elapsed
    deadline = time.monotonic() + 15
    while timed_get(gridfs_path, SMALL)[0].status_code != 200:
        assert time.monotonic() < deadline, "the path did not recover after MongoDB came back"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def flask_postgres(postgres):
    url = postgres_database(postgres.url, DB_NAME)
    with psycopg.connect(url, autocommit=True) as connection:
        postgres_store.create_schema(connection)
        postgres_store.insert_file(connection, SMALL, b"s" * 1000, "application/octet-stream")
        postgres_store.insert_file(connection, BIG, b"b" * (12 * 1024 * 1024), "application/octet-stream")
    service = flask_postgres_service(url)
    # PostgreSQL's statement timeout (5 s) and pool wait alone would allow more.
    service.env.update(REQUEST_DEADLINE_MS=str(int(DEADLINE_S * 1000)))
    service.start()
    yield service, url
    service.stop()


@pytest.mark.parametrize("locked", ["files", "chunks"])
def test_a_blocked_postgres_query_is_a_503_at_the_deadline(flask_postgres, locked):
    """A table locked by another session: the lookup (files) or the first
    chunk read (chunks) waits on it; the deadline answers first."""
    service, url = flask_postgres
    assert timed_get(service, SMALL)[0].status_code == 200
    with psycopg.connect(url) as blocker:
        blocker.execute(f"LOCK TABLE {locked} IN ACCESS EXCLUSIVE MODE")
        response, elapsed = timed_get(service, SMALL)
        blocker.rollback()
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert DEADLINE_S * 0.9 < elapsed < DEADLINE_S + 0.7, elapsed
    assert timed_get(service, SMALL)[0].status_code == 200  # the pool recovered


def test_a_body_is_not_bounded_by_the_deadline(flask_postgres, node):
    """Once the head is out, a slow client takes as long as it needs."""
    service, _ = flask_postgres
    for path in (service, node):
        with requests.get(f"{path.url}/files/{BIG}", stream=True, timeout=30) as response:
            assert response.status_code == 200
            received = 0
            for piece in response.iter_content(1024 * 1024):
                received += len(piece)
                if received <= 3 * 1024 * 1024:
                    time.sleep(DEADLINE_S / 2)  # past the deadline by the end
        assert received == 12 * 1024 * 1024, path.url


def answers_at_a_rate(url: str, count: int, rate: float, freeze, after: float) -> list[tuple[str, float]]:
    """`count` GETs of `url` sent `rate` a second, each on a connection it
    keeps alive (as vegeta's load in `make resilience`), with `freeze` (a
    context manager: the database held) entered `after` seconds in and left
    once all are answered: each one's status (or error) and time."""
    from concurrent.futures import ThreadPoolExecutor
    sessions = [requests.Session() for _ in range(count)]

    def status_and_time(index: int) -> tuple[str, float]:
        time.sleep(index / rate)
        started = time.monotonic()
        try:
            status = str(sessions[index].get(url, timeout=15).status_code)
        except requests.RequestException as error:
            status = type(error).__name__
        return status, time.monotonic() - started

    try:
        with ThreadPoolExecutor(count) as pool:
            sent = pool.map(status_and_time, range(count))
            time.sleep(after)
            with freeze():
                return list(sent)
    finally:
        for session in sessions:
            session.close()


def assert_recovers(path) -> None:
    deadline = time.monotonic() + 15
    while timed_get(path, SMALL)[0].status_code != 200:
        assert time.monotonic() < deadline, "the path did not recover after its database came back"
        time.sleep(0.5)
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(20) as pool:
        after = list(pool.map(lambda _: timed_get(path, SMALL)[0].status_code, range(60)))
    assert after == [200] * 60, sorted(set(after))


def test_requests_at_100_a_second_as_mongodb_freezes_are_each_answered_by_the_deadline(gridfs_path, ferretdb):
    """300 requests at 100 a second, FerretDB frozen 0.5 s in (some
    mid-answer) and for the rest: each is a 200 or a 503 by its deadline,
    none a 500 and none held longer, and every one after the return is
    served. (flask held answers 30 s: the idle kept-alive connections filled
    gunicorn's 256 places, and the newest waited in the backlog; and a
    gevent.Timeout thrown into pymongo while it held its pool's lock gave
    500s, "Semaphore released too many times".)"""
    assert timed_get(gridfs_path, SMALL)[0].status_code == 200  # connected
    answers = answers_at_a_rate(f"{gridfs_path.url}/files/{SMALL}", 300, 100, ferretdb.paused, 0.5)
    statuses = sorted({status for status, _ in answers})
    slowest = max(elapsed for _, elapsed in answers)
    assert set(statuses) <= {"200", "503"}, (statuses, gridfs_path.log()[-3000:])
    assert slowest < DEADLINE_S + 1.0, slowest
    assert_recovers(gridfs_path)
    assert "released too many times" not in gridfs_path.log()


# .env's REQUEST_DEADLINE_MS, and a rate at which more requests wait for the
# database at once than gunicorn held connections before (256: 150/s x 3 s
# = 450 under way; the newest waited in the listen backlog, outside their
# deadline, and answers took 6-7 s in make resilience's pauses).
DEFAULT_DEADLINE_S = 3.0
BUSY_RATE = 150


@pytest.fixture(scope="module")
def flask_at_the_default_deadline(mongo_uri, files):
    service = flask_service(mongo_uri, DB_NAME)
    service.start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def flask_postgres_at_the_default_deadline(flask_postgres):
    _, url = flask_postgres
    service = flask_postgres_service(url)
    service.start()
    yield service, url
    service.stop()


@pytest.mark.parametrize("name", ["flask", "flask-postgres"])
def test_more_requests_waiting_than_gunicorn_held_are_each_answered_by_the_deadline(name, request, ferretdb):
    if name == "flask":
        path = request.getfixturevalue("flask_at_the_default_deadline")
        freeze = ferretdb.paused
    else:
        path, url = request.getfixturevalue("flask_postgres_at_the_default_deadline")

        @contextlib.contextmanager
        def freeze():
            with psycopg.connect(url) as blocker:
                blocker.execute("LOCK TABLE files IN ACCESS EXCLUSIVE MODE")
                yield
                blocker.rollback()
    assert timed_get(path, SMALL)[0].status_code == 200  # connected
    idle = rss_mib([path.proc.pid])
    count = int(BUSY_RATE * (DEFAULT_DEADLINE_S + 1))

    @contextlib.contextmanager
    def frozen_and_measured():
        nonlocal waiting_rss
        with freeze():
            # all of the first deadline's requests are under way, none answered yet
            time.sleep(DEFAULT_DEADLINE_S - 0.2)
            waiting_rss = rss_mib([path.proc.pid])
            yield

    waiting_rss = idle
    answers = answers_at_a_rate(f"{path.url}/files/{SMALL}", count, BUSY_RATE, frozen_and_measured, 0)
    statuses = sorted({status for status, _ in answers})
    slowest = max(elapsed for _, elapsed in answers)
    assert set(statuses) <= {"200", "503"}, (statuses, path.log()[-3000:])
    # gunicorn.conf.py's arithmetic: its connection cap of requests waiting,
    # each as large as measured here, fits its budget.
    waiting = BUSY_RATE * (DEFAULT_DEADLINE_S - 0.2)
    each = max(waiting_rss - idle, 0) / waiting
    conf = runpy.run_path(str(GUNICORN_CONF))
    refused = sum(status == "503" for status, _ in answers)
    print(f"{name}: {len(answers)} answers, {refused} x 503, slowest {slowest:.2f} s; "
          f"RSS {idle:.1f} MiB idle, {waiting_rss:.1f} MiB with {waiting:.0f} waiting ({each * 1024:.0f} KiB each)")
    assert slowest < DEFAULT_DEADLINE_S + 1.0, f"an answer took {slowest:.1f} s"
    assert conf["worker_connections"] * each < conf["CONNECTIONS_BUDGET_MIB"], (each, conf["worker_connections"])
    assert_recovers(path)
