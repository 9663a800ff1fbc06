"""The seed against a real MongoDB-protocol server: same bytes in GridFS and
on disk, a manifest that matches, idempotent reruns, clear errors; and its
file set (FILE_SET), in every store and exactly the manifest's."""
import hashlib
import json
import re
import subprocess
import sys

import gridfs
import psycopg
import pymongo
import pytest

from labfiles import bad_documents
from labfiles.sizes import parse_set
from seed import file_set, loader, postgres_store
from support.service_processes import REPO, postgres_database


def run_seed(mongo_uri, files_dir, db, sizes, **extra_env):
    env = {"MONGO_URI": mongo_uri, "GRIDFS_DB": db, "FILE_SIZES": sizes, "FILES_DIR": str(files_dir),
           "SEED_MONGO_TIMEOUT": "5", "PATH": "/usr/bin:/bin", **extra_env}
    return subprocess.run([sys.executable, "-m", "seed"], cwd=REPO / "loadgen", env=env, capture_output=True,
                          text=True, timeout=120)


def test_bytes_are_deterministic_and_incompressible():
    import zlib
    data = loader.file_bytes(100 * 1024)
    assert data == loader.file_bytes(100 * 1024)
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


def test_a_file_past_the_largest_reply_is_seeded_and_read_back(mongo_uri, tmp_path):
    """80 MB: read back by the driver's own GridOut, FerretDB answered the
    chunks past its first batch in one reply over the 48 MB the driver takes
    (100MB in FILE_SIZES failed so); the seed reads in bounded batches."""
    done = run_seed(mongo_uri, tmp_path, "seedbig", "80MB")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 files verified by sha256" in done.stdout
    with pytest.raises(pymongo.errors.ProtocolError, match="larger than server max message size"):
        gridfs.GridFSBucket(pymongo.MongoClient(mongo_uri).seedbig).open_download_stream_by_name("80MB.bin").read()
    # a chunk gone is caught, not read past
    pymongo.MongoClient(mongo_uri).seedbig["fs.chunks"].delete_one({"n": 7})
    (tmp_path / "80MB.bin").unlink()  # so the seed rewrites the disk copy, not GridFS's
    broken = run_seed(mongo_uri, tmp_path, "seedbig", "80MB")
    assert broken.returncode != 0 and "chunk 7 missing" in broken.stderr, broken.stdout + broken.stderr


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


def vacuumed_and_analyzed(url: str, schema: str) -> dict[str, tuple[bool, bool]]:
    """Each table of `schema`: (vacuumed, analyzed) by a command, not by autovacuum."""
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute("SELECT relname, last_vacuum IS NOT NULL, last_analyze IS NOT NULL"
                                  " FROM pg_stat_user_tables WHERE schemaname = %s", (schema,)).fetchall()
    return {name: (vacuumed, analyzed) for name, vacuumed, analyzed in rows}


def test_the_seed_settles_both_databases_before_its_manifest(ferretdb, postgres, tmp_path):
    """Left to autovacuum, FerretDB's PostgreSQL vacuumed the seeded tables
    40-70 s later, in the middle of the first timed cases; the seed does it
    at once, through FerretDB's compact, and in the lab's PostgreSQL store."""
    url = postgres_database(postgres.url, "seedsettle_pg")
    before = vacuumed_and_analyzed(ferretdb.postgres.url, "seedsettle")
    assert before == {}
    done = run_seed(ferretdb.uri, tmp_path, "seedsettle", "1KB 300KB", POSTGRES_URL=url)
    assert done.returncode == 0, done.stderr
    assert re.search(r"seed: settled before any timing: GridFS compacted \(FerretDB: VACUUM ANALYZE\), "
                     r"postgres vacuumed and analyzed in [0-9.]+ s", done.stdout), done.stdout
    assert done.stdout.index("settled") < done.stdout.index("files verified")  # before the manifest
    in_ferretdb = vacuumed_and_analyzed(ferretdb.postgres.url, "seedsettle")
    chunks = [name for name in in_ferretdb if name.startswith("fs_chunks")]
    files = [name for name in in_ferretdb if name.startswith("fs_files")]
    assert len(chunks) == 1 and len(files) == 1, in_ferretdb
    assert in_ferretdb[chunks[0]] == in_ferretdb[files[0]] == (True, True), in_ferretdb
    assert vacuumed_and_analyzed(url, "public") == {"files": (True, True), "chunks": (True, True)}


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


# --- the file set (FILE_SET) ---------------------------------------------

def test_file_set_is_deterministic_incompressible_and_distinct():
    import zlib
    spec = parse_set("500x1KB-30KB")
    files = file_set.set_files(spec)
    assert files == file_set.set_files(spec)
    assert [f.name for f in files[:2]] == ["set-00000.bin", "set-00001.bin"] and files[-1].name == "set-00499.bin"
    assert all(1024 <= f.size <= 30720 for f in files) and len({f.size for f in files}) > 400
    assert len({f.sha256 for f in files}) == 500
    # The sizes depend on the range only: a smaller count is the same first files.
    assert file_set.set_files(parse_set("20x1024B-30KB")) == files[:20]
    # Same size, other name: other bytes; a file's chunks are its bytes.
    one, other = (b"".join(file_set.file_chunks(name, 300_000)) for name in ("set-00000.bin", "set-00001.bin"))
    assert one != other and len(one) == 300_000
    assert len(zlib.compress(one)) > 0.99 * len(one)
    assert hashlib.sha256(b"".join(file_set.file_chunks(files[7].name, files[7].size))).hexdigest() \
        == files[7].sha256
    assert [file_set.set_name(i, 100_001) for i in (0, 100_000)] == ["set-000000.bin", "set-100000.bin"]


def test_gridfs_reads_the_set_in_cursors_of_bounded_bytes(monkeypatch):
    monkeypatch.setattr(file_set, "READ_BYTES", 100)
    stored = [file_set.Stored(i, f"set-{i}", length, None) for i, length in enumerate([60, 50, 10, 200, 5])]
    assert list(file_set.GridFSSet.id_ranges(stored)) == [(0, 1), (2, 3), (4, 4)]
    assert list(file_set.GridFSSet.id_ranges([])) == []


def set_names_in_stores(mongo_uri, db, files_dir, postgres_url) -> dict[str, list[str]]:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        in_postgres = [row[0] for row in connection.execute(
            "SELECT filename FROM files WHERE filename LIKE 'set-%' ORDER BY filename")]
    return {"gridfs": sorted(pymongo.MongoClient(mongo_uri)[db]["fs.files"].distinct(
                "filename", {"filename": {"$regex": "^set-"}})),
            "disk": sorted(p.name for p in files_dir.glob("set-*")), "postgres": in_postgres}


def test_seed_loads_the_file_set_into_every_store_and_keeps_it_exact(mongo_uri, postgres, tmp_path):
    url = postgres_database(postgres.url, "seedtest_set")
    full = {"POSTGRES_URL": url, "BENCH_PROFILE": "full"}  # the default profile (standard) loads no set
    first = run_seed(mongo_uri, tmp_path, "seedtest_set", "1KB", **full, FILE_SET="60x1KB-40KB")
    assert first.returncode == 0, first.stderr
    assert "seed: file set 60x1KB-40KB: 60 files" in first.stdout
    assert first.stdout.count("(60 written, 0 removed)") == 3
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert [f["name"] for f in manifest["files"]] == ["1KB.bin"]
    the_set = manifest["file_set"]
    assert {k: v for k, v in the_set.items() if k != "files"} == {
        "spec": "60x1KB-40KB", "count": 60, "min_size": 1024, "max_size": 40960,
        "total_bytes": sum(f["size"] for f in the_set["files"]), "stores": ["gridfs", "disk", "postgres"]}
    assert [f["name"] for f in the_set["files"]] == [f"set-{i:05d}.bin" for i in range(60)]
    bucket = gridfs.GridFSBucket(pymongo.MongoClient(mongo_uri).seedtest_set)
    with psycopg.connect(url, autocommit=True) as connection:
        for f in the_set["files"]:
            assert 1024 <= f["size"] <= 40960
            from_gridfs = bucket.open_download_stream_by_name(f["name"]).read()
            from_disk = (tmp_path / f["name"]).read_bytes()
            from_postgres = postgres_store.read_back(connection, f["name"])
            assert from_gridfs == from_disk == from_postgres and len(from_disk) == f["size"]
            assert hashlib.sha256(from_disk).hexdigest() == f["sha256"]
        assert connection.execute("SELECT DISTINCT content_type, chunk_size FROM files").fetchall() == \
            [("application/octet-stream", 261120)]
    doc = next(bucket.find({"filename": "set-00007.bin"}))
    assert doc.metadata == {"contentType": "application/octet-stream", "sha256": the_set["files"][7]["sha256"]}
    assert doc.chunk_size == 261120

    # A rerun writes nothing.
    upload_dates = sorted((d.filename, d.upload_date) for d in bucket.find())
    again = run_seed(mongo_uri, tmp_path, "seedtest_set", "1KB", **full, FILE_SET="60x1KB-40KB")
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("(0 written, 0 removed)") == 3
    assert sorted((d.filename, d.upload_date) for d in bucket.find()) == upload_dates

    # A smaller set: its files are the first 20 of the last (the sizes
    # depend on the range only), the other 40 go from every store.
    smaller = run_seed(mongo_uri, tmp_path, "seedtest_set", "1KB", **full, FILE_SET="20x1KB-40KB")
    assert smaller.returncode == 0, smaller.stderr
    assert smaller.stdout.count("(0 written, 40 removed)") == 3
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["file_set"]["files"] == the_set["files"][:20]
    names = [f"set-{i:05d}.bin" for i in range(20)]
    assert set_names_in_stores(mongo_uri, "seedtest_set", tmp_path, url) == \
        {"gridfs": names, "disk": names, "postgres": names}
    database = pymongo.MongoClient(mongo_uri).seedtest_set

    def good_chunks() -> int:  # the bad documents (labfiles/bad_documents.py), written anew each run, aside
        bad = [d["_id"] for d in database["fs.files"].find({"filename": {"$regex": f"^{bad_documents.PREFIX}"}})]
        return database["fs.chunks"].count_documents({"files_id": {"$nin": bad}})

    assert good_chunks() == 20 + 1  # the set's and 1KB.bin's: none left behind
    assert bucket.open_download_stream_by_name("1KB.bin").read() == (tmp_path / "1KB.bin").read_bytes()
    assert [f["name"] for f in manifest["files"]] == ["1KB.bin"]

    # Another range: every file written again, the old revisions removed.
    other = run_seed(mongo_uri, tmp_path, "seedtest_set", "1KB", **full, FILE_SET="25x2KB")
    assert other.returncode == 0, other.stderr
    assert other.stdout.count("(25 written, 20 removed)") == 3
    assert [d.length for d in bucket.find({"filename": {"$regex": "^set-"}})] == [2048] * 25

    # The default profile (standard) loads no set, and the stores keep none.
    standard = run_seed(mongo_uri, tmp_path, "seedtest_set", "1KB", POSTGRES_URL=url, FILE_SET="25x2KB")
    assert standard.returncode == 0, standard.stderr
    assert "BENCH_PROFILE=standard: no file set" in standard.stdout
    assert json.loads((tmp_path / "manifest.json").read_text())["file_set"] is None
    assert set_names_in_stores(mongo_uri, "seedtest_set", tmp_path, url) == \
        {"gridfs": [], "disk": [], "postgres": []}
    assert (tmp_path / "1KB.bin").exists() and good_chunks() == 1


def test_seed_without_a_file_set_writes_file_set_null(mongo_uri, tmp_path):
    for off in ("", "off"):
        done = run_seed(mongo_uri, tmp_path, "seedtest_noset", "1KB", FILE_SET=off)
        assert done.returncode == 0, done.stderr
        assert json.loads((tmp_path / "manifest.json").read_text())["file_set"] is None
    assert "file set" not in done.stdout


def test_file_set_read_back_finds_a_corrupt_file_and_disk_is_repaired(mongo_uri, postgres, tmp_path):
    env = {"FILE_SET": "5x1KB-2KB", "BENCH_PROFILE": "full",
           "POSTGRES_URL": postgres_database(postgres.url, "seedtest_setbad")}
    assert run_seed(mongo_uri, tmp_path, "seedtest_setbad", "1KB", **env).returncode == 0
    (tmp_path / "set-00002.bin").write_bytes(b"corrupt")
    repaired = run_seed(mongo_uri, tmp_path, "seedtest_setbad", "1KB", **env)
    assert repaired.returncode == 0 and re.search(r"disk [\d.]+ s \(1 written, 1 removed\)", repaired.stdout)
    # Same length, other bytes: only the read-back can tell, and it does.
    with psycopg.connect(env["POSTGRES_URL"], autocommit=True) as connection:
        connection.execute("UPDATE chunks SET data = decode(repeat('00', length(data)), 'hex') WHERE file_id ="
                           " (SELECT id FROM files WHERE filename = 'set-00004.bin')")
    corrupt = run_seed(mongo_uri, tmp_path, "seedtest_setbad", "1KB", **env)
    assert corrupt.returncode != 0 and "set-00004.bin read back from postgres has sha256" in corrupt.stderr
    db = pymongo.MongoClient(mongo_uri).seedtest_setbad
    file_id = db["fs.files"].find_one({"filename": "set-00003.bin"})["_id"]
    db["fs.chunks"].delete_one({"files_id": file_id, "n": 0})
    missing = run_seed(mongo_uri, tmp_path, "seedtest_setbad", "1KB", **env)
    assert missing.returncode != 0 and "set-00003.bin read back from GridFS has sha256" in missing.stderr


def test_bad_file_set_is_named_before_connecting(tmp_path):
    bad = run_seed("mongodb://127.0.0.1:1/", tmp_path, "x", "1KB", FILE_SET="10000x30KB-1KB")
    assert bad.returncode != 0
    assert "FILE_SET='10000x30KB-1KB': the smallest size comes first" in bad.stderr
