"""The seed against a real MongoDB-protocol server: same bytes in GridFS and
on disk, a manifest that matches, idempotent reruns, clear errors."""
import hashlib
import json
import subprocess
import sys

import gridfs
import psycopg
import pymongo
import pytest

import postgres_store
import seed as seed_mod
from service_processes import postgres_database

SEED = seed_mod.__file__


def run_seed(mongo_uri, files_dir, db, sizes, **extra_env):
    env = {"MONGO_URI": mongo_uri, "GRIDFS_DB": db, "FILE_SIZES": sizes, "FILES_DIR": str(files_dir),
           "SEED_MONGO_TIMEOUT": "5", "PATH": "/usr/bin:/bin", **extra_env}
    return subprocess.run([sys.executable, SEED], env=env, capture_output=True, text=True, timeout=120)


def test_parse_sizes():
    assert seed_mod.parse_sizes("1KB 100kb, 1MB 7B") == [("1KB", 1024), ("100KB", 102400),
                                                          ("1MB", 1048576), ("7B", 7)]
    for bad in ("", "1XB", "KB", "1KB 1kb"):
        with pytest.raises(seed_mod.SeedError, match="FILE_SIZES"):
            seed_mod.parse_sizes(bad)


def test_bytes_are_deterministic_and_incompressible():
    import zlib
    data = seed_mod.file_bytes(100 * 1024)
    assert data == seed_mod.file_bytes(100 * 1024)
    assert len(zlib.compress(data)) > 0.99 * len(data)


def test_seed_writes_gridfs_disk_and_manifest_then_reruns_idempotently(mongo_uri, tmp_path):
    first = run_seed(mongo_uri, tmp_path, "seedtest", "1KB 300KB")
    assert first.returncode == 0, first.stderr
    assert "written at" in first.stdout and "MB/s" in first.stdout
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    bucket = gridfs.GridFSBucket(pymongo.MongoClient(mongo_uri).seedtest)
    assert [f["name"] for f in manifest["files"]] == ["1KB.bin", "300KB.bin"]
    for f in manifest["files"]:
        on_disk = (tmp_path / f["name"]).read_bytes()
        from_gridfs = bucket.open_download_stream_by_name(f["name"]).read()
        assert on_disk == from_gridfs and len(on_disk) == f["size"]
        assert hashlib.sha256(on_disk).hexdigest() == f["sha256"]
        doc = next(bucket.find({"filename": f["name"]}))
        assert doc.metadata == {"contentType": "application/octet-stream", "sha256": f["sha256"]}

    upload_dates = [d.upload_date for d in bucket.find().sort("filename")]
    second = run_seed(mongo_uri, tmp_path, "seedtest", "1KB 300KB")
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("GridFS unchanged; disk unchanged") == 2
    assert [d.upload_date for d in bucket.find().sort("filename")] == upload_dates


def test_seed_replaces_a_corrupted_file(mongo_uri, tmp_path):
    assert run_seed(mongo_uri, tmp_path, "seedfix", "1KB").returncode == 0
    (tmp_path / "1KB.bin").write_bytes(b"corrupt")
    again = run_seed(mongo_uri, tmp_path, "seedfix", "1KB")
    assert again.returncode == 0 and "disk written" in again.stdout
    assert len((tmp_path / "1KB.bin").read_bytes()) == 1024


def test_bad_sizes_and_unreachable_mongo_are_named(tmp_path):
    bad = run_seed("mongodb://127.0.0.1:1/", tmp_path, "x", "1QB")
    assert bad.returncode != 0 and "FILE_SIZES" in bad.stderr
    down = run_seed("mongodb://127.0.0.1:1/", tmp_path, "x", "1KB")
    assert down.returncode != 0 and "did not answer within 5 s" in down.stderr


def test_seed_writes_postgres_verifies_it_and_reruns_idempotently(mongo_uri, postgres, tmp_path):
    url = postgres_database(postgres.url, "seedtest_pg")
    first = run_seed(mongo_uri, tmp_path, "seedtest_pg", "1KB 300KB", POSTGRES_URL=url)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("postgres written at") == 2
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [f["stores"] for f in manifest["files"]] == [["gridfs", "disk", "postgres"]] * 2
    with psycopg.connect(url, autocommit=True) as connection:
        for f in manifest["files"]:
            rows = connection.execute("SELECT id, length, chunk_size, content_type, sha256 FROM files"
                                      " WHERE filename = %s", (f["name"],)).fetchall()
            assert [row[1:] for row in rows] == [(f["size"], 261120, "application/octet-stream", f["sha256"])]
            chunks = connection.execute("SELECT n, length(data) FROM chunks WHERE file_id = %s ORDER BY n",
                                        (rows[0][0],)).fetchall()
            whole, rest = divmod(f["size"], postgres_store.CHUNK_SIZE)
            assert chunks == list(enumerate([postgres_store.CHUNK_SIZE] * whole + ([rest] if rest else [])))
            assert hashlib.sha256(postgres_store.read_back(connection, f["name"])).hexdigest() == f["sha256"]
        revisions = connection.execute("SELECT id, upload_date FROM files ORDER BY id").fetchall()

    second = run_seed(mongo_uri, tmp_path, "seedtest_pg", "1KB 300KB", POSTGRES_URL=url)
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("GridFS unchanged; disk unchanged; postgres unchanged") == 2
    with psycopg.connect(url, autocommit=True) as connection:
        assert connection.execute("SELECT id, upload_date FROM files ORDER BY id").fetchall() == revisions
        # A chunk cut short: the seed writes the file again (one revision left).
        connection.execute("UPDATE chunks SET data = substring(data FROM 1 FOR 10)"
                           " WHERE n = 1 AND file_id = %s", (revisions[1][0],))
    third = run_seed(mongo_uri, tmp_path, "seedtest_pg", "1KB 300KB", POSTGRES_URL=url)
    assert third.returncode == 0 and "postgres written at" in third.stdout, third.stderr
    with psycopg.connect(url, autocommit=True) as connection:
        assert connection.execute("SELECT count(*) FROM files WHERE filename = '300KB.bin'").fetchone() == (1,)
        # Same length, other bytes: only the read-back can tell, and it does.
        connection.execute("UPDATE chunks SET data = decode(repeat('00', length(data)), 'hex') WHERE n = 0")
    corrupt = run_seed(mongo_uri, tmp_path, "seedtest_pg", "1KB 300KB", POSTGRES_URL=url)
    assert corrupt.returncode != 0 and "1KB.bin read back from postgres has sha256" in corrupt.stderr


def test_seed_without_postgres_url_leaves_postgres_out(mongo_uri, tmp_path):
    assert run_seed(mongo_uri, tmp_path, "seedtest_nopg", "1KB").returncode == 0
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["files"][0]["stores"] == ["gridfs", "disk"]


def test_unreachable_postgres_is_named_without_its_password(mongo_uri, tmp_path):
    down = run_seed(mongo_uri, tmp_path, "seedtest_pgdown", "1KB", SEED_POSTGRES_TIMEOUT="1",
                    POSTGRES_URL="postgresql://lab:s3cret-pw@127.0.0.1:1/lab")
    assert down.returncode != 0
    assert "postgres at lab@127.0.0.1:1/lab did not answer within 1 s" in down.stderr
    assert "s3cret-pw" not in down.stderr + down.stdout
