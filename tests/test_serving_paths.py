"""The GridFS serving paths (Flask, Node, the nginx module), run natively
against FerretDB, and flask-postgres on the same files in PostgreSQL, answer
like nginx's static module serving the same bytes from disk: bodies,
headers, Range, conditional requests, hostile names, a MongoDB outage (its
PostgreSQL outage: test_flask_postgres.py), and resumed / segmented
downloads by real clients (curl, aria2c)."""
import email.utils
import hashlib
import http.client
import random
import socket
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import gridfs
import psycopg
import pytest
import requests
from pymongo import MongoClient

from seed import postgres_store
from support.service_processes import (NginxStatic, flask_postgres_service, flask_service, nginx_gridfs_service,
                               node_service, postgres_database)

DB_NAME = "lab_serving_paths_test"
CHUNK = 255 * 1024
SIZES = {
    "0B.bin": 0,
    "1B.bin": 1,
    "1KB.bin": 1024,
    "255KiB-minus-1.bin": CHUNK - 1,
    "255KiB.bin": CHUNK,
    "255KiB-plus-1.bin": CHUNK + 1,
    "1MB.bin": 1024 * 1024,
    "5MB.bin": 5 * 1024 * 1024,
}
# Stored without metadata.contentType: the type comes from the extension.
UNTYPED = {"notes.txt": b"plain text\n", "data.json": b'{"a": 1}\n'}
GRIDFS_PATHS = ["flask", "node", "nginx-gridfs"]
PATHS = GRIDFS_PATHS + ["flask-postgres"]
START = {"flask": flask_service, "node": node_service, "nginx-gridfs": nginx_gridfs_service}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def seeded(mongo_uri, postgres):
    """name -> bytes, stored in GridFS and in PostgreSQL as the seed does and
    on disk for nginx; and the PostgreSQL database's URL."""
    rng = random.Random(20240601)
    contents = {name: rng.randbytes(size) for name, size in SIZES.items()}
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    bucket = gridfs.GridFSBucket(client[DB_NAME])
    for name, data in contents.items():
        bucket.upload_from_stream(name, data, metadata={"contentType": "application/octet-stream",
                                                        "sha256": sha256(data)})
    for name, data in UNTYPED.items():
        bucket.upload_from_stream(name, data)
    # Two revisions: the newest (by uploadDate) must be served.
    bucket.upload_from_stream("revised.bin", b"old revision",
                              metadata={"contentType": "application/octet-stream"})
    time.sleep(0.01)
    bucket.upload_from_stream("revised.bin", b"new revision",
                              metadata={"contentType": "application/octet-stream"})
    client.close()
    postgres_url = postgres_database(postgres.url, DB_NAME)
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        postgres_store.create_schema(connection)
        for name, data in contents.items():
            postgres_store.insert_file(connection, name, data, "application/octet-stream")
        for name, data in UNTYPED.items():
            postgres_store.insert_file(connection, name, data, None)
        for data in (b"old revision", b"new revision"):
            postgres_store.insert_file(connection, "revised.bin", data, "application/octet-stream")
    contents.update(UNTYPED)
    contents["revised.bin"] = b"new revision"
    # nginx's workers run as nobody: a world-readable directory of its own.
    files_dir = Path(tempfile.mkdtemp(prefix="lab-files-"))
    files_dir.chmod(0o755)
    for name, data in contents.items():
        (files_dir / name).write_bytes(data)
        (files_dir / name).chmod(0o644)
    yield contents, files_dir, postgres_url
    subprocess.run(["rm", "-rf", str(files_dir)], check=False)


@pytest.fixture(scope="module")
def files(seeded):
    return seeded[0]


@pytest.fixture(scope="module")
def nginx(seeded):
    server = NginxStatic(seeded[1]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def services(mongo_uri, seeded):
    started = {}
    try:
        for path in PATHS:
            started[path] = (flask_postgres_service(seeded[2]) if path == "flask-postgres"
                             else START[path](mongo_uri, DB_NAME)).start()
        yield started
    finally:
        for service in started.values():
            service.stop()


@pytest.fixture(params=PATHS)
def service(request, services):
    return services[request.param]


@pytest.fixture(params=GRIDFS_PATHS)
def gridfs_service(request, services):
    return services[request.param]


def get(base: str, name: str, **headers) -> requests.Response:
    return requests.get(f"{base}/files/{name}", headers=headers, timeout=30)


def raw_request(port: int, method: str, target: str) -> tuple[int, bytes]:
    """A request sent with its target exactly as given (no client-side normalisation)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.putrequest(method, target, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("name", list(SIZES))
def test_body_is_the_stored_bytes(service, nginx, files, name):
    response = get(service.url, name)
    assert response.status_code == 200
    assert sha256(response.content) == sha256(files[name])
    assert response.headers["Content-Length"] == str(len(files[name]))
    assert sha256(get(nginx.url, name).content) == sha256(response.content)


@pytest.mark.parametrize("name", ["0B.bin", "1KB.bin", "5MB.bin"])
def test_headers_match_nginx(service, nginx, name):
    ours, theirs = get(service.url, name), get(nginx.url, name)
    for header in ("Content-Length", "Content-Type", "Accept-Ranges"):
        assert ours.headers.get(header) == theirs.headers.get(header), header
    etag = ours.headers["ETag"]
    assert etag.startswith('"') and etag.endswith('"') and len(etag) > 2, "a strong, quoted ETag"
    again = get(service.url, name)
    assert again.headers["ETag"] == etag
    assert again.headers["Last-Modified"] == ours.headers["Last-Modified"]
    last_modified = email.utils.parsedate_to_datetime(ours.headers["Last-Modified"])
    assert abs((datetime.now(timezone.utc) - last_modified).total_seconds()) < 3600


def test_other_files_have_other_etags(service):
    etags = {get(service.url, name).headers["ETag"] for name in SIZES}
    assert len(etags) == len(SIZES)


def test_every_gridfs_path_sends_the_same_validators(services):
    answers = [get(services[path].url, "1MB.bin") for path in GRIDFS_PATHS]
    assert len({a.headers["ETag"] for a in answers}) == 1
    assert len({a.headers["Last-Modified"] for a in answers}) == 1


@pytest.mark.parametrize("name", list(UNTYPED))
def test_content_type_guessed_from_extension_like_nginx(service, nginx, name):
    ours = get(service.url, name)
    assert ours.status_code == 200 and ours.content == UNTYPED[name]
    assert ours.headers["Content-Type"] == get(nginx.url, name).headers["Content-Type"]


def test_newest_revision_is_served(service):
    assert get(service.url, "revised.bin").content == b"new revision"


RANGE_CASES = [
    ("5MB.bin", "bytes=0-99"),
    ("5MB.bin", "bytes=1000000-"),
    ("5MB.bin", "bytes=-500"),
    ("5MB.bin", "bytes=0-0"),
    ("1MB.bin", f"bytes={CHUNK - 10}-{CHUNK + 10}"),  # spans the first chunk boundary
    ("1MB.bin", f"bytes={CHUNK}-{2 * CHUNK - 1}"),  # exactly the second chunk
    ("1MB.bin", f"bytes={CHUNK - 1}-{3 * CHUNK}"),  # three chunks
    ("255KiB-plus-1.bin", f"bytes={CHUNK}-"),  # the one byte of the last chunk
    ("255KiB.bin", "bytes=-1"),
    ("1MB.bin", "bytes=100-99999999"),  # end beyond the file: clamped
    ("1MB.bin", "bytes=-99999999"),  # suffix longer than the file: all of it
    ("1MB.bin", "bytes=99999999-"),  # beyond the end: 416
    ("1MB.bin", "bytes=1048576-1048577"),  # starts at the length: 416
    ("1B.bin", "bytes=1-"),
    ("0B.bin", "bytes=0-"),
    ("0B.bin", "bytes=0-0"),
    ("0B.bin", "bytes=-5"),
    ("1KB.bin", "bytes=-0"),
    ("1KB.bin", "bytes=5-2"),
    ("1KB.bin", "bytes=5-2,10-20"),  # the backwards range is dropped
    ("1KB.bin", "BYTES=10-20"),
    ("1KB.bin", "bytes= 10 - 20 "),
    ("1KB.bin", "bytes=0-99999999999999999999999"),  # overflows off_t
    # Malformed: nginx ignores an unknown unit (200) and answers 416 for
    # garbage after "bytes="; the paths must do the same.
    ("1KB.bin", "items=0-5"),
    ("1KB.bin", "bytes="),
    ("1KB.bin", "bytes=abc"),
    ("1KB.bin", "bytes=1-2-3"),
    ("1KB.bin", "bytes=--1"),
    ("1KB.bin", "bytes=0-1;x"),
]


@pytest.mark.parametrize("name,range_header", RANGE_CASES)
def test_range_matches_nginx(service, nginx, files, name, range_header):
    ours, theirs = get(service.url, name, Range=range_header), get(nginx.url, name, Range=range_header)
    assert ours.status_code == theirs.status_code
    assert ours.headers.get("Content-Range") == theirs.headers.get("Content-Range")
    if ours.status_code in (200, 206):
        assert sha256(ours.content) == sha256(theirs.content)
        assert ours.headers["Content-Length"] == str(len(ours.content))
        if ours.status_code == 206:
            first, last = map(int, ours.headers["Content-Range"].split()[1].split("/")[0].split("-"))
            assert ours.content == files[name][first:last + 1]


def test_unsatisfiable_range_is_416_with_length(service):
    response = get(service.url, "1MB.bin", Range="bytes=2000000-")
    assert response.status_code == 416
    assert response.headers["Content-Range"] == f"bytes */{1024 * 1024}"


def test_several_ranges_answer_the_whole_file(service, files):
    # nginx answers multipart/byteranges; the paths answer 200 + the whole file.
    response = get(service.url, "1KB.bin", Range="bytes=0-1,5-6")
    assert response.status_code == 200
    assert response.content == files["1KB.bin"]


def test_if_range(service, nginx, files):
    for server in (service, nginx):
        full = get(server.url, "1MB.bin")
        etag, last_modified = full.headers["ETag"], full.headers["Last-Modified"]
        for if_range, expected in ((etag, 206), ('"not-the-etag"', 200), ("W/" + etag, 200),
                                   (last_modified, 206), ("Mon, 01 Jan 2001 00:00:00 GMT", 200)):
            response = get(server.url, "1MB.bin", Range="bytes=10-19", **{"If-Range": if_range})
            assert response.status_code == expected, (server.url, if_range)
            assert response.content == (files["1MB.bin"][10:20] if expected == 206 else files["1MB.bin"])


def test_conditional_requests_match_nginx(service, nginx):
    for server in (service, nginx):
        full = get(server.url, "1KB.bin")
        etag, last_modified = full.headers["ETag"], full.headers["Last-Modified"]
        cases = [
            ({"If-None-Match": etag}, 304),
            ({"If-None-Match": "W/" + etag}, 304),
            ({"If-None-Match": f'"other", {etag}'}, 304),
            ({"If-None-Match": "*"}, 304),
            ({"If-None-Match": '"other"'}, 200),
            ({"If-Modified-Since": last_modified}, 304),
            ({"If-Modified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}, 200),
            ({"If-Modified-Since": "not a date"}, 200),
            ({"If-None-Match": etag, "If-Modified-Since": last_modified}, 304),
            ({"If-None-Match": etag, "Range": "bytes=0-9"}, 304),
            ({"If-Match": etag}, 200),
            ({"If-Match": '"other"'}, 412),
            ({"If-Unmodified-Since": last_modified}, 200),
            ({"If-Unmodified-Since": "Mon, 01 Jan 2001 00:00:00 GMT"}, 412),
        ]
        for headers, expected in cases:
            response = get(server.url, "1KB.bin", **headers)
            assert response.status_code == expected, (server.url, headers)
            if expected == 304:
                assert response.content == b""
                assert response.headers["ETag"] == etag


def test_head_sends_headers_only(service, files):
    got, head = get(service.url, "5MB.bin"), requests.head(f"{service.url}/files/5MB.bin", timeout=10)
    assert head.status_code == 200 and head.content == b""
    for header in ("Content-Length", "Content-Type", "ETag", "Last-Modified", "Accept-Ranges"):
        assert head.headers[header] == got.headers[header]
    partial = requests.head(f"{service.url}/files/5MB.bin", headers={"Range": "bytes=0-9"}, timeout=10)
    assert partial.status_code == 206 and partial.headers["Content-Length"] == "10"


def test_missing_file_is_404(service):
    assert get(service.url, "no-such-file.bin").status_code == 404
    assert get(service.url, "1KB.bin.missing").status_code == 404


HOSTILE_TARGETS = [
    "/files/../etc/passwd",
    "/files/../../../../etc/passwd",
    "/files/..%2f..%2f..%2fetc%2fpasswd",
    "/files/%2e%2e/%2e%2e/etc/passwd",
    "/files/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "/files/%2E%2E%2F1KB.bin",
    "/files/.",
    "/files/%2e",
    "/files/..",
    "/files/1KB.bin%00",
    "/files/1KB.bin%00.txt",
    "/files/%00",
    "/files/..\\..\\etc\\passwd",
    "/files/..%5c..%5cetc%5cpasswd",
    "/files/%5c1KB.bin",
    "/files//etc/passwd",
    "/files/a//b",
    "/files/%zz",
    "/files/%",
    "/files/1KB.bin%",
    "/files/%e2%82",  # truncated UTF-8
    "/files/%ff%fe",  # not UTF-8
    "/files/%c0%ae%c0%ae/etc/passwd",  # overlong UTF-8 dots
    "/files/%0d%0aX-Injected:%201",
    "/files/" + "a" * 256,
    "/files/" + "%e2%82%ac" * 86,  # 258 bytes once decoded
    "/files/" + "a" * 5000,
]


@pytest.mark.parametrize("target", HOSTILE_TARGETS)
def test_hostile_names_are_refused(service, target):
    for method in ("GET", "HEAD"):
        status, body = raw_request(service.port, method, target)
        # 414: gunicorn's request-line limit (4094 bytes) answers first.
        assert status in ((400, 404, 414) if len(target) > 4000 else (400, 404)), (method, target, status)
        assert b"root:" not in body


def test_longest_name_is_looked_up(service):
    # 255 bytes is allowed (and absent): 404, not 400.
    assert raw_request(service.port, "GET", "/files/" + "a" * 255)[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405(service, method):
    response = requests.request(method, f"{service.url}/files/1KB.bin", timeout=10)
    assert response.status_code == 405
    assert set(response.headers["Allow"].replace(" ", "").split(",")) == {"GET", "HEAD"}


def test_health_does_not_touch_mongodb(service):
    response = requests.get(f"{service.url}/health", timeout=5)
    assert response.status_code == 200 and response.text.strip() == "ok"


def test_curl_resumes_a_partial_download(service, files, tmp_path):
    target = tmp_path / "5MB.bin"
    target.write_bytes(files["5MB.bin"][:1_234_567])
    subprocess.run(["curl", "-sS", "-f", "-C", "-", "-o", str(target), f"{service.url}/files/5MB.bin"],
                   check=True, timeout=60)
    assert sha256(target.read_bytes()) == sha256(files["5MB.bin"])


def test_aria2c_segmented_download(service, files, tmp_path):
    subprocess.run(["aria2c", "-q", "-x", "4", "-s", "4", "-k", "1M", "--file-allocation=none",
                    "--allow-overwrite=true", "--auto-file-renaming=false", "-d", str(tmp_path),
                    "-o", "5MB.bin", f"{service.url}/files/5MB.bin"],
                   check=True, timeout=60)
    assert sha256((tmp_path / "5MB.bin").read_bytes()) == sha256(files["5MB.bin"])


def restart(ferretdb) -> None:
    # Once, in a full run, FerretDB exited at once on restart (status 1):
    # probably its port, free while it was down, taken as the ephemeral port
    # of some client connection. A few bounded attempts.
    for attempt in range(3):
        try:
            ferretdb.start()
            return
        except RuntimeError:
            if attempt == 2:
                raise
            time.sleep(2)


def test_a_505_closes_the_connection_as_nginx_does(service, nginx):
    """An HTTP/2.0 request line: 505, then the connection closes at once,
    as nginx closes it (not at the keep-alive timeout)."""
    for server in (nginx, service):
        started = time.monotonic()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /files/1B.bin HTTP/2.0\r\nHost: lab\r\n\r\n")
            answer = b""
            while data := sock.recv(65536):
                answer += data
        assert answer.split(b" ", 2)[1] == b"505", (server.url, answer[:80])
        assert time.monotonic() - started < 2, server.url


def test_mongodb_outage_is_503_then_recovers(gridfs_service, ferretdb, files):
    service = gridfs_service
    assert get(service.url, "1KB.bin").status_code == 200
    ferretdb.stop()
    try:
        for attempt in range(3):  # pooled connections die first, then server selection times out
            started = time.monotonic()
            response = get(service.url, "1KB.bin")
            elapsed = time.monotonic() - started
            assert response.status_code == 503, attempt
            assert elapsed < 5, f"503 took {elapsed:.1f} s"
        assert requests.get(f"{service.url}/health", timeout=5).status_code == 200
        assert "unavailable" in service.log(), "the cause is logged to stderr"
    finally:
        restart(ferretdb)
    deadline = time.monotonic() + 20
    while True:
        response = get(service.url, "1KB.bin")
        if response.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert response.status_code == 200
    assert response.content == files["1KB.bin"]
    assert get(service.url, "5MB.bin").content == files["5MB.bin"]


@pytest.mark.parametrize("path", GRIDFS_PATHS)
def test_path_started_while_mongodb_is_down_recovers(path, ferretdb, mongo_uri, files):
    start_service = START[path]
    ferretdb.stop()
    service = None
    try:
        service = start_service(mongo_uri, DB_NAME).start()  # /health needs no MongoDB
        assert get(service.url, "1KB.bin").status_code == 503
        restart(ferretdb)
        deadline = time.monotonic() + 20
        while (response := get(service.url, "1KB.bin")).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert response.status_code == 200 and response.content == files["1KB.bin"]
    finally:
        if ferretdb.proc.poll() is not None:
            restart(ferretdb)
        if service is not None:
            service.stop()
