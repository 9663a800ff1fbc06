"""The nginx GridFS module reading files documents and chunks that lie
(issue 23): every length, chunkSize and n is untrusted. A bad document is a
5xx for its own file, before any header, and the worker goes on serving the
other files whole. Every test runs twice: on the module as built for use,
and on its ASan + UBSan build, which must write no report. Real nginx,
real FerretDB."""
import datetime
import os
import shutil
import tempfile
from pathlib import Path

import bson
import gridfs
import pymongo
import pytest
import requests

from support.nginx_gridfs_build import Nginx, build_module

DB = "nginx_gridfs_untrusted"
TIMEOUT = 30
CHUNK = 255 * 1024  # the drivers' default chunkSize
GOOD = os.urandom(3_000_000)  # several windows: the streamed path


def lying_length() -> tuple[dict, list[dict]]:
    """The review's case: a length near 2^63 and one chunk, the last one
    that length implies, whose n and size pass every other check."""
    length = 2**63 - 1
    n = (length - 1) // CHUNK
    return {"length": bson.Int64(length), "chunkSize": CHUNK}, \
        [{"n": bson.Int64(n), "data": bson.Binary(os.urandom(length - n * CHUNK))}]


def beyond_int32_chunks() -> tuple[dict, list[dict]]:
    """length > chunkSize * 2^31: its last chunk's n is no int32."""
    length = 2**31 + 1
    return {"length": bson.Int64(length), "chunkSize": 1}, \
        [{"n": bson.Int64(2**31), "data": bson.Binary(b"x")}]


def one_chunk(length, chunk_size, n=0, data=None) -> tuple[dict, list[dict]]:
    chunk = {"data": bson.Binary(os.urandom(10)) if data is None else data}
    if n is not None:
        chunk["n"] = n
    return {"length": length, "chunkSize": chunk_size}, [chunk]


# name: (files fields, chunks, Range header or None)
BAD = {
    "lying-length.bin": (*lying_length(), "bytes=-100"),
    "beyond-int32-chunks.bin": (*beyond_int32_chunks(), "bytes=-1"),
    "fractional-length.bin": (*one_chunk(10.5, CHUNK), None),
    "huge-double-length.bin": (*one_chunk(2.0**60, CHUNK, data=bson.Binary(os.urandom(CHUNK))), "bytes=0-9"),
    "fractional-chunksize.bin": (*one_chunk(10, CHUNK + 0.5), None),
    "fractional-n.bin": (*one_chunk(10, CHUNK, n=0.5), None),
    "wrong-size-chunk.bin": (*one_chunk(11, CHUNK), None),
    "text-data.bin": (*one_chunk(10, CHUNK, data="0123456789"), None),
    "missing-n.bin": (*one_chunk(10, CHUNK, n=None), None),
    "string-n.bin": (*one_chunk(10, CHUNK, n="0"), None),
}


@pytest.fixture(scope="module")
def stored(mongo_uri):
    client = pymongo.MongoClient(mongo_uri)
    client.drop_database(DB)
    db = client[DB]
    gridfs.GridFSBucket(db).upload_from_stream("good.bin", GOOD)
    now = datetime.datetime.now(datetime.timezone.utc)
    for name, (fields, chunks, _) in BAD.items():
        file_id = bson.ObjectId()
        db["fs.files"].insert_one({"_id": file_id, "filename": name, "uploadDate": now, **fields})
        db["fs.chunks"].insert_many([{"files_id": file_id, **chunk} for chunk in chunks])
    # the same lies in the first window of a streamed (multi-window) file
    file_id = gridfs.GridFSBucket(db).upload_from_stream("streamed-bad-chunk.bin", GOOD)
    db["fs.chunks"].update_one({"files_id": file_id, "n": 0}, {"$set": {"n": 0.5}})
    yield
    client.drop_database(DB)
    client.close()


@pytest.fixture(scope="module", params=[False, True], ids=["plain", "asan"])
def nginx(stored, mongo_uri, request):
    prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
    (prefix / "files").mkdir()
    server = Nginx(build_module(request.param), mongo_uri, prefix / "files", prefix, DB,
                   sanitize=request.param)
    yield server
    server.stop()
    shutil.rmtree(prefix, ignore_errors=True)


def assert_good_served_whole(nginx):
    r = requests.get(nginx.url("/files/good.bin"), timeout=TIMEOUT)
    assert r.status_code == 200 and r.content == GOOD
    r = requests.get(nginx.url("/files/good.bin"), headers={"Range": "bytes=-100"}, timeout=TIMEOUT)
    assert r.status_code == 206 and r.content == GOOD[-100:]


@pytest.mark.parametrize("name", [*BAD, "streamed-bad-chunk.bin"])
def test_a_lying_document_is_a_5xx_for_its_file_only(nginx, name):
    workers = nginx.worker_pids()
    rng = BAD[name][2] if name in BAD else None
    headers = {"Range": rng} if rng else {}
    with nginx.sanitizer_checked():
        try:
            r = requests.get(nginx.url(f"/files/{name}"), headers=headers, timeout=TIMEOUT)
        except requests.ConnectionError as e:  # the worker died, or cut a 200
            pytest.fail(f"no answer: {e}")
        assert r.status_code == 500, (r.status_code, r.headers)
        assert nginx.worker_pids() == workers  # no crash
        assert_good_served_whole(nginx)


def test_bad_documents_are_logged_and_nothing_crashed(nginx):
    log = nginx.log()
    assert "bad length" in log and "integer n" in log
    assert "exited on signal" not in log and "[alert]" not in log
    nginx.assert_no_sanitizer_report()
