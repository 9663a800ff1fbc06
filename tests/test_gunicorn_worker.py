"""The Python paths' gunicorn (services/python-common: gunicorn.conf.py,
gevent_worker.py) against real FerretDB: at the connection cap
(worker_connections), idle kept-alive connections are closed, as nginx
drains its reusable ones, so a new client is served at once instead of
waiting in the listen backlog for the keep-alive timeout (75 s); below the
cap, keep-alive is kept; and no control socket is made."""
import os
import socket
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import gridfs
import pytest
import requests
from pymongo import MongoClient

from support.service_processes import flask_service

DB_NAME = "lab_connection_cap_test"
NAME = "small.bin"
BODY = b"c" * 1000
BIG = "big.bin"  # 3 MiB: more than a stalled client's socket buffers take
CAP = 8


@pytest.fixture(scope="module")
def flask(mongo_uri):
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    bucket = gridfs.GridFSBucket(client[DB_NAME])
    bucket.upload_from_stream(NAME, BODY)
    bucket.upload_from_stream(BIG, b"b" * (3 * 1024 * 1024))
    client.close()
    service = flask_service(mongo_uri, DB_NAME)
    service.home = Path(tempfile.mkdtemp(prefix="lab-gunicorn-home-"))
    service.env.update(GUNICORN_WORKER_CONNECTIONS=str(CAP), HOME=str(service.home), XDG_RUNTIME_DIR="")
    service.start()
    yield service
    service.stop()


REQUEST = f"GET /files/{NAME} HTTP/1.1\r\nHost: lab\r\n\r\n".encode()


def get_on(connection: socket.socket) -> bytes:
    """One request on a kept-alive connection; the whole answer, or b"" if
    the server had closed the connection."""
    connection.sendall(REQUEST)
    answer = b""
    while not answer.endswith(BODY):
        data = connection.recv(65536)
        if not data:
            return answer
        answer += data
    return answer


def kept_alive_connections(service, count: int) -> list[socket.socket]:
    connections = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", service.port), timeout=10)
        assert get_on(connection).startswith(b"HTTP/1.1 200 ")
        connections.append(connection)
    return connections


def closed_by_server(connection: socket.socket) -> bool:
    connection.settimeout(2)
    try:
        return connection.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_below_the_cap_connections_stay_kept_alive(flask):
    connections = kept_alive_connections(flask, CAP // 2)
    try:
        for connection in connections:
            assert get_on(connection).startswith(b"HTTP/1.1 200 "), "closed below the cap"
    finally:
        for connection in connections:
            connection.close()


def test_at_the_cap_idle_connections_close_so_a_new_client_is_served(flask):
    connections = kept_alive_connections(flask, CAP)
    try:
        started = time.monotonic()
        newcomer = socket.create_connection(("127.0.0.1", flask.port), timeout=10)
        try:
            answer = get_on(newcomer)
        except TimeoutError:
            answer = b"(nothing in 10 s)"
        finally:
            newcomer.close()
        waited = time.monotonic() - started
        closed = sum(closed_by_server(connection) for connection in connections)
    finally:
        for connection in connections:
            connection.close()
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:40]
    assert waited < 2, waited
    assert closed >= 1
    assert "Traceback" not in flask.log()


def stalled_body(service) -> socket.socket:
    """A GET of the 3 MiB file whose client reads no more than the head."""
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    connection.settimeout(10)
    connection.connect(("127.0.0.1", service.port))
    connection.sendall(f"GET /files/{BIG} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
    assert connection.recv(1024).startswith(b"HTTP/1.1 200 ")
    return connection


def test_at_the_cap_an_answer_says_it_closes(flask):
    """CAP - 1 connections busy with answers their clients do not read (not
    idle: nothing to drain), then one more: its answer says it closes."""
    stalled = []
    try:
        for _ in range(CAP - 1):
            stalled.append(stalled_body(flask))
        last = socket.create_connection(("127.0.0.1", flask.port), timeout=10)
        try:
            answer = get_on(last)
            closed = closed_by_server(last)
        finally:
            last.close()
    finally:
        for connection in stalled:
            connection.close()
    head = answer.split(b"\r\n\r\n", 1)[0].lower()
    assert head.startswith(b"http/1.1 200 ") and b"\r\nconnection: close" in head, head
    assert closed


def test_no_control_socket_is_made(flask):
    """gunicorn 25.1+ makes $HOME/.gunicorn/gunicorn.ctl unless told not to
    (on the images' read-only root: an ERROR line at each start)."""
    assert requests_get_ok(flask)
    assert not (flask.home / ".gunicorn").exists(), sorted(p.name for p in flask.home.iterdir())
    assert "Control server" not in flask.log()


def requests_get_ok(service) -> bool:
    connection = socket.create_connection(("127.0.0.1", service.port), timeout=10)
    try:
        return get_on(connection).startswith(b"HTTP/1.1 200 ")
    finally:
        connection.close()


def test_clients_past_the_cap_that_send_at_once_are_never_cut(flask):
    """wrk with four times the cap: every client sends its next request as
    the last answer ends. No read error: at the cap an answer says it
    closes, and an idle connection is closed only after IDLE_AT_CAP_S.
    (Closing it at once raced those requests: 516 and 2333 read errors at
    1000 clients in make overload.)"""
    from bench.clients.wrk_output import parse
    result = subprocess.run(["wrk", "--latency", "-t", "2", "-c", str(CAP * 4), "-d", "5s", "--timeout", "10s",
                             f"{flask.url}/files/{NAME}"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    summary = parse(result.stdout)
    assert summary.requests > 100, result.stdout
    assert summary.socket_errors == 0 and summary.non_2xx_3xx == 0, result.stdout


OPEN_STREAMS = 3  # FLASK_MAX_OPEN_STREAMS: bodies under way, stalled ones included
DEADLINE_S = 1.0


@pytest.fixture(scope="module")
def capped_bodies(mongo_uri, flask):
    service = flask_service(mongo_uri, DB_NAME)  # the files flask's fixture stored
    service.env.update(FLASK_MAX_OPEN_STREAMS=str(OPEN_STREAMS), REQUEST_DEADLINE_MS=str(int(DEADLINE_S * 1000)))
    service.start()
    yield service
    service.stop()


def reset(connection: socket.socket) -> None:
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def test_bodies_under_way_are_capped_and_a_place_is_waited_for_within_the_deadline(capped_bodies):
    """FLASK_MAX_OPEN_STREAMS bodies stalled: one more GET waits for a place and
    is a 503 at its deadline; an answer without a body takes none; a place
    freed by a client that left is taken by the next."""
    stalled = [stalled_body(capped_bodies) for _ in range(OPEN_STREAMS)]
    try:
        started = time.monotonic()
        refused = requests.get(f"{capped_bodies.url}/files/{BIG}", timeout=10)
        waited = time.monotonic() - started
        head = requests.head(f"{capped_bodies.url}/files/{BIG}", timeout=10)
        reset(stalled.pop())
        time.sleep(0.2)  # the server notices the reset at its next write
        served = requests.get(f"{capped_bodies.url}/files/{NAME}", timeout=10)
    finally:
        for connection in stalled:
            reset(connection)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "1", refused.status_code
    assert DEADLINE_S * 0.9 < waited < DEADLINE_S + 0.7, waited
    assert head.status_code == 200 and head.headers["Content-Length"] == str(3 * 1024 * 1024)
    assert served.status_code == 200 and served.content == BODY
    assert f"no place of FLASK_MAX_OPEN_STREAMS ({OPEN_STREAMS}) free within REQUEST_DEADLINE_MS" in capped_bodies.log()
    # every place came back: as many bodies as the cap are served at once again
    again = [stalled_body(capped_bodies) for _ in range(OPEN_STREAMS)]
    for connection in again:
        reset(connection)


@pytest.mark.parametrize("value", ["0", "many", "-1"])
def test_a_bad_open_streams_cap_stops_gunicorn_at_start(mongo_uri, value):
    service = flask_service(mongo_uri, DB_NAME)
    result = subprocess.run(service.command, cwd=service.cwd, capture_output=True, text=True, timeout=60,
                            env={**os.environ, **service.env, "FLASK_MAX_OPEN_STREAMS": value})
    assert result.returncode != 0
    assert f"FLASK_MAX_OPEN_STREAMS must be a positive whole number, got {value!r}" in result.stdout + result.stderr
