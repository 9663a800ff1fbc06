"""The conformance suite (loadgen/bench/checks/conformance.py) against real servers:
nginx-static judged against itself passes every case; a server that ignores
Range and Host is caught; every native serving path passes against nginx-static,
every GridFS path also the seed's documents that break GridFS's rules."""
import hashlib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gridfs
import pymongo
import pytest

from seed import bad_documents, loader
from bench.checks import conformance
from bench.checks.conformance import check, hostile_requests
from labfiles.bad_documents import DOCUMENTS as BAD_DOCUMENTS, FILES_DOCUMENT, LATER_CHUNK, PREFIX
from support.processes import free_port, stop_process, wait_for_port
from support.service_processes import NginxStatic, flask_service, nginx_gridfs_service, node_service
from test_gridfs_fuse import GridFSMount, NginxOnFuse, fuse_binary  # noqa: F401 (a fixture)

DB = "conformance"
SIZES = [1024, 300 * 1024]  # within one chunk; across a chunk boundary


@pytest.fixture(scope="module")
def files(mongo_uri):
    # world-readable: nginx workers run as nobody; pytest's tmp tree is private
    base = Path(tempfile.mkdtemp(prefix="lab-conformance-"))
    base.chmod(0o755)
    directory = base / "files"
    directory.mkdir()
    bucket = gridfs.GridFSBucket(pymongo.MongoClient(mongo_uri)[DB])
    manifest = []
    for size in SIZES:
        data, name = loader.file_bytes(size), f"{size}B.bin"
        (directory / name).write_bytes(data)
        bucket.upload_from_stream(name, data, metadata={"contentType": "application/octet-stream"})
        manifest.append({"name": name, "size": size, "sha256": hashlib.sha256(data).hexdigest()})
    bad_documents.store(pymongo.MongoClient(mongo_uri)[DB])
    yield directory, manifest
    shutil.rmtree(base)


@pytest.fixture(scope="module")
def reference(files):
    server = NginxStatic(files[0]).start()
    yield server
    server.stop()


def failures(results):
    return "\n".join(f"{r.case}: expected {r.expected}, got {r.got}" for r in results if not r.passed)


def test_reference_passes_against_itself_with_at_least_200_hostile_requests(files, reference):
    results = check(reference.url, reference.url, files[1])
    assert len(hostile_requests(files[1])) >= 200
    assert all(r.passed for r in results), failures(results)


def test_a_server_that_ignores_range_and_host_is_caught(files, reference):
    port = free_port()
    plain = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                             cwd=files[0].parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "http.server", plain)
        failed = {r.case for r in check(reference.url, f"http://127.0.0.1:{port}", files[1]) if not r.passed}
    finally:
        stop_process(plain)
    assert "Range first byte (bytes=0-0) 1024B.bin" in failed
    assert "Range suffix 100 (bytes=-100) 307200B.bin" in failed
    assert "If-None-Match own ETag 1024B.bin" in failed
    assert "GET 1024B.bin" not in failed  # full bodies are right: only the HTTP semantics differ
    assert "bad input: two Host headers" in failed  # http.server takes either
    assert "bad input: absolute-form target" in failed  # it looks for a directory "http:"
    assert "bad input: HTTP/0.9 request line" not in failed  # it answers HTTP/0.9 as nginx does


def test_a_server_that_reads_no_body_answers_one_nobody_sent_and_is_caught(files, reference):
    """Python's http.server keeping connections alive (HTTP/1.1) never reads
    a GET's body: the body is taken for the next request (the framing cases,
    loadgen/bench/checks/framing.py)."""
    port = free_port()
    plain = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                              "--protocol", "HTTP/1.1"],
                             cwd=files[0].parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "http.server", plain)
        results = {r.case: r for r in check(reference.url, f"http://127.0.0.1:{port}", files[1])
                   if r.case.startswith("framing: ")}
    finally:
        stop_process(plain)
    body_as_request = results["framing: a body by Content-Length, then a second request"]
    assert not body_as_request.passed and body_as_request.got == "200 501 then closed"
    assert not results["framing: two different Content-Length"].passed
    assert not results["framing: a bad chunk size"].passed
    # read by Transfer-Encoding alone, then closed: an outcome RFC 9112 6.1 allows
    assert results["framing: Content-Length and Transfer-Encoding"].passed


def test_the_seed_writes_the_bad_documents_the_suite_asks_for():
    # one list (labfiles/bad_documents.py), not two kept alike
    assert bad_documents.DOCUMENTS is conformance.BAD_DOCUMENTS is BAD_DOCUMENTS
    # A lie in the files document is one that leaves the chunks GOOD's.
    for name, bad in BAD_DOCUMENTS.items():
        assert (bad.lie_in == FILES_DOCUMENT) == (bool(bad.file_changes) and not bad.chunk_changes), name
        assert bad.lie_in in (FILES_DOCUMENT, LATER_CHUNK) and name.startswith(PREFIX), name


class FuseService:
    """gridfs-fuse as the lab runs it: the daemon's mount behind its nginx."""

    def __init__(self, binary, mongo_uri: str, db: str):
        self.mount = GridFSMount(binary, mongo_uri, db)
        self.nginx = NginxOnFuse(self.mount)

    def start(self) -> "FuseService":
        self.mount.start()
        self.nginx.start()
        self.url = self.nginx.url
        return self

    def log(self) -> str:
        return self.nginx.log()

    def stop(self) -> None:
        self.nginx.stop()
        self.mount.stop()


@pytest.mark.parametrize("path", ["flask", "node", "nginx-gridfs", "gridfs-fuse"])
def test_serving_path_conforms(path, request, mongo_uri, files, reference):
    """With the bad documents (issue 39): before, flask answered the lying
    length 200 with Content-Length 9223372036854775807, flask and node the
    other lying documents 503, and gridfs-fuse's daemon panicked."""
    if path == "gridfs-fuse":
        service = FuseService(request.getfixturevalue("fuse_binary"), mongo_uri, DB)
    else:
        start = {"flask": flask_service, "node": node_service, "nginx-gridfs": nginx_gridfs_service}[path]
        service = start(mongo_uri, DB)
    service.start()
    try:
        results = check(reference.url, service.url, files[1], bad_documents=True)
        log = service.log()
    finally:
        service.stop()
    assert all(r.passed for r in results), failures(results) + "\n--- log ---\n" + log
