"""gridfs-fuse (issue 39), natively: the daemon on a mount against the test
FerretDB and nginx with services/gridfs-fuse/nginx.conf. No stored document
stops the process: a files document or chunk that breaks GridFS's rules is a
500 for that file alone, the next file served (a length of 2^63-1 panicked
the daemon); the Go fuzz test over the chunk arithmetic, for a bounded
count; an outage is a 503, never a cut, for a small file fetched at its
open; and new work is refused at once, before any query, while a lookup or
open has waited on MongoDB past the daemon's queue-delay bound."""
import errno
import os
import re
import socket
import subprocess
import threading
import time
from datetime import datetime, timezone

import pytest
import requests
from bson import Binary, ObjectId
from pymongo import MongoClient

from test_gridfs_fuse import SOURCE, GridFSMount, NginxOnFuse, fuse_binary, go_binary, served  # noqa: F401

DB_NAME = "lab_fuse_documents_test"
CHUNK = 255 * 1024
UPLOADED = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
GOOD = b"a" * 4 + b"b" * 4 + b"cc"  # 10 bytes in chunks of 4
# name -> (changes to a 10-byte files document of chunkSize 4, its chunks
# by n): each breaks a GridFS rule the daemon checks before the head.
DAMAGED = {
    "lying-length.bin": ({"length": 2 ** 63 - 1, "chunkSize": CHUNK}, {0: GOOD}),  # the issue's
    "past-2-31-chunks.bin": ({"length": 4 * 2 ** 31 + 1}, None),
    "negative-length.bin": ({"length": -1}, None),
    "fractional-length.bin": ({"length": 9.5}, None),
    "text-length.bin": ({"length": "10"}, None),
    "zero-chunk-size.bin": ({"chunkSize": 0}, None),
    "huge-chunk-size.bin": ({"chunkSize": 16 * 2 ** 20 + 1}, None),
    "text-upload-date.bin": ({"uploadDate": "2024-05-01"}, None),
    # a small file's chunks are fetched at its open: checked before the head
    "wrong-size-chunk.bin": ({}, {0: b"aaa", 1: b"bbbb", 2: b"cc"}),
    "long-last-chunk.bin": ({}, {0: b"aaaa", 1: b"bbbb", 2: b"ccc"}),
    "missing-chunk.bin": ({}, {0: b"aaaa", 2: b"cc"}),
    "text-n.bin": ({}, {0: b"aaaa", "1": b"bbbb", 2: b"cc"}),
    "text-data.bin": ({}, {0: b"aaaa", 1: "bbbb", 2: b"cc"}),
}
BIG = bytes(range(256)) * (3 * CHUNK // 256)  # 3 chunks: past what an open fetches


def insert(database, name: str, changes: dict | None = None, chunks: dict | None = None) -> ObjectId:
    document = {"_id": ObjectId(), "filename": name, "length": len(GOOD), "chunkSize": 4,
                "uploadDate": UPLOADED, **(changes or {})}
    database["fs.files"].insert_one(document)
    rows = chunks if chunks is not None else {0: GOOD[:4], 1: GOOD[4:8], 2: GOOD[8:]}
    database["fs.chunks"].insert_many([{"files_id": document["_id"], "n": n,
                                        "data": Binary(data) if isinstance(data, bytes) else data}
                                       for n, data in rows.items()])
    return document["_id"]


@pytest.fixture(scope="module")
def stored(mongo_uri):
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    database = client[DB_NAME]
    insert(database, "good.bin")
    insert(database, "other-good.bin")
    for name, (changes, chunks) in DAMAGED.items():
        insert(database, name, changes, chunks)
    # A larger file whose last chunk lies: seen only by a read after the head.
    big_chunks = {n: BIG[n * CHUNK:(n + 1) * CHUNK] for n in range(3)}
    insert(database, "big.bin", {"length": len(BIG), "chunkSize": CHUNK}, big_chunks)
    insert(database, "big-lying-last-chunk.bin", {"length": len(BIG), "chunkSize": CHUNK},
           {**big_chunks, 2: big_chunks[2][:-1]})
    client.close()
    yield
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    client.close()


@pytest.fixture(scope="module")
def fuse(fuse_binary, mongo_uri, stored):
    mount, server = served(fuse_binary, mongo_uri, DB_NAME)
    yield mount, server
    server.stop()
    mount.stop()


def raw_get(port: int, name: str) -> tuple[int | None, int | None, bytes, str]:
    """One GET read to the connection's end: the status (None: no answer),
    the Content-Length, the body bytes received and how the connection
    ended."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        sock.sendall(f"GET /files/{name} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n".encode())
        data, ending = b"", "closed"
        try:
            while chunk := sock.recv(1 << 20):
                data += chunk
        except ConnectionResetError:
            ending = "reset"
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head[9:12]) if head else None
    length = re.search(rb"\r\nContent-Length: (\d+)", head)
    return status, int(length[1]) if length else None, body, ending


@pytest.mark.native  # Go's fuzzing engine
def test_fuzz_the_chunk_arithmetic():
    """FuzzChunkArithmetic (services/gridfs-fuse/fuzz_test.go) for a bounded
    number of inputs: a count, not -fuzztime's seconds, which go1.26's
    coordinator can fail at its deadline with no finding (golang/go#75804)."""
    result = subprocess.run([go_binary(), "test", "-run", "^$", "-fuzz", "^FuzzChunkArithmetic$",
                             "-fuzztime", "40000x", "-parallel", "2", "."], cwd=SOURCE, capture_output=True,
                            text=True, timeout=600, env={**os.environ, "CGO_ENABLED": "0"})
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert re.search(r"execs: [1-9]\d{4}", result.stdout), result.stdout[-3000:]  # it ran


@pytest.mark.parametrize("name", DAMAGED)
def test_a_document_breaking_gridfs_rules_is_a_500_and_the_daemon_serves_on(fuse, name):
    mount, server = fuse
    status, _, body, _ = raw_get(server.port, name)
    assert status == 500, (status, body[:200], server.log())
    assert mount.proc.poll() is None, mount.log()
    good = requests.get(f"{server.url}/files/good.bin", timeout=10)
    assert good.status_code == 200 and good.content == GOOD
    assert "stored file is damaged" in mount.log()


def test_a_lying_later_chunk_cuts_the_answer_and_the_daemon_serves_on(fuse):
    """Seen only by a read, once nginx has chosen a 200: the connection
    ends with no byte that is not the file's. nginx reads a file of 64 KiB
    and more with direct I/O (entrypoint.sh) into its buffer before the
    head goes out, and this one's first read fetches every chunk, so the
    connection ends with no answer at all (with sendfile: the head, then
    short of Content-Length)."""
    mount, server = fuse
    status, _, body, _ = raw_get(server.port, "big-lying-last-chunk.bin")
    assert status is None and body == b""
    assert mount.proc.poll() is None, mount.log()
    assert requests.get(f"{server.url}/files/big.bin", timeout=10).content == BIG


def test_a_small_file_opened_before_an_outage_reads_whole(fuse, ferretdb):
    """Fetched at its open: its reads need MongoDB no more, so an outage
    after nginx's open cannot cut its answer (a 1 KB answer was cut in a
    database restart). A larger file's open only checks MongoDB answers."""
    mount, _ = fuse
    small = os.open(mount.path / "other-good.bin", os.O_RDONLY)
    big = os.open(mount.path / "big.bin", os.O_RDONLY)
    try:
        ferretdb.pause()
        try:
            assert os.pread(small, 4096, 0) == GOOD
            with pytest.raises(OSError) as cut:
                os.pread(big, 4096, 0)
            assert cut.value.errno == errno.EIO
        finally:
            ferretdb.resume()
    finally:
        os.close(small)
        os.close(big)
    deadline = time.monotonic() + 10  # the timed-out read marked MongoDB down until a ping answers
    while requests.get(f"{fuse[1].url}/files/good.bin", timeout=10).status_code != 200:
        assert time.monotonic() < deadline, mount.log()
        time.sleep(0.1)


def test_new_work_is_refused_at_once_while_an_open_waits_past_the_bound(fuse_binary, mongo_uri, stored, ferretdb):
    """An open under way on a frozen FerretDB: once it has waited past the
    queue-delay bound (MONGO_TIMEOUT/4: 1 s here), a request for another
    file is a 503 with Retry-After at once, with no query (any would wait
    as long), instead of a 503 at MONGO_TIMEOUT (4 s) with a worker held;
    the open admitted is not refused: once FerretDB is back it completes
    and reads whole, and the next request is served."""
    mount, server = served(fuse_binary, mongo_uri, DB_NAME, MONGO_TIMEOUT="4")
    opener = None
    try:
        took = []
        for _ in range(3):
            began = time.monotonic()
            assert requests.get(f"{server.url}/files/good.bin", timeout=10).status_code == 200
            took.append(time.monotonic() - began)
        bound = max(0.5, 10 * sorted(took)[1])
        assert bound < 2, f"the machine is too slow for this test: a request took {sorted(took)[1]:.2f} s"
        opened = {}

        def open_and_read():
            with open(mount.path / "big.bin", "rb") as big:  # not looked up yet: its lookup queries
                opened["data"] = big.read()

        ferretdb.pause()
        opener = threading.Thread(target=open_and_read)
        opener.start()
        time.sleep(1.3)  # the lookup waits past the bound
        began = time.monotonic()
        refused = requests.get(f"{server.url}/files/other-good.bin", timeout=15)
        elapsed = time.monotonic() - began
        ferretdb.resume()
        assert refused.status_code == 503 and refused.headers.get("Retry-After") == "1", refused.text
        assert elapsed < bound, f"refused after {elapsed:.2f} s (bound {bound:.2f} s from a baseline)"
        assert "MongoDB busy" in mount.log(), mount.log()
        opener.join(15)
        assert opened.get("data") == BIG, "the open under way was refused or its read cut"
        assert requests.get(f"{server.url}/files/other-good.bin", timeout=10).content == GOOD
    finally:
        ferretdb.resume()
        if opener is not None:
            opener.join(15)
        server.stop()
        mount.stop()
