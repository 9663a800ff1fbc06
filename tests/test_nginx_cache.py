"""nginx-cache (services/nginx-cache/: proxy_cache in front of a GridFS
path) run natively with its nginx.conf and start.sh, in front of the
nginx-gridfs module running natively against FerretDB, judged against
nginx-static serving the same bytes from disk: every functional conformance
case on a miss and on a hit, the X-Cache-Status header, the /cache-log
counts bench relies on, one upstream fetch for concurrent misses, and the
upstream stopped."""
import http.client
import os
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gridfs
import pymongo
import pytest
import requests

from seed import loader
from bench.measure import cache_log
from bench.checks.conformance import Server, check, functional_cases
from support.processes import free_port, stop_process, wait_for_port
from support.service_processes import NGINX, NginxStatic, flask_service, native_nginx_config, nginx_gridfs_service

REPO = Path(__file__).resolve().parent.parent
SERVICE = REPO / "services" / "nginx-cache"
DB = "nginx_cache_test"
SIZES = [0, 1024, 300 * 1024, 1024 * 1024]  # empty; one chunk; across a chunk; 1 MB


class NginxCache:
    """nginx with services/nginx-cache/nginx.conf, its environment-dependent
    directives written by its start.sh, rewritten to run in a temporary
    prefix on 127.0.0.1 in front of `upstream` (host:port)."""

    def __init__(self, upstream: str, cache_size: str = "16m"):
        self.prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-cache-"))
        self.prefix.chmod(0o755)  # workers run as nobody
        self.env = {**os.environ, "CACHE_UPSTREAM": upstream, "CACHE_SIZE": cache_size,
                    "NGINX_CACHE_CONF": str(self.prefix / "cache-env.conf"),
                    "NGINX_CACHE_DIR": str(self.prefix / "cache"), "NGINX_CACHE_WRITE_ONLY": "1"}
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def status_log(self) -> Path:
        return self.prefix / "cache-status.log"

    def config(self) -> str:
        return native_nginx_config(SERVICE / "nginx.conf", self.prefix, {
            "listen 8080 reuseport;": f"listen 127.0.0.1:{self.port};",
        })

    def start(self) -> "NginxCache":
        subprocess.run([str(SERVICE / "start.sh")], env=self.env, check=True, timeout=30)
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.config())
        self.proc = subprocess.Popen([NGINX, "-p", str(self.prefix), "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, "nginx-cache", self.proc)
        return self

    def log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def cache_log(self, offset: int = 0) -> requests.Response:
        return requests.get(f"{self.url}/cache-log", headers={"Range": f"bytes={offset}-"}, timeout=10)

    def words_since(self, offset: int) -> list[str]:
        """bench's own reading of /cache-log: the words a case added."""
        words, end = cache_log.new_words(self.url, offset)
        assert end == self.log_length()
        return words

    def log_length(self) -> int:
        return len(requests.get(f"{self.url}/cache-log", timeout=10).content)

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.prefix, ignore_errors=True)


class EveryRequestMisses(Server):
    """The cache as the conformance suite's target, its stored files
    deleted before each request (nginx takes a file gone for a miss), so
    every answer comes from a cache miss. (A query string no longer makes
    one: the key is the normalised URI.) Each request is over once its
    cache-status word is logged: a HEAD's answer leaves before nginx has
    fetched (and stored) the whole file."""

    def __init__(self, cache: "NginxCache"):
        super().__init__(cache.url)
        self.cache = cache
        self.statuses: list[str | None] = []

    def request(self, method, path, headers=None):
        for stored in (self.cache.prefix / "cache").rglob("*"):
            if stored.is_file():
                stored.unlink()
        logged = self.cache.status_log.stat().st_size if self.cache.status_log.exists() else 0
        answer = super().request(method, path, headers)
        deadline = time.monotonic() + 10
        while not self.cache.status_log.exists() or self.cache.status_log.stat().st_size == logged:
            assert time.monotonic() < deadline, f"{method} {path}: no cache-status word logged"
            time.sleep(0.01)
        self.statuses.append(answer.header("x-cache-status"))
        return answer


@pytest.fixture(scope="module")
def files(mongo_uri):
    """The lab's files in GridFS (for the upstream) and on disk (for
    nginx-static), with manifest entries."""
    base = Path(tempfile.mkdtemp(prefix="lab-nginx-cache-files-"))
    base.chmod(0o755)  # nginx workers run as nobody
    directory = base / "files"
    directory.mkdir()
    client = pymongo.MongoClient(mongo_uri)
    client.drop_database(DB)
    bucket = gridfs.GridFSBucket(client[DB])
    manifest, contents = [], {}
    for size in SIZES:
        data, name = loader.file_bytes(size), f"{size}B.bin"
        (directory / name).write_bytes(data)
        (directory / name).chmod(0o644)
        bucket.upload_from_stream(name, data, metadata={"contentType": "application/octet-stream"})
        manifest.append({"name": name, "size": size})
        contents[name] = data
    client.close()
    yield directory, manifest, contents
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def reference(files):
    server = NginxStatic(files[0]).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def upstream(mongo_uri, files):
    service = nginx_gridfs_service(mongo_uri, DB).start()
    yield service
    service.stop()


@pytest.fixture
def cache(upstream):
    """A cache of its own per test: empty, its log empty."""
    server = NginxCache(f"127.0.0.1:{upstream.port}").start()
    yield server
    server.stop()


def get(server, name: str, **headers) -> requests.Response:
    return requests.get(f"{server.url}/files/{name}", headers=headers, timeout=30)


def failures(results, server) -> str:
    return "\n".join(f"{r.case}: expected {r.expected}, got {r.got}"
                     for r in results if not r.passed) + "\n--- nginx-cache log ---\n" + server.log()


def test_a_miss_then_hits_with_the_stored_bytes(cache, files):
    contents = files[2]
    for expected in ("MISS", "HIT", "HIT"):
        response = get(cache, "307200B.bin")
        assert response.status_code == 200
        assert response.headers["X-Cache-Status"] == expected
        assert response.content == contents["307200B.bin"]
    assert cache.words_since(0) == ["MISS", "HIT", "HIT"]


def test_every_case_on_a_miss_answers_as_nginx_static(cache, reference, files):
    target = EveryRequestMisses(cache)
    results = functional_cases(Server(reference.url), target, files[1])
    assert all(r.passed for r in results), failures(results, cache)
    assert set(target.statuses) == {"MISS"}, set(target.statuses)


def test_every_case_on_a_hit_answers_as_nginx_static(cache, reference, files):
    for entry in files[1]:
        assert get(cache, entry["name"]).headers["X-Cache-Status"] == "MISS"
    offset = cache.log_length()
    results = functional_cases(Server(reference.url), Server(cache.url), files[1])
    assert all(r.passed for r in results), failures(results, cache)
    words = cache.words_since(offset)
    # every answer from the cache; the one missing file asked upstream
    assert words.count("MISS") == 1 and set(words) == {"HIT", "MISS"}, words
    # one request per case but the "headers" ones (they reuse the full GET)
    assert len(words) == len(results) - len(files[1])


def test_whole_conformance_suite_passes(cache, reference, files):
    results = check(reference.url, cache.url, files[1])
    assert all(r.passed for r in results), failures(results, cache)


def test_cache_status_header_on_partial_and_not_modified_answers(cache, files):
    etag = get(cache, "1024B.bin").headers["ETag"]
    partial = get(cache, "1024B.bin", Range="bytes=0-9")
    assert partial.status_code == 206 and partial.headers["X-Cache-Status"] == "HIT"
    assert partial.content == files[2]["1024B.bin"][:10]
    not_modified = get(cache, "1024B.bin", **{"If-None-Match": etag})
    assert not_modified.status_code == 304 and not_modified.headers["X-Cache-Status"] == "HIT"


def test_head_on_a_miss_fills_the_cache_for_get(cache, files):
    head = requests.head(f"{cache.url}/files/1048576B.bin", timeout=30)
    assert head.status_code == 200 and head.headers["Content-Length"] == str(1024 * 1024)
    response = get(cache, "1048576B.bin")
    assert response.headers["X-Cache-Status"] == "HIT"
    assert response.content == files[2]["1048576B.bin"]


def test_cache_log_counts_what_each_case_added(cache):
    assert cache.words_since(0) == []  # empty log: 200, empty
    get(cache, "1024B.bin")
    offset = cache.log_length()
    assert cache.words_since(offset) == []  # nothing since: 416, no words
    for _ in range(5):
        get(cache, "1024B.bin")
    get(cache, "no-such-file.bin")
    assert cache.words_since(offset) == ["HIT"] * 5 + ["MISS"]
    assert cache.words_since(0) == ["MISS"] + ["HIT"] * 5 + ["MISS"]
    # only /files/ requests are counted
    requests.get(f"{cache.url}/health", timeout=5)
    assert len(cache.words_since(0)) == 7
    assert cache_log.counts(cache.words_since(offset))["hit_ratio"] == pytest.approx(5 / 6, abs=1e-4)


def test_concurrent_misses_fetch_the_file_once(cache, files):
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda _: get(cache, "1048576B.bin"), range(8)))
    assert all(a.status_code == 200 and a.content == files[2]["1048576B.bin"] for a in answers)
    words = cache.words_since(0)
    assert words.count("MISS") == 1 and len(words) == 8, words


def test_other_methods_are_refused_with_allow(cache):
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        response = requests.request(method, f"{cache.url}/files/1024B.bin", timeout=10)
        assert response.status_code == 405, method
        assert response.headers["Allow"] == "GET, HEAD", method  # RFC 9110 15.5.6
    assert cache.words_since(0) == ["-"] * 4  # one word per /files/ request, as bench counts


def raw_get(port: int, target: str) -> http.client.HTTPResponse:
    """A GET with its target exactly as given (no client-side normalisation)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    connection.putrequest("GET", target, skip_accept_encoding=True)
    connection.endheaders()
    response = connection.getresponse()
    response.body = response.read()
    connection.close()
    return response


@pytest.mark.parametrize("target", ["/files/1024B.bin?x=1", "/files/1024B.bin?x=2&y",
                                    "/files/%31024B.bin", "/files/1024B%2Ebin", "/files/./1024B.bin",
                                    "/files//1024B.bin", "/files/x/../1024B.bin"])
def test_a_query_or_another_spelling_of_the_uri_is_the_same_entry(cache, reference, files, target):
    first = raw_get(cache.port, "/files/1024B.bin")
    assert first.status == 200 and first.getheader("X-Cache-Status") == "MISS"
    again = raw_get(cache.port, target)
    static = raw_get(reference.port, target)
    assert (again.status, again.body) == (static.status, static.body) == (200, files[2]["1024B.bin"])
    assert again.getheader("X-Cache-Status") == "HIT"


def test_the_upstream_is_asked_for_the_normalised_uri(mongo_uri, files):
    """On a miss, the GridFS path gets the URI nginx resolved: the Flask
    path refuses a dot segment (400), which it would get, sent the raw target."""
    upstream = flask_service(mongo_uri, DB).start()
    cache = NginxCache(f"127.0.0.1:{upstream.port}").start()
    try:
        for target in ("/files/x/../1024B.bin?a=1", "/files/%2E/307200B.bin"):
            answer = raw_get(cache.port, target)
            assert (answer.status, answer.getheader("X-Cache-Status")) == (200, "MISS"), target
            assert answer.body == files[2][target.rsplit("/", 1)[1].split("?")[0]]
    finally:
        cache.stop()
        upstream.stop()


@pytest.fixture
def hung_upstream():
    """A port that takes connections (the kernel's backlog) and never
    answers: an upstream frozen mid-request."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield listener.getsockname()[1]
    listener.close()


def test_a_hung_upstream_is_a_504_in_seconds_for_every_waiter(hung_upstream):
    cache = NginxCache(f"127.0.0.1:{hung_upstream}").start()
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=3) as pool:
            # The first fetches; the others wait on its cache lock, then ask themselves.
            answers = list(pool.map(lambda _: (get(cache, "1024B.bin").status_code, time.monotonic() - started),
                                    range(3)))
        assert [status for status, _ in answers] == [504] * 3
        # proxy_read_timeout 5 s, plus the lock's 2 s for the waiters: not nginx's 60 s.
        assert max(elapsed for _, elapsed in answers) < 10, answers
    finally:
        cache.stop()


def test_fronts_the_flask_path_too(mongo_uri, reference, files):
    upstream = flask_service(mongo_uri, DB).start()
    cache = NginxCache(f"127.0.0.1:{upstream.port}").start()
    try:
        missing = EveryRequestMisses(cache)
        results = functional_cases(Server(reference.url), missing, files[1])
        results += functional_cases(Server(reference.url), Server(cache.url), files[1])
        assert all(r.passed for r in results), failures(results, cache) + upstream.log()
        assert set(missing.statuses) == {"MISS"}
        assert get(cache, "1024B.bin").headers["X-Cache-Status"] == "HIT"
    finally:
        cache.stop()
        upstream.stop()


def test_cached_files_are_served_with_the_upstream_stopped(mongo_uri, files):
    upstream = nginx_gridfs_service(mongo_uri, DB).start()
    cache = NginxCache(f"127.0.0.1:{upstream.port}").start()
    try:
        assert get(cache, "1024B.bin").headers["X-Cache-Status"] == "MISS"
        upstream.stop()
        cached = get(cache, "1024B.bin", Range="bytes=1-2")
        assert cached.status_code == 206 and cached.headers["X-Cache-Status"] == "HIT"
        assert cached.content == files[2]["1024B.bin"][1:3]
        started = time.monotonic()
        uncached = get(cache, "307200B.bin")
        assert uncached.status_code in (502, 504)
        assert time.monotonic() - started < 10
    finally:
        cache.stop()
        upstream.stop()


@pytest.mark.parametrize("variable,value,message", [
    ("CACHE_UPSTREAM", "nginx-gridfs", "is not host:port"),
    ("CACHE_UPSTREAM", "a b:8080", "is not a host name"),
    ("CACHE_UPSTREAM", "host;evil:8080", "is not a host name"),
    ("CACHE_UPSTREAM", "host:80x", "is not a port number"),
    ("CACHE_UPSTREAM", "host:70000", "out of range"),
    ("CACHE_SIZE", "lots", "is not a size"),
    ("CACHE_SIZE", "1m", "below the 2m minimum"),
])
def test_bad_settings_are_refused_by_name(variable, value, message):
    cache = NginxCache("127.0.0.1:1")
    try:
        result = subprocess.run([str(SERVICE / "start.sh")], env={**cache.env, variable: value},
                                capture_output=True, text=True, timeout=30)
        assert result.returncode == 2
        assert result.stderr.startswith(f"nginx-cache: {variable}={value}") and message in result.stderr
        assert not (cache.prefix / "cache-env.conf").exists()
    finally:
        cache.stop()


def test_cache_size_sets_max_size():
    cache = NginxCache("127.0.0.1:1", cache_size="100m")
    try:
        subprocess.run([str(SERVICE / "start.sh")], env=cache.env, check=True, timeout=30)
        assert f"max_size={100 * 1024 * 9 // 10}k" in (cache.prefix / "cache-env.conf").read_text()
    finally:
        cache.stop()
