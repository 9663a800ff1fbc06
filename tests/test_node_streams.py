"""The Node path's bounds on the requests using MongoDB at once
(NODE_MAX_STREAMS) and on the responses under way, stalled ones included
(NODE_MAX_OPEN_STREAMS), against real FerretDB and the real node process.
A slot is held only while the database is read (the lookup and first chunk batch,
then each later batch), so the tests hold slots by freezing FerretDB under
requests: a request beyond the bound (a body, a HEAD, a conditional GET:
each looks the file up) waits its turn, at most NODE_STREAM_WAIT_MS, then
gets the store-unavailable 503 (admission, admission.js, lets in at least 4
at once: the holders and two waiters here); what needs no lookup (/health, a name
refused) never waits; a client that stops reading holds no slot; every slot
comes back, whether the body was sent whole, its client left, or its read
failed; a bad setting stops the process at start."""
import hashlib
import http.client
import json
import os
import random
import socket
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager

import gridfs
import pytest
import requests
from pymongo import MongoClient

from support.service_processes import node_service

DB_NAME = "lab_node_streams_test"
MAX_STREAMS = 2
OPEN_STREAMS = 8  # NODE_MAX_OPEN_STREAMS: responses under way, stalled ones included
WAIT_S = 1.5
DEADLINE_S = 4
# 12 MiB: more than the kernel's socket buffers and the server's pipeline
# take from a client that does not read, so that its stream stays open.
BIG = "big.bin"
SMALL = "small.bin"
MISSING_FIRST = "no-first-chunk.bin"  # a file document whose chunks are gone
MISSING_LATER = "no-later-chunk.bin"  # its second chunk is gone: cut short mid-body


@pytest.fixture(scope="module")
def files(mongo_uri):
    rng = random.Random(20240917)
    contents = {BIG: rng.randbytes(12 * 1024 * 1024), SMALL: rng.randbytes(600 * 1024)}
    client = MongoClient(mongo_uri)
    try:
        client.drop_database(DB_NAME)
        bucket = gridfs.GridFSBucket(client[DB_NAME])
        for name, data in contents.items():
            bucket.upload_from_stream(name, data, metadata={"contentType": "application/octet-stream"})
        chunks = client[DB_NAME]["fs.chunks"]
        chunks.delete_many({"files_id": bucket.upload_from_stream(MISSING_FIRST, rng.randbytes(300 * 1024))})
        chunks.delete_many({"files_id": bucket.upload_from_stream(MISSING_LATER, rng.randbytes(600 * 1024)),
                            "n": 1})
    finally:
        client.close()
    return contents


@pytest.fixture(scope="module")
def node(mongo_uri, files):
    service = node_service(mongo_uri, DB_NAME)
    # A deadline beyond the slot wait: the waits tested here are the slots'.
    service.env.update(NODE_MAX_STREAMS=str(MAX_STREAMS), NODE_STREAM_WAIT_MS=str(int(WAIT_S * 1000)),
                       NODE_MAX_OPEN_STREAMS=str(OPEN_STREAMS), REQUEST_DEADLINE_MS=str(DEADLINE_S * 1000))
    service.start()
    yield service
    service.stop()


NO_SLOT = "no slot of"  # node's log line for a request that waited NODE_STREAM_WAIT_MS in vain


@pytest.fixture(autouse=True)
def all_slots_free_after(request):
    """After each test that used the server, every slot comes back: as many
    requests as the bound each take one while FerretDB is frozen for longer
    than the slot wait (a leaked slot would leave the last one waiting in
    vain, logged)."""
    yield
    if "node" in request.fixturenames:
        node, ferretdb = request.getfixturevalue("node"), request.getfixturevalue("ferretdb")
        # A client that left mid-body may leave a batch read under way, its
        # slot given back when the read ends: freezing FerretDB then holds it
        # a while. A leak lasts: a second check, after the first let every
        # read end, tells the two apart.
        for _ in range(2):
            before = node.log().count(NO_SLOT)
            with held_slots(node, ferretdb, MAX_STREAMS):
                time.sleep(WAIT_S + 0.3)
            if node.log().count(NO_SLOT) == before:
                return
        pytest.fail("a slot was not given back")


@contextmanager
def held_slots(node, ferretdb, count: int):
    """`count` requests each holding a slot in their lookup while FerretDB
    is frozen, until the block ends and it answers again (well within the
    driver's 5 s socket timeout)."""
    ferretdb.pause()
    try:
        with ThreadPoolExecutor(count) as pool:
            holders = [pool.submit(get, node, SMALL) for _ in range(count)]
            time.sleep(0.3)  # each took its slot
            assert not any(h.done() for h in holders)
            yield
            ferretdb.resume()
            for holder in holders:
                holder.result()
    finally:
        ferretdb.resume()


@contextmanager
def held_stream(port: int):
    """A GET of BIG whose client reads the head, then nothing: the server's
    send buffer fills and its stream stays open (holding no slot) until the
    block ends, when the connection is reset."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.settimeout(WAIT_S + 5)
    try:
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET /files/{BIG} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:  # the status line leaves once the first batch is read
            data = sock.recv(1024)
            assert data, "connection closed before the head"
            head += data
        assert head.startswith(b"HTTP/1.1 200 "), head[:200]
        yield sock
    finally:
        reset(sock)


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a client that gives up does."""
    if sock.fileno() == -1:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def get(node, name: str, method: str = "GET", **headers) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = requests.request(method, f"{node.url}/files/{name}", headers=headers, timeout=WAIT_S + 10)
    return response, time.monotonic() - started


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_requests_beyond_the_bound_wait_then_are_503_while_health_is_at_once(node, ferretdb, files):
    head, _ = get(node, SMALL, "HEAD")
    etag = head.headers["ETag"]
    with held_slots(node, ferretdb, MAX_STREAMS), ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(get, node, SMALL), pool.submit(get, node, SMALL, "HEAD", **{"If-None-Match": etag})]
        time.sleep(0.2)
        assert not any(w.done() for w in waiting), "a request beyond the bound did not wait"
        started = time.monotonic()
        health = requests.get(f"{node.url}/health", timeout=5)
        refused = requests.get(f"{node.url}/files/%2e%2e%2fetc%2fpasswd", timeout=5)
        assert health.status_code == 200 and refused.status_code in (400, 404)
        assert time.monotonic() - started < WAIT_S / 3
        answers = [w.result() for w in waiting]
    assert [r.status_code for r, _ in answers] == [503, 503]
    assert all(r.headers["Retry-After"] == "1" for r, _ in answers)
    assert answers[0][0].content == b"storage unavailable\n"
    assert all(WAIT_S * 0.9 < elapsed < WAIT_S + 1.5 for _, elapsed in answers), [e for _, e in answers]
    assert "NODE_STREAM_WAIT_MS" in node.log()


def test_waiters_are_served_whole_once_slots_free(node, ferretdb, files):
    with ThreadPoolExecutor(2) as pool:
        with held_slots(node, ferretdb, MAX_STREAMS):
            small = pool.submit(get, node, SMALL)
            big = pool.submit(get, node, BIG)
            time.sleep(0.2)
            assert not small.done() and not big.done(), "a request did not wait"
        small_response, big_response = small.result()[0], big.result()[0]
    assert small_response.status_code == big_response.status_code == 200
    assert sha256(small_response.content) == sha256(files[SMALL])
    assert sha256(big_response.content) == sha256(files[BIG])


def test_clients_that_stop_reading_hold_no_slot(node, files):
    # Three times the bound of clients that read the head and then nothing,
    # their responses under way with a full socket: the others are served at once.
    with ExitStack() as holders:
        for _ in range(3 * MAX_STREAMS):
            holders.enter_context(held_stream(node.port))
        response, elapsed = get(node, SMALL)
    assert response.status_code == 200 and response.content == files[SMALL]
    assert elapsed < WAIT_S, elapsed


def test_streams_past_the_open_cap_wait_their_turn_then_are_503(node, files):
    """NODE_MAX_OPEN_STREAMS bounds the responses under way, stalled ones
    included (each holds up to a batch in memory): one more waits within its
    deadline for a place, then gets the 503; /health does not wait; a place
    given back serves the next request whole."""
    with ExitStack() as holders:
        stalled = [holders.enter_context(held_stream(node.port)) for _ in range(OPEN_STREAMS)]
        started = time.monotonic()
        assert requests.get(f"{node.url}/health", timeout=5).status_code == 200
        assert time.monotonic() - started < 1
        response, elapsed = get(node, SMALL)
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
        assert DEADLINE_S * 0.9 < elapsed < DEADLINE_S + 1.5, elapsed
        assert f"no place of NODE_MAX_OPEN_STREAMS ({OPEN_STREAMS}) free" in node.log()
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(get, node, SMALL)
            time.sleep(0.3)
            assert not waiting.done(), "a request past the cap did not wait"
            reset(stalled[0])  # its client gives up: its place goes to the waiter
            response, elapsed = waiting.result()
    assert response.status_code == 200 and response.content == files[SMALL]
    assert elapsed < DEADLINE_S, elapsed


def test_a_waiter_that_leaves_takes_no_slot(node, ferretdb, files):
    with ThreadPoolExecutor(1) as pool:
        with held_slots(node, ferretdb, MAX_STREAMS):
            leaving = socket.create_connection(("127.0.0.1", node.port))
            leaving.sendall(f"GET /files/{SMALL} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
            time.sleep(0.2)
            reset(leaving)  # leaves the queue
            waiting = pool.submit(get, node, SMALL)
            time.sleep(0.2)
        response, _ = waiting.result()  # a slot that freed went to the request still waiting
    assert response.status_code == 200 and response.content == files[SMALL]
    # (all_slots_free_after: the leaver holds none either)


def test_failed_and_abandoned_reads_release_their_slots(node, files):
    for _ in range(MAX_STREAMS + 1):
        response, _ = get(node, MISSING_FIRST)  # corrupt: a 500, never a 503 (issue 39)
        assert response.status_code == 500 and "Retry-After" not in response.headers
        # A body cut short after its head: Content-Length tells the client.
        connection = http.client.HTTPConnection("127.0.0.1", node.port, timeout=10)
        try:
            connection.request("GET", f"/files/{MISSING_LATER}")
            cut = connection.getresponse()
            assert cut.status == 200
            with pytest.raises(http.client.IncompleteRead):
                cut.read()
        finally:
            connection.close()
        with held_stream(node.port):  # a client that leaves mid-body
            pass
    assert "corrupt stored file" in node.log() and "cut short" in node.log()


def test_sequential_downloads_after_clients_left_mid_body_all_succeed(node, files):
    # Ten times the bound: a slot leaked by each client that left would
    # turn the downloads into 503s from the third round on.
    for _ in range(10):
        with held_stream(node.port):
            pass
        response, _ = get(node, SMALL)
        assert response.status_code == 200 and response.content == files[SMALL]


@pytest.mark.parametrize("variable, value", [
    ("NODE_MAX_STREAMS", "0"), ("NODE_MAX_STREAMS", "-3"), ("NODE_MAX_STREAMS", "many"),
    ("NODE_MAX_STREAMS", "2.5"), ("NODE_MAX_OPEN_STREAMS", "0"),
    ("NODE_STREAM_WAIT_MS", "5s"), ("NODE_STREAM_WAIT_MS", "9999999999"),
    ("SEND_TIMEOUT_MS", "0"), ("SEND_TIMEOUT_MS", "60s"),
])
def test_a_bad_setting_stops_the_process_at_start(mongo_uri, variable, value):
    service = node_service(mongo_uri, DB_NAME)
    result = subprocess.run(service.command, cwd=service.cwd, env={**os.environ, **service.env, variable: value},
                            capture_output=True, text=True, timeout=20)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0] and json.dumps(value) in lines[0], result.stderr
