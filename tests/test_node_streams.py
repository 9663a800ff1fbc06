"""The Node path's bound on the requests using MongoDB at once
(NODE_MAX_STREAMS), against real FerretDB and the real node process: a
request beyond the bound (a body, a HEAD, a conditional GET: each looks the
file up) waits its turn (first come, first served), at most
NODE_STREAM_WAIT_MS, then gets the store-unavailable 503; what needs no
lookup (/health, a name refused) never waits; every slot comes back,
whether the body was sent whole, its client left, or its read failed; a bad
setting stops the process at start."""
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

from service_processes import node_service

DB_NAME = "lab_node_streams_test"
MAX_STREAMS = 2
WAIT_S = 1.5
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
    service.env.update(NODE_MAX_STREAMS=str(MAX_STREAMS), NODE_STREAM_WAIT_MS=str(int(WAIT_S * 1000)))
    service.start()
    yield service
    service.stop()


@pytest.fixture(autouse=True)
def all_slots_free_after(request):
    """After each test that used the server, every slot comes back: as many
    streams as the bound can be held at once (a leaked slot would make the
    last one wait, then get a 503)."""
    yield
    if "node" in request.fixturenames:
        with ExitStack() as stack:
            for _ in range(MAX_STREAMS):
                stack.enter_context(held_stream(request.getfixturevalue("node").port))


@contextmanager
def held_stream(port: int):
    """A GET of BIG whose client reads the head, then nothing: the server's
    send buffer fills and its stream stays open until the block ends, when
    the connection is reset."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.settimeout(WAIT_S + 5)
    try:
        sock.connect(("127.0.0.1", port))
        sock.sendall(f"GET /files/{BIG} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:  # the status line leaves only once the slot is taken
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


def test_requests_beyond_the_bound_wait_then_are_503_while_health_is_at_once(node, files):
    head, _ = get(node, SMALL, "HEAD")
    etag = head.headers["ETag"]
    with held_stream(node.port), held_stream(node.port), ThreadPoolExecutor(3) as pool:
        waiting = [pool.submit(get, node, SMALL), pool.submit(get, node, SMALL, "HEAD"),
                   pool.submit(get, node, SMALL, **{"If-None-Match": etag})]
        time.sleep(0.2)
        assert not any(w.done() for w in waiting), "a request beyond the bound did not wait"
        started = time.monotonic()
        health = requests.get(f"{node.url}/health", timeout=5)
        refused = requests.get(f"{node.url}/files/%2e%2e%2fetc%2fpasswd", timeout=5)
        assert health.status_code == 200 and refused.status_code in (400, 404)
        assert time.monotonic() - started < WAIT_S / 3
        answers = [w.result() for w in waiting]
    assert [r.status_code for r, _ in answers] == [503, 503, 503]
    assert all(r.headers["Retry-After"] == "1" for r, _ in answers)
    assert answers[0][0].content == b"storage unavailable\n"
    assert all(WAIT_S * 0.9 < elapsed < WAIT_S + 1.5 for _, elapsed in answers), [e for _, e in answers]
    assert "NODE_STREAM_WAIT_MS" in node.log()


def test_a_freed_slot_goes_to_the_waiters_in_arrival_order_with_whole_bodies(node, files):
    with ExitStack() as holders, ThreadPoolExecutor(2) as pool:
        first = holders.enter_context(held_stream(node.port))
        holders.enter_context(held_stream(node.port))
        early = pool.submit(lambda: (get(node, SMALL)[0], time.monotonic()))
        time.sleep(0.2)
        late = pool.submit(lambda: (get(node, BIG)[0], time.monotonic()))
        time.sleep(0.2)
        assert not early.done() and not late.done(), "a body did not wait"
        reset(first)  # one slot frees: the early waiter streams, then the late one
        early_response, early_done = early.result()
        late_response, late_done = late.result()
    assert early_response.status_code == late_response.status_code == 200
    assert sha256(early_response.content) == sha256(files[SMALL])
    assert sha256(late_response.content) == sha256(files[BIG])
    # The late waiter's body, twenty times larger, could only start once the
    # early one had ended.
    assert early_done < late_done


def test_a_waiter_that_leaves_takes_no_slot(node, files):
    with held_stream(node.port), ExitStack() as holders, ThreadPoolExecutor(1) as pool:
        holders.enter_context(held_stream(node.port))
        leaving = socket.create_connection(("127.0.0.1", node.port))
        leaving.sendall(f"GET /files/{SMALL} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        time.sleep(0.2)
        reset(leaving)  # leaves the queue
        waiting = pool.submit(get, node, SMALL)
        time.sleep(0.2)
        holders.close()  # the one slot that frees goes to the request still waiting
        response, _ = waiting.result()
    assert response.status_code == 200 and response.content == files[SMALL]
    # (all_slots_free_after: the leaver holds none either)


def test_failed_and_abandoned_reads_release_their_slots(node, files):
    for _ in range(MAX_STREAMS + 1):
        response, _ = get(node, MISSING_FIRST)
        assert response.status_code == 503 and response.headers["Retry-After"] == "1"
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
    assert "cannot read chunks" in node.log() and "cut short" in node.log()


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
    ("NODE_MAX_STREAMS", "2.5"), ("NODE_STREAM_WAIT_MS", "5s"), ("NODE_STREAM_WAIT_MS", "9999999999"),
])
def test_a_bad_setting_stops_the_process_at_start(mongo_uri, variable, value):
    service = node_service(mongo_uri, DB_NAME)
    result = subprocess.run(service.command, cwd=service.cwd, env={**os.environ, **service.env, variable: value},
                            capture_output=True, text=True, timeout=20)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and variable in lines[0] and json.dumps(value) in lines[0], result.stderr
