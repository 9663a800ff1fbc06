"""Chunk reads are batched by bytes, not by chunk counts (issue 24): a whole
file of up to 1.25 MiB is one chunk query on every path, and no read
brings in more than that. The GridFS paths' round trips are counted by the
real server (FerretDB's own request counters); flask-postgres's queries
come from lab_http.chunks.read_plan, checked here with Node's counterpart."""
import re
import subprocess

import gridfs
import pytest
import requests
from pymongo import MongoClient

from support.service_processes import SERVICES, flask_service, node_service

DB_NAME = "lab_chunk_reads_test"
CHUNK = 255 * 1024
BUFFER = 1280 * 1024  # 1.25 MiB
SIZES = {"1MB.bin": 1_000_000, "1MiB.bin": 1024 * 1024, "buffer.bin": BUFFER, "buffer-plus-1.bin": BUFFER + 1,
         "5MiB.bin": 5 * 1024 * 1024}
REQUEST_COUNTER = re.compile(r'^ferretdb_client_requests_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)


@pytest.fixture(scope="module")
def files(mongo_uri):
    client = MongoClient(mongo_uri)
    client.drop_database(DB_NAME)
    bucket = gridfs.GridFSBucket(client[DB_NAME])
    contents = {name: bytes([n % 251]) * size for n, (name, size) in enumerate(SIZES.items())}
    for name, data in contents.items():
        bucket.upload_from_stream(name, data)
    client.close()
    return contents


@pytest.fixture(scope="module", params=["flask", "node"])
def gridfs_path(request, mongo_uri, files):
    service = {"flask": flask_service, "node": node_service}[request.param](mongo_uri, DB_NAME).start()
    yield service
    service.stop()


def commands(ferretdb) -> dict[str, float]:
    """FerretDB's count of the commands it received so far, by name."""
    text = requests.get(f"http://127.0.0.1:{ferretdb.debug_port}/debug/metrics", timeout=5).text
    counts: dict[str, float] = {}
    for match in REQUEST_COUNTER.finditer(text):
        command = re.search(r'command="([^"]*)"', match["labels"])
        if command:
            counts[command[1]] = counts.get(command[1], 0) + float(match["value"])
    return counts


def round_trips(ferretdb, service, name: str, **headers) -> tuple[int, int]:
    """(find, getMore) commands the server received for one GET of name."""
    before = commands(ferretdb)
    response = requests.get(f"{service.url}/files/{name}", headers=headers, timeout=30)
    assert response.status_code in (200, 206)
    after = commands(ferretdb)
    return tuple(int(after.get(c, 0) - before.get(c, 0)) for c in ("find", "getMore"))


@pytest.mark.parametrize("name", ["1MB.bin", "1MiB.bin", "buffer.bin"])
def test_a_file_up_to_the_buffer_is_one_chunk_query(ferretdb, gridfs_path, files, name):
    # find: the files document, then the chunks; no getMore.
    assert round_trips(ferretdb, gridfs_path, name) == (2, 0)


def test_larger_files_are_read_in_batches_of_at_most_the_buffer(ferretdb, gridfs_path, files):
    assert round_trips(ferretdb, gridfs_path, "buffer-plus-1.bin") == (2, 1)
    # 5 MiB: 21 chunks, 5 (1.245 MiB) per batch.
    assert round_trips(ferretdb, gridfs_path, "5MiB.bin") == (2, 4)
    # A range of 4 chunks in the middle of it: one query.
    assert round_trips(ferretdb, gridfs_path, "5MiB.bin", Range=f"bytes={CHUNK + 5}-{4 * CHUNK}") == (2, 0)


PLANS = [
    # (length, chunk size, first, last) -> reads
    ((1_000_000, CHUNK, 0, 3), [(0, 3)]),
    ((1024 * 1024, CHUNK, 0, 4), [(0, 4)]),
    ((BUFFER, CHUNK, 0, 5), [(0, 5)]),
    ((BUFFER + 1, CHUNK, 0, 5), [(0, 4), (5, 5)]),
    ((5 * 1024 * 1024, CHUNK, 0, 20), [(0, 4), (5, 9), (10, 14), (15, 19), (20, 20)]),
    ((5 * 1024 * 1024, CHUNK, 3, 9), [(3, 7), (8, 9)]),
    ((40 * 1024 * 1024, 16 * 1024 * 1024, 0, 2), [(0, 0), (1, 1), (2, 2)]),  # chunks larger than the buffer
]


@pytest.mark.parametrize("layout,reads", PLANS)
def test_the_read_plan_holds_at_most_the_buffer_per_read(layout, reads):
    from lab_http.chunks import read_plan
    assert read_plan(*layout) == reads


@pytest.fixture(scope="module")
def node_modules(mongo_uri):
    node_service(mongo_uri, DB_NAME)  # installs the Node path's modules when missing


def test_node_reads_as_many_chunks_per_batch_as_the_python_plan(node_modules):
    """Node's cursor batch size, from its own function, is the plan's first read."""
    script = ("const { chunksPerRead } = require('./stored-file');"
              f"console.log(JSON.stringify({[list(layout) for layout, _ in PLANS]}"
              ".map((layout) => chunksPerRead(...layout))));")
    out = subprocess.run(["node", "-e", script], cwd=SERVICES / "node", capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.strip() == str([reads[0][1] - reads[0][0] + 1 for _, reads in PLANS]).replace(" ", "")
