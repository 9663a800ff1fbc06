"""Stored values are untrusted on every path that reads chunks (issue 24):
the Node and Flask GridFS paths against real FerretDB, flask-postgres
against real PostgreSQL. A files document or chunk that does not add up (its
content type, length, chunk size, upload date, _id, each chunk's exact size,
the chunk sequence) is a 500 for that file only (never a 503: corruption does
not heal on retry), or, once the head is out, a connection closed short of
Content-Length: never a crash, a 200 with a truncated or padded body, nor a
slot lost. A content type that is not a safe
header value falls back to the name's type, as nginx-gridfs does."""
import socket
import subprocess
from datetime import datetime, timezone

import psycopg
import pytest
from bson import Int64, ObjectId
from pymongo import MongoClient

from seed import postgres_store
from support.service_processes import SERVICES, flask_postgres_service, flask_service, node_service, postgres_database

DB_NAME = "lab_stored_values_test"
UPLOADED = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=timezone.utc)
GOOD = {"length": 10, "chunkSize": 4, "chunks": [b"aaaa", b"bbbb", b"cc"]}
# name -> (changes to GOOD's files document, its chunks or None for GOOD's)
# for the files whose answer is a 500 before any byte of the body.
REFUSED = {
    # Issue 39: flask answered 200 with Content-Length: 9223372036854775807.
    "lying-length.bin": ({"length": Int64(2**63 - 1), "chunkSize": 261120}, None),
    "too-many-chunks.bin": ({"length": Int64(2**31 * 4)}, None),
    "huge-chunk-size.bin": ({"chunkSize": 16 * 1024 * 1024 + 1}, None),
    # (A NaN length: FerretDB drops the connection on storing one, so
    # test_a_nan_length_is_refused checks it without a database.)
    "negative-length.bin": ({"length": -1}, None),
    "fractional-length.bin": ({"length": 9.5}, None),
    "text-length.bin": ({"length": "10"}, None),
    "zero-chunk-size.bin": ({"chunkSize": 0}, None),
    "text-chunk-size.bin": ({"chunkSize": "4"}, None),
    "no-upload-date.bin": ({"uploadDate": None}, None),
    "document-id.bin": ({"_id": {"a": 1}}, None),
    # The example: chunk size 4, chunk 0 of 6 bytes was a 200 "aaaabb".
    "long-first-chunk.bin": ({"length": 6}, [b"aaaaaa", b"bb"]),
    "short-first-chunk.bin": ({}, [b"aaa", b"bbbb", b"cc"]),
    "text-chunk.bin": ({}, ["aaaa", b"bbbb", b"cc"]),
    "first-chunk-missing.bin": ({}, {1: b"bbbb", 2: b"cc"}),
}
# name -> (changes, chunks) for the files whose first chunk is sound: 200,
# then the connection closes after the bytes before the bad chunk.
CUT_SHORT = {
    "long-last-chunk.bin": ({"length": 6}, [b"aaaa", b"bbbb"], b"aaaa"),
    "long-middle-chunk.bin": ({}, [b"aaaa", b"bbbbbb", b"cc"], b"aaaa"),
    "chunk-skipped.bin": ({}, {0: b"aaaa", 1: b"bbbb", 3: b"cc"}, b"aaaabbbb"),
    "text-n.bin": ({}, {0: b"aaaa", "1": b"bbbb", 2: b"cc"}, b"aaaa"),
    "text-later-chunk.bin": ({}, [b"aaaa", "bbbb", b"cc"], b"aaaa"),
}
# Content types that must not become a header: the name's type instead.
UNSAFE_TYPES = {
    "crlf-type.bin": "text/html\r\nX-Injected: 1",
    "latin-type.bin": 'text/plain; name="\u00e9"',
    "wide-type.bin": 'text/plain; name="\u0100"',
}
BIG_CHUNKS = [bytes([65 + n]) * 4 for n in range(6)]  # 6 chunks: past the old 4-chunk batch


def chunk_rows(chunks) -> dict[int, object]:
    return dict(enumerate(chunks)) if isinstance(chunks, list) else chunks


@pytest.fixture(scope="module")
def gridfs_files(mongo_uri):
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    database = client[DB_NAME]

    def insert(name: str, changes: dict, chunks, content_type="application/octet-stream"):
        document = {"_id": ObjectId(), "filename": name, "length": GOOD["length"],
                    "chunkSize": GOOD["chunkSize"], "uploadDate": UPLOADED,
                    "metadata": {"contentType": content_type}, **changes}
        if document["uploadDate"] is None:
            del document["uploadDate"]
        database["fs.files"].insert_one(document)
        rows = chunk_rows(GOOD["chunks"] if chunks is None else chunks)
        database["fs.chunks"].insert_many([{"files_id": document["_id"], "n": n, "data": data}
                                           for n, data in rows.items()])

    insert("good.bin", {}, None)
    for name, (changes, chunks) in REFUSED.items():
        insert(name, changes, chunks)
    for name, (changes, chunks, _) in CUT_SHORT.items():
        insert(name, changes, chunks)
    for name, content_type in UNSAFE_TYPES.items():
        insert(name, {"length": len(BIG_CHUNKS) * 4}, BIG_CHUNKS, content_type)
    # A string _id with a CR/LF: its safe characters make the ETag.
    insert("crlf-id.bin", {"_id": "file\r\n1"}, None)
    client.close()


@pytest.fixture(scope="module", params=["flask", "node"])
def gridfs_path(request, mongo_uri, gridfs_files):
    service = {"flask": flask_service, "node": node_service}[request.param](mongo_uri, DB_NAME)
    # Two slots only: a slot a bad file failed to give back shows as a 503.
    service.env.update(NODE_MAX_STREAMS="2", NODE_STREAM_WAIT_MS="1000")
    service.start()
    yield service
    service.stop()


@pytest.fixture(scope="module")
def node_modules(mongo_uri):
    node_service(mongo_uri, DB_NAME)  # installs the Node path's modules when missing


def wire_get(port: int, name: str) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and the body bytes received until the server closed
    the connection (requests would hide a short body or a split header)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET /files/{name} HTTP/1.1\r\nHost: lab\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        key, _, value = line.partition(":")
        assert key not in headers, f"{key} twice: {head!r}"
        headers[key] = value.strip()
    return int(status_line.split()[1]), headers, body


def assert_serves_good(port: int) -> None:
    status, headers, body = wire_get(port, "good.bin")
    assert (status, body) == (200, b"aaaabbbbcc")
    assert headers["Content-Type"] == "application/octet-stream"


@pytest.mark.parametrize("name", REFUSED)
def test_a_bad_stored_value_is_a_500_before_the_body(gridfs_path, name):
    status, headers, body = wire_get(gridfs_path.port, name)
    assert status == 500, (status, headers, body, gridfs_path.log())
    assert "Retry-After" not in headers and body == b"corrupt stored file\n"
    assert_serves_good(gridfs_path.port)  # that file only


@pytest.mark.parametrize("name", CUT_SHORT)
def test_a_bad_later_chunk_closes_the_connection_short_of_content_length(gridfs_path, name):
    status, headers, body = wire_get(gridfs_path.port, name)
    changes, _, sent_before = CUT_SHORT[name]
    assert status == 200 and headers["Content-Length"] == str(changes.get("length", GOOD["length"]))
    assert body == sent_before, gridfs_path.log()
    assert_serves_good(gridfs_path.port)


@pytest.mark.parametrize("name", UNSAFE_TYPES)
def test_an_unsafe_content_type_falls_back_to_the_names(gridfs_path, name):
    for _ in range(3):  # more than the slots: none is lost
        status, headers, body = wire_get(gridfs_path.port, name)
        assert status == 200, (status, body, gridfs_path.log())
        assert headers["Content-Type"] == "application/octet-stream" and "X-Injected" not in headers
        assert body == b"".join(BIG_CHUNKS)


def test_a_string_id_goes_into_the_etag_by_its_safe_characters(gridfs_path):
    status, headers, body = wire_get(gridfs_path.port, "crlf-id.bin")
    assert (status, body) == (200, b"aaaabbbbcc")
    uploaded_ms = int(UPLOADED.timestamp() * 1000)
    assert headers["ETag"] == f'"file1-a-{uploaded_ms:x}"'


@pytest.mark.parametrize("length,js_length", [(float("nan"), "NaN"), (float("inf"), "Infinity"),
                                               (-1, "-1"), (2.5, "2.5")])
def test_a_nan_or_infinite_length_is_refused(node_modules, length, js_length):
    """The one shared check of each language, called directly."""
    from lab_http import CorruptFile
    from lab_http.chunks import checked_file
    with pytest.raises(CorruptFile):
        checked_file("file 1", "1", length, 4, UPLOADED, None, 1)
    script = ("const { checkedFile, CorruptFile } = require('./stored-file');"
              f"try {{ checkedFile({{ _id: 'x', length: {js_length}, chunkSize: 4, uploadDate: new Date() }});"
              " console.log('accepted'); }"
              " catch (error) { console.log(error instanceof CorruptFile ? 'refused' : String(error)); }")
    out = subprocess.run(["node", "-e", script], cwd=SERVICES / "node", capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.strip() == "refused"


# flask-postgres: its schema refuses a bad length, chunk size or date; the
# chunks' sizes and the content type are as untrusted as GridFS's.

@pytest.fixture(scope="module")
def postgres_path(postgres):
    url = postgres_database(postgres.url, DB_NAME)
    with psycopg.connect(url, autocommit=True) as connection:
        postgres_store.create_schema(connection)
        postgres_store.insert_file(connection, "good.bin", b"aaaabbbbcc", "application/octet-stream", 4)
        for name, chunks in {"long-first-chunk.bin": [b"aaaaaa", b"bb"],
                             "long-last-chunk.bin": [b"aaaa", b"bbbb"]}.items():
            file_id = postgres_store.insert_file(connection, name, b"aaaabb", "application/octet-stream", 4)
            connection.execute("DELETE FROM chunks WHERE file_id = %s", (file_id,))
            for n, data in enumerate(chunks):
                connection.execute("INSERT INTO chunks (file_id, n, data) VALUES (%s, %s, %s)",
                                   (file_id, n, data))
        for name, content_type in UNSAFE_TYPES.items():
            postgres_store.insert_file(connection, name, b"".join(BIG_CHUNKS), content_type, 4)
    service = flask_postgres_service(url).start()
    yield service
    service.stop()


def test_postgres_chunks_of_the_wrong_size_are_refused(postgres_path):
    status, headers, body = wire_get(postgres_path.port, "long-first-chunk.bin")
    assert (status, body) == (500, b"corrupt stored file\n") and "Retry-After" not in headers
    status, headers, body = wire_get(postgres_path.port, "long-last-chunk.bin")
    assert (status, headers["Content-Length"], body) == (200, "6", b"aaaa")
    assert_serves_good(postgres_path.port)


@pytest.mark.parametrize("name", UNSAFE_TYPES)
def test_postgres_unsafe_content_type_falls_back_to_the_names(postgres_path, name):
    status, headers, body = wire_get(postgres_path.port, name)
    assert (status, headers["Content-Type"], body) == (200, "application/octet-stream", b"".join(BIG_CHUNKS))
