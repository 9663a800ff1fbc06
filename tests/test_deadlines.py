"""One deadline per request (REQUEST_DEADLINE_MS, issue 24) on the Node
path, against real FerretDB and the real node process: the wait for a slot
and the MongoDB round trips before the head all fit in it, or the answer is
the 503 with Retry-After, whatever NODE_STREAM_WAIT_MS or the driver's
socket timeout would allow."""
import socket
import struct
import time

import gridfs
import pytest
import requests
from pymongo import MongoClient

from service_processes import node_service

DB_NAME = "lab_deadlines_test"
DEADLINE_S = 1.0
BIG = "big.bin"  # 12 MiB: a client that does not read holds its stream (and slot)
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


def test_a_request_queued_for_a_slot_is_a_503_at_the_deadline(node):
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        holder.connect(("127.0.0.1", node.port))
        holder.sendall(f"GET /files/{BIG} HTTP/1.1\r\nHost: lab\r\n\r\n".encode())
        assert holder.recv(1024).startswith(b"HTTP/1.1 200 ")  # it holds the one slot, unread
        response, elapsed = timed_get(node, SMALL)
    finally:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        holder.close()
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert DEADLINE_S * 0.9 < elapsed < DEADLINE_S + 0.7, elapsed
    assert "REQUEST_DEADLINE_MS" in node.log()
    assert timed_get(node, SMALL)[0].status_code == 200  # the slot came back


def test_a_frozen_mongodb_is_a_503_at_the_deadline_then_recovers(node, ferretdb):
    assert timed_get(node, SMALL)[0].status_code == 200  # connected
    ferretdb.pause()
    try:
        response, elapsed = timed_get(node, SMALL)
    finally:
        ferretdb.resume()
    assert response.status_code == 503 and response.headers["Retry-After"] == "1"
    assert elapsed < DEADLINE_S + 0.7, elapsed
    deadline = time.monotonic() + 15
    while timed_get(node, SMALL)[0].status_code != 200:
        assert time.monotonic() < deadline, "node did not recover after MongoDB came back"
        time.sleep(0.5)
