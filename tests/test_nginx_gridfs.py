"""The nginx GridFS module (services/nginx-gridfs/module), built natively and
loaded into the host's nginx, against the real FerretDB fixture.

Each answer is compared with what a plain static location of the same nginx
answers for the same bytes on disk. The tests run twice: on the module as
built for use, and on its ASan + UBSan build."""
import gzip
import http.client
import random
import re
import shutil
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

from support.nginx_gridfs_build import Nginx, build_module
from support.processes import free_port

DB = "nginx_gridfs_test"
CHUNK = 255 * 1024  # the drivers' default chunk size
SIZES = {"0B.bin": 0, "1B.bin": 1, "1KB.bin": 1024, "chunk-1.bin": CHUNK - 1, "chunk.bin": CHUNK,
         "chunk+1.bin": CHUNK + 1, "1MB.bin": 1_000_000, "1MiB.bin": 1 << 20, "10MB.bin": 10_000_000}
TIMEOUT = 30  # seconds, for every HTTP call that should answer


@pytest.fixture(scope="module")
def stored(mongo_uri):
    """The test files in GridFS and, byte for byte, on disk."""
    rng = random.Random(3)
    # Readable by nginx's unprivileged worker, unlike pytest's tmp tree.
    files_dir = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-files-"))
    files_dir.chmod(0o755)
    client = pymongo.MongoClient(mongo_uri)
    client.drop_database(DB)
    bucket = gridfs.GridFSBucket(client[DB])
    data, ids = {}, {}
    for name, size in SIZES.items():
        data[name] = rng.randbytes(size)
        ids[name] = bucket.upload_from_stream(name, data[name],
                                              metadata={"contentType": "application/octet-stream"})
        (files_dir / name).write_bytes(data[name])
    # Two revisions under one name: the newest must be served.
    bucket.upload_from_stream("revised.bin", b"old revision")
    time.sleep(0.01)
    bucket.upload_from_stream("revised.bin", b"new revision")
    # No contentType at all: nginx's types by extension.
    bucket.upload_from_stream("page.html", b"<p>hi</p>")
    # Text over two chunks, for the filters that rewrite a body.
    data["hello.txt"] = b"".join(b"hello gridfs %06d\n" % i for i in range(20_000))
    ids["hello.txt"] = bucket.upload_from_stream("hello.txt", data["hello.txt"])
    (files_dir / "hello.txt").write_bytes(data["hello.txt"])
    # Three chunks, the middle one lost: within the first window.
    broken = bucket.upload_from_stream("broken.bin", rng.randbytes(3 * CHUNK))
    client[DB]["fs.chunks"].delete_one({"files_id": broken, "n": 1})
    # Six chunks, the last one lost: after the first window (5 chunks).
    broken = bucket.upload_from_stream("broken-late.bin", rng.randbytes(6 * CHUNK))
    client[DB]["fs.chunks"].delete_one({"files_id": broken, "n": 5})
    yield {"data": data, "ids": ids, "dir": files_dir}
    client.drop_database(DB)
    client.close()
    shutil.rmtree(files_dir, ignore_errors=True)


GRIDFS = f"gridfs {DB} field=filename type=string;"
# The configurations people write around a location (issue 38), in a
# server of their own: an if block (the usual CORS snippet), limit_except,
# rewrite ... break, filters that take the whole body (gzip, sub_filter,
# addition), error pages for the deadline's 503 (a static page, and a file
# of a gridfs location), and HTTP/2; each served as nginx's static module
# serves it.
AROUND = """
    server {{
        listen 127.0.0.1:{port};
        listen 127.0.0.1:{h2} http2;
        location /files/ {{ {gridfs} }}
        location /static/ {{ alias {files}/; }}
        location /cors/ {{
            {gridfs}
            if ($http_origin) {{ add_header X-Origin $http_origin; }}
        }}
        location /getonly/ {{ {gridfs} limit_except GET {{ deny all; }} }}
        location /renamed/ {{ rewrite ^/renamed/(.*)$ /renamed/$1.bin break; {gridfs} }}
        location /gzipped/ {{ {gridfs} gzip on; gzip_types application/octet-stream; gzip_min_length 1; }}
        location /subbed/ {{ {gridfs} {sub} }}
        location /static-subbed/ {{ alias {files}/; {sub} }}
        location /added/ {{ {gridfs} addition_types *; add_after_body /static/1B.bin; }}
        location /late/ {{ {gridfs} gridfs_deadline 300ms; error_page 503 /50x.html; }}
        location /late-gridfs/ {{ {gridfs} gridfs_deadline 300ms; error_page 503 /files/1KB.bin; }}
        location = /50x.html {{ root {html}; }}
        location = /status {{ stub_status; }}
    }}
"""
SUB = "sub_filter_types *; sub_filter hello HELLO; sub_filter_once off;"
PAGE_50X = b"<html>busy, retry</html>\n"


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "asan"])
def nginx(stored, mongo_uri, request):
    """The module as built for use, then its ASan + UBSan build, which must
    write no report (checked once its tests are done)."""
    prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
    (prefix / "html").mkdir()
    (prefix / "html" / "50x.html").write_bytes(PAGE_50X)
    around_port, h2_port = free_port(), free_port()
    around = AROUND.format(port=around_port, h2=h2_port, gridfs=GRIDFS, sub=SUB, files=stored["dir"],
                           html=prefix / "html")
    # Correctness under load, not load shedding (test_nginx_gridfs_hardening):
    # FerretDB is slow enough for 50 clients to queue past the 1 s default.
    server = Nginx(build_module(request.param), mongo_uri, stored["dir"], prefix, DB,
                   "gridfs_queue_timeout 60s;\n" + around, sanitize=request.param)
    server.around_port, server.h2_port = around_port, h2_port
    yield server
    server.stop()
    try:
        server.assert_no_sanitizer_report()
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def get(nginx, path, **headers):
    return requests.get(nginx.url(path), headers=headers, timeout=TIMEOUT)


# --- whole files ---

@pytest.mark.parametrize("name", SIZES)
def test_serves_the_stored_bytes(nginx, stored, name):
    r = get(nginx, f"/files/{name}")
    static = get(nginx, f"/static/{name}")
    assert r.status_code == 200
    assert r.content == stored["data"][name]
    assert r.headers["Content-Length"] == static.headers["Content-Length"] == str(SIZES[name])
    assert r.headers["Content-Type"] == "application/octet-stream"
    assert r.headers["Accept-Ranges"] == "bytes"
    assert re.fullmatch(r'"[^"]+"', r.headers["ETag"]), "a strong ETag"
    assert "Last-Modified" in r.headers


def test_serves_the_newest_revision(nginx):
    r = get(nginx, "/files/revised.bin")
    assert (r.status_code, r.content) == (200, b"new revision")


def test_content_type_falls_back_to_types_by_extension(nginx):
    r = get(nginx, "/files/page.html")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/html")


def test_etag_and_last_modified_are_stable(nginx):
    a, b = get(nginx, "/files/1KB.bin"), get(nginx, "/files/1KB.bin")
    assert a.headers["ETag"] == b.headers["ETag"]
    assert a.headers["Last-Modified"] == b.headers["Last-Modified"]
    assert a.headers["ETag"] != get(nginx, "/files/1B.bin").headers["ETag"]


def test_head_answers_headers_only(nginx):
    r = requests.head(nginx.url("/files/1MB.bin"), timeout=TIMEOUT)
    full = get(nginx, "/files/1MB.bin")
    assert r.status_code == 200
    assert r.content == b""
    for header in ("Content-Length", "Content-Type", "ETag", "Last-Modified", "Accept-Ranges"):
        assert r.headers[header] == full.headers[header]


def test_field_id_with_type_objectid(nginx, stored):
    r = get(nginx, f"/byid/{stored['ids']['1MB.bin']}")
    assert r.status_code == 200
    assert r.content == stored["data"]["1MB.bin"]


# --- ranges, compared with the static location ---

L = 1_000_000
RANGES = ["bytes=0-99", "bytes=500-", "bytes=-100", "bytes=0-0", f"bytes={L - 1}-{L - 1}",
          f"bytes={CHUNK - 10}-{CHUNK + 10}", f"bytes={CHUNK}-{2 * CHUNK - 1}", f"bytes={L - 10}-{2 * L}",
          f"bytes=-{2 * L}", f"bytes={3 * CHUNK - 1}-", f"bytes={L}-", f"bytes={L + 10}-{L + 20}",
          "bytes=-0", "bytes=abc", "bytes=5-3", "bytes=0-", "items=0-5"]


def assert_same_answer(r, static):
    assert r.status_code == static.status_code
    assert r.headers.get("Content-Range") == static.headers.get("Content-Range")
    if r.status_code != 416:  # error pages: the same page, checked by status
        assert r.headers.get("Content-Length") == static.headers.get("Content-Length")
        assert r.content == static.content


@pytest.mark.parametrize("spec", RANGES)
def test_range_matches_static(nginx, spec):
    r = get(nginx, "/files/1MB.bin", Range=spec)
    static = get(nginx, "/static/1MB.bin", Range=spec)
    assert_same_answer(r, static)


@pytest.mark.parametrize("spec,status", [("bytes=0-0", 206), (f"bytes={L}-", 416), ("bytes=-100", 206),
                                         (f"bytes={CHUNK - 10}-{CHUNK + 10}", 206)])
def test_range_status(nginx, stored, spec, status):
    r = get(nginx, "/files/1MB.bin", Range=spec)
    assert r.status_code == status
    if status == 206:
        first, last = map(int, re.fullmatch(r"bytes (\d+)-(\d+)/1000000", r.headers["Content-Range"]).groups())
        assert r.content == stored["data"]["1MB.bin"][first:last + 1]
    else:
        assert r.headers["Content-Range"] == "bytes */1000000"


@pytest.mark.parametrize("name", ["0B.bin", "1B.bin", "chunk+1.bin", "10MB.bin"])
@pytest.mark.parametrize("spec", ["bytes=0-0", "bytes=-1", f"bytes={CHUNK}-", "bytes=1-"])
def test_range_on_other_sizes_matches_static(nginx, name, spec):
    assert_same_answer(get(nginx, f"/files/{name}", Range=spec), get(nginx, f"/static/{name}", Range=spec))


def chunks_read(nginx, path, **headers) -> list[tuple[int, int]]:
    """The chunk windows the module fetched for one request (debug log)."""
    nginx.debug_log.write_text("")
    assert get(nginx, path, **headers).status_code in (200, 206)
    return [(int(a), int(b)) for a, b in re.findall(r"gridfs read chunks (\d+)-(\d+)", nginx.debug_log.read_text())]


def test_range_reads_only_the_chunks_that_cover_it(nginx):
    last_chunk = (10_000_000 - 1) // CHUNK
    assert chunks_read(nginx, "/traced/10MB.bin", Range="bytes=9000000-9000099") == [(34, 34)]
    assert chunks_read(nginx, "/traced/10MB.bin", Range=f"bytes={CHUNK - 1}-{CHUNK}") == [(0, 1)]
    assert chunks_read(nginx, "/traced/10MB.bin", Range="bytes=-10") == [(last_chunk, last_chunk)]
    # A whole file: a buffer of ceil(1 MiB / 255 KiB) = 5 chunks, in two
    # windows of 3 and 2 chunks (one sending, one being read), in order.
    windows = chunks_read(nginx, "/traced/10MB.bin")
    assert windows[0][0] == 0 and windows[-1][1] == last_chunk
    assert all(b - a + 1 <= 3 for a, b in windows)
    assert all((a[1] - a[0] + 1) + (b[1] - b[0] + 1) <= 5 for a, b in zip(windows, windows[1:]))
    assert all(nxt[0] == prev[1] + 1 for prev, nxt in zip(windows, windows[1:]))


def test_file_within_the_buffer_plus_one_chunk_is_one_query(nginx):
    # 1 MiB in 255 KiB chunks is 5 chunks: the window is rounded up to
    # whole chunks (at the 1m default), so one query reads it, as a driver does.
    assert chunks_read(nginx, "/traced/1MiB.bin") == [(0, 4)]
    assert "gridfs cursor opened" not in nginx.debug_log.read_text()


def test_several_windows_stream_from_one_cursor(nginx, stored):
    # One find, then a getMore per window through the same client: a
    # query per window would make FerretDB read the whole file each time.
    nginx.debug_log.write_text("")
    r = get(nginx, "/traced/10MB.bin")
    assert r.content == stored["data"]["10MB.bin"]
    log = nginx.debug_log.read_text()
    # 39 chunks in windows of half the 5-chunk buffer each: 3, 2, 3, 2...
    expected, n = [], 0
    while n < 39:
        size = 3 if len(expected) % 2 == 0 else 2
        expected.append((n, min(n + size, 39) - 1))
        n += size
    assert [(int(a), int(b)) for a, b in re.findall(r"gridfs read chunks (\d+)-(\d+)", log)] == expected
    assert len(expected) == 16
    assert re.findall(r"gridfs cursor opened at chunk (\d+)", log) == ["0"]
    # a range of several windows: one cursor from its first chunk
    nginx.debug_log.write_text("")
    r = get(nginx, "/traced/10MB.bin", Range=f"bytes={3 * CHUNK + 7}-{9 * CHUNK}")
    assert r.content == stored["data"]["10MB.bin"][3 * CHUNK + 7:9 * CHUNK + 1]
    log = nginx.debug_log.read_text()
    assert re.findall(r"gridfs read chunks (\d+)-(\d+)", log) == [("3", "5"), ("6", "7"), ("8", "9")]
    assert re.findall(r"gridfs cursor opened at chunk (\d+)", log) == ["3"]


def read_windows(log: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"gridfs read chunks (\d+)-(\d+)", log)]


@pytest.fixture
def rate_limited(stored, mongo_uri):
    """nginx sending each response at most at the given rate (limit_rate)."""
    servers = []

    def start(rate: str) -> Nginx:
        prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
        servers.append(Nginx(build_module(), mongo_uri, stored["dir"], prefix, DB, f"limit_rate {rate};"))
        return servers[-1]

    yield start
    for server in servers:
        server.stop()
        shutil.rmtree(server.prefix, ignore_errors=True)


def test_next_window_is_read_while_the_current_one_is_sent(rate_limited, stored):
    # Double buffering: the job reading window k + 1 is posted as soon as
    # window k is handed to the output filters, not once it has drained.
    # With one buffer, the second read would wait for the first window's
    # 765 KiB to go out at 200 KB/s: seconds, whatever the socket buffers.
    nginx = rate_limited("200k")
    nginx.debug_log.write_text("")
    s = socket.create_connection(("127.0.0.1", nginx.port), timeout=TIMEOUT)
    try:
        s.sendall(b"GET /traced/10MB.bin HTTP/1.1\r\nHost: x\r\n\r\n")
        deadline = time.monotonic() + 10
        while len(read_windows(nginx.debug_log.read_text())) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        # still inside the first window's send (it needs more than 3 s)
        time.sleep(0.5)
        log = nginx.debug_log.read_text()
        assert read_windows(log) == [(0, 2), (3, 4)], log[-3000:]
        assert "gridfs window sent" not in log, "the first window drained too early for this test"
        # bounded: the third window waits for the first one to drain
        assert log.index("gridfs read chunks 3-4") > log.index("gridfs cursor opened at chunk 0")
    finally:
        s.close()
    # the client left with a window read ahead: the request ends cleanly
    time.sleep(0.5)
    assert get(nginx, "/files/10MB.bin", Range="bytes=0-99").content == stored["data"]["10MB.bin"][:100]
    assert "[alert]" not in nginx.log() and "exited on signal" not in nginx.log()


def test_rate_limited_response_streams_to_the_end(rate_limited, stored):
    # limit_rate delays the write event with a timer of its own: a window
    # that drained must leave that timer alone, or the next one never goes.
    nginx = rate_limited("4m")
    started = time.monotonic()
    r = get(nginx, "/files/10MB.bin")
    elapsed = time.monotonic() - started
    assert r.content == stored["data"]["10MB.bin"]
    assert elapsed > 1.0, "limit_rate was not applied"


def test_multiple_ranges_answer_the_whole_file(nginx, stored):
    # Documented choice: one window of chunks at a time cannot feed nginx's
    # multipart/byteranges, which wants the whole body in one buffer.
    spec = "bytes=0-9,20-29"
    r = get(nginx, "/files/1MB.bin", Range=spec)
    assert r.status_code == 200
    assert r.content == stored["data"]["1MB.bin"]
    static = get(nginx, "/static/1MB.bin", Range=spec)
    assert static.status_code == 206
    assert static.headers["Content-Type"].startswith("multipart/byteranges")


@pytest.mark.parametrize("location", ["/files/", "/static/"])
def test_if_range(nginx, stored, location):
    path = location + "1MB.bin"
    validators = get(nginx, path).headers
    matching = get(nginx, path, Range="bytes=10-19", **{"If-Range": validators["ETag"]})
    assert (matching.status_code, matching.content) == (206, stored["data"]["1MB.bin"][10:20])
    by_date = get(nginx, path, Range="bytes=10-19", **{"If-Range": validators["Last-Modified"]})
    assert by_date.status_code == 206
    stale = get(nginx, path, Range="bytes=10-19", **{"If-Range": '"not-the-etag"'})
    assert (stale.status_code, stale.content) == (200, stored["data"]["1MB.bin"])


# --- conditional requests ---

@pytest.mark.parametrize("location", ["/files/", "/static/"])
def test_not_modified(nginx, location):
    path = location + "chunk+1.bin"
    validators = get(nginx, path).headers
    by_etag = get(nginx, path, **{"If-None-Match": validators["ETag"]})
    assert (by_etag.status_code, by_etag.content) == (304, b"")
    by_date = get(nginx, path, **{"If-Modified-Since": validators["Last-Modified"]})
    assert (by_date.status_code, by_date.content) == (304, b"")
    other = get(nginx, path, **{"If-None-Match": '"something-else"'})
    assert other.status_code == 200


# --- the configurations around a location (issue 38) ---

class Around:
    """The server of AROUND's locations, in the same worker."""

    def __init__(self, nginx):
        self.nginx = nginx

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.nginx.around_port}{path}"


@pytest.fixture
def around(nginx) -> Around:
    return Around(nginx)


def worker(nginx) -> int:
    (pid,) = nginx.worker_pids()
    return pid


def test_an_if_block_in_a_gridfs_location_serves_the_file(nginx, around, stored):
    # Before, the if block's configuration had no connection: every request
    # with an Origin killed the worker (signal 11).
    pid = worker(nginx)
    r = get(around, "/cors/1MB.bin", Origin="https://example.org")
    assert (r.status_code, r.headers.get("X-Origin")) == (200, "https://example.org")
    assert r.content == stored["data"]["1MB.bin"]
    ranged = get(around, "/cors/1MB.bin", Origin="https://example.org", Range="bytes=10-19")
    assert (ranged.status_code, ranged.content) == (206, stored["data"]["1MB.bin"][10:20])
    plain = get(around, "/cors/1KB.bin")
    assert plain.status_code == 200 and "X-Origin" not in plain.headers
    assert worker(nginx) == pid and "exited on signal" not in nginx.log()


def test_limit_except_and_rewrite_break(around, stored):
    assert get(around, "/getonly/1KB.bin").content == stored["data"]["1KB.bin"]
    assert requests.post(around.url("/getonly/1KB.bin"), timeout=TIMEOUT).status_code == 403
    # the key is the rewritten URI after the location's prefix
    r = get(around, "/renamed/1KB")
    assert (r.status_code, r.content) == (200, stored["data"]["1KB.bin"])


# a range the module predicts (and reads ahead), which a filter that takes
# the whole body turns into a 200: from the first byte, of several windows
# (a cursor opened for fewer chunks), and from elsewhere
WIDENED = ["bytes=0-99", "bytes=0-2999999", "bytes=5000000-"]


@pytest.mark.parametrize("spec", WIDENED)
@pytest.mark.parametrize("name", ["1MB.bin", "10MB.bin"])
def test_gzip_gets_the_whole_body_whatever_the_range(around, stored, name, spec):
    # Before, the 100-byte plan read ahead for bytes=0-99 ended the 200
    # early, every time.
    r = requests.get(around.url(f"/gzipped/{name}"), headers={"Range": spec, "Accept-Encoding": "gzip"},
                     timeout=TIMEOUT, stream=True)
    raw = r.raw.read()
    assert (r.status_code, r.headers.get("Content-Encoding")) == (200, "gzip")
    assert gzip.decompress(raw) == stored["data"][name]


@pytest.mark.parametrize("spec", ["bytes=0-99", "bytes=300000-", None])
def test_sub_filter_and_addition_get_the_whole_body(around, stored, spec):
    headers = {"Range": spec} if spec else {}
    subbed, static = get(around, "/subbed/hello.txt", **headers), get(around, "/static-subbed/hello.txt", **headers)
    assert subbed.status_code == static.status_code == 200
    assert subbed.content == static.content == stored["data"]["hello.txt"].replace(b"hello", b"HELLO")
    added = get(around, "/added/1MB.bin", **headers)
    assert added.status_code == 200
    assert added.content == stored["data"]["1MB.bin"] + stored["data"]["1B.bin"]


def curl_h2(nginx, path: str, *args: str) -> tuple[str, bytes]:
    out = subprocess.run(["curl", "-s", "--http2-prior-knowledge", "-w", "\n%{http_version} %{http_code}",
                          "-o", "-", *args, f"http://127.0.0.1:{nginx.h2_port}{path}"],
                         capture_output=True, timeout=TIMEOUT, check=True).stdout
    body, _, status = out.rpartition(b"\n")
    return status.decode(), body


def test_http2(nginx, stored):
    for name in ("1KB.bin", "10MB.bin"):
        assert curl_h2(nginx, f"/files/{name}") == ("2 200", stored["data"][name])
    assert curl_h2(nginx, "/files/10MB.bin", "-r", "9000000-9000099") == (
        "2 206", stored["data"]["10MB.bin"][9000000:9000100])
    assert curl_h2(nginx, "/cors/1MB.bin", "-H", "Origin: x") == ("2 200", stored["data"]["1MB.bin"])


def active_connections(around) -> int:
    status = requests.get(around.url("/status"), headers={"Connection": "close"}, timeout=TIMEOUT).text
    return int(re.search(r"Active connections: (\d+)", status).group(1))


def test_the_deadlines_503_through_error_pages(nginx, around, stored, ferretdb):
    """gridfs_deadline's 503 sent through error_page, to a static page and
    to a file of a gridfs location, while the lookups are stuck (FerretDB
    paused): each answer is what the error page makes of it (the page, with
    the 503), the jobs that end later act on nothing, and every request and
    connection ends. Before, the first leaked each request and its
    connection (its job's end found no state through r->ctx, which the
    redirect cleared), the second made the old job's end act on the new
    request (a NULL files document: the worker aborted)."""
    pid = worker(nginx)
    paths = ["/late/1KB.bin", "/late/10MB.bin", "/late-gridfs/1MB.bin", "/late-gridfs/no-such-file"]
    # paused briefly: longer, and the driver's monitor may find the server
    # gone (then the gridfs error page is a 503 of its own)
    with ThreadPoolExecutor(len(paths)) as pool:
        ferretdb.pause()
        try:
            answers = [pool.submit(requests.get, around.url(path), headers={"Connection": "close"},
                                   timeout=TIMEOUT) for path in paths]
            pages = [answer.result() for answer in answers[:2]]  # the static page went out at the deadline
            time.sleep(0.1)  # the other two redirected meanwhile, their lookups posted
        finally:
            ferretdb.resume()
        files = [answer.result() for answer in answers[2:]]  # the gridfs error page, once FerretDB answers
    for r in pages:
        assert (r.status_code, r.content) == (503, PAGE_50X)
    for r in files:
        assert (r.status_code, r.content) == (503, stored["data"]["1KB.bin"])
        assert "ETag" in r.headers  # the file's
    deadline = time.monotonic() + 10
    while (connections := active_connections(around)) > 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert connections == 1, f"{connections - 1} connections left open"
    assert get(nginx, "/files/1KB.bin").content == stored["data"]["1KB.bin"]
    assert worker(nginx) == pid and "exited on signal" not in nginx.log()


# --- errors ---

def test_missing_file_is_404(nginx):
    assert get(nginx, "/files/no-such-file.bin").status_code == 404
    assert get(nginx, "/byid/0123456789abcdef01234567").status_code == 404


@pytest.mark.parametrize("path", ["/byid/not-an-objectid", "/byid/0123456789abcdef0123456z",
                                  "/files/bad%zzescape", "/files/bad%", "/files/bad%ffutf8"])
def test_bad_key_is_400(nginx, path):
    # http.client sends the path as it is: requests would re-quote "%zz".
    conn = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=TIMEOUT)
    try:
        conn.request("GET", path)
        assert conn.getresponse().status == 400
    finally:
        conn.close()


def test_keys_are_logged_escaped(nginx):
    # a decoded %0A would otherwise start a log line of the client's
    assert get(nginx, "/files/evil%0A2026%2F01%2F01%20%5Bcrit%5D%20forged.bin").status_code == 404
    log = nginx.log()
    assert '"evil\\x0a2026/01/01 [crit] forged.bin" not found' in log
    assert not any(line.startswith("2026/01/01 [crit]") for line in log.splitlines())


def test_percent_encoded_key_is_decoded(nginx, stored):
    r = get(nginx, "/files/1%4BB.bin")  # %4B is K
    assert r.content == stored["data"]["1KB.bin"]


def test_other_methods_are_refused(nginx):
    r = requests.post(nginx.url("/files/1KB.bin"), data=b"x", timeout=TIMEOUT)
    assert r.status_code == 405
    assert r.headers["Allow"] == "GET, HEAD"


def test_missing_chunk_in_the_first_window_is_500(nginx):
    # The first window is read before the headers are sent.
    r = get(nginx, "/files/broken.bin")
    assert r.status_code == 500
    assert "chunk 1 is missing" in nginx.log()
    # Ranges that avoid the lost chunk still work.
    assert get(nginx, "/files/broken.bin", Range="bytes=0-9").status_code == 206


def test_missing_chunk_later_cuts_the_response_and_is_logged(nginx):
    # The headers are out when a later window fails: the connection is
    # closed early, never padded.
    try:
        r = get(nginx, "/files/broken-late.bin")
        assert r.status_code == 200
        assert len(r.content) < int(r.headers["Content-Length"])
    except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ConnectionError):
        pass
    assert "chunk 5 is missing" in nginx.log()


# --- load and failures ---

def test_many_concurrent_clients_get_correct_bytes(nginx, stored):
    names = ["1KB.bin", "chunk+1.bin", "1MB.bin"]

    def fetch(i):
        name = "10MB.bin" if i < 2 else names[i % len(names)]
        if i % 3 == 0:
            r = get(nginx, f"/files/{name}", Range="bytes=1000-")
            return r.status_code, r.content == stored["data"][name][1000:]
        r = get(nginx, f"/files/{name}")
        return r.status_code, r.content == stored["data"][name]

    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(fetch, range(100), timeout=120))
    assert {status for status, _ in results} <= {200, 206}, sorted(results)
    assert all(ok for _, ok in results)


def test_mongodb_down_is_503_then_recovers(nginx, ferretdb):
    assert get(nginx, "/files/1KB.bin").status_code == 200
    ferretdb.stop()
    try:
        started = time.monotonic()
        r = get(nginx, "/files/1KB.bin")
        elapsed = time.monotonic() - started
        assert r.status_code == 503
        assert elapsed < 15, f"503 took {elapsed:.1f} s"
        assert get(nginx, "/health").status_code == 200
    finally:
        ferretdb.start()
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        status = get(nginx, "/files/1KB.bin").status_code
        if status == 200:
            break
        time.sleep(0.5)
    assert status == 200, "the module did not recover after MongoDB came back"
    assert re.search(r"\[error\].*gridfs: MongoDB unavailable, looking up \"1KB\.bin\" .*: \S", nginx.log()), \
        "the cause is logged"


def test_event_loop_stays_free_while_mongodb_hangs(nginx, stored, ferretdb):
    assert len(nginx.worker_pids()) == 1
    results = []

    def fetch():
        try:
            results.append(get(nginx, "/files/1MB.bin").status_code)
        except requests.RequestException as exc:
            results.append(exc)

    ferretdb.pause()
    try:
        waiting = [threading.Thread(target=fetch) for _ in range(4)]
        for t in waiting:
            t.start()
        time.sleep(0.5)
        assert all(t.is_alive() for t in waiting), "GridFS requests should be waiting on MongoDB"
        started = time.monotonic()
        static = requests.get(nginx.url("/static/1MB.bin"), timeout=5)
        elapsed = time.monotonic() - started
        assert static.content == stored["data"]["1MB.bin"]
        assert elapsed < 1.0, f"static answer took {elapsed:.2f} s while MongoDB hung"
    finally:
        ferretdb.resume()
    for t in waiting:
        t.join(60)
    assert not any(t.is_alive() for t in waiting)
    assert all(status in (200, 503) for status in results), results


def test_worker_never_crashed(nginx):
    log = nginx.log()
    assert "exited on signal" not in log
    assert "[alert]" not in log and "[emerg]" not in log
    nginx.assert_no_sanitizer_report()
