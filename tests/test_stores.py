"""The write phase's stores (bench/databases/stores.py) against real servers: FerretDB
on PostgreSQL for GridFS, PostgreSQL 15, a temporary directory. Each writes
files from one thread and from three, reads them back by sha256, measures
its disk, resets to nothing, and fails clearly."""
import hashlib
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pymongo
import pytest

from bench.databases.stores import (FilesystemStore, GridFSStore, PostgresStore, StoreError, first_host, make_stores,
                          mongo_hosts, open_stores)
from bench.databases.write_data import FileSource, base_bytes
from support.processes import free_port
from support.service_processes import postgres_database

SIZE = 300 * 1024
FILES = 6  # per round: one from 1 thread, one from 3
BASE = base_bytes(SIZE)
SECRET = "s3cret-pw"


@pytest.fixture
def gridfs_store(mongo_uri):
    store = GridFSStore(mongo_uri, "storestest", threads=3)
    store.open()
    yield store
    store.close()


@pytest.fixture
def postgres_store(postgres):
    store = PostgresStore(postgres_database(postgres.url, "storestest"), threads=3)
    store.open()
    yield store
    store.close()


@pytest.fixture
def filesystem_store(tmp_path):
    store = FilesystemStore(str(tmp_path / "writes"))
    store.open()
    yield store
    store.close()


@pytest.fixture(params=[pytest.param("gridfs", marks=pytest.mark.native),
                        pytest.param("postgres", marks=pytest.mark.native), "filesystem"])
def store(request):
    return request.getfixturevalue(f"{request.param}_store")


def write_round(store, indexes, threads: int) -> float:
    """Seconds to write files `indexes` from `threads` threads."""
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: store.write(FileSource(BASE, i)), indexes))
    return time.perf_counter() - started


def read_back(store, index: int) -> tuple[int, str]:
    digest = hashlib.sha256()
    count = store.read(FileSource(BASE, index).name, digest)
    return count, digest.hexdigest()


def assert_nothing_left(store) -> None:
    if store.name == "gridfs":
        names = store.db.list_collection_names()
        assert not [n for n in names if n.startswith("bench_writes.")], names
    elif store.name == "postgres":
        with psycopg.connect(store.url, autocommit=True) as connection:
            assert connection.execute("SELECT (SELECT count(*) FROM bench_writes.files),"
                                      " (SELECT count(*) FROM bench_writes.chunks)").fetchone() == (0, 0)
    else:
        assert not [p.name for p in store.directory.iterdir() if p.name.startswith("write-")]


def test_writes_read_back_measure_and_reset(store):
    store.reset()
    single = write_round(store, range(FILES), threads=1)
    concurrent = write_round(store, range(FILES, 2 * FILES), threads=3)

    started = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda i: read_back(store, i), range(2 * FILES)))
    reading = time.perf_counter() - started
    assert answers == [(SIZE, FileSource(BASE, i).sha256()) for i in range(2 * FILES)]

    written = 2 * FILES * SIZE
    disk = store.disk_bytes()
    assert written <= disk["bytes"] < 3 * written, disk
    assert disk["detail"]["method"]
    megabytes = FILES * SIZE / 1e6
    print(f"\n{store.name}: write {megabytes / single:.1f} MB/s from 1 thread, "
          f"{megabytes / concurrent:.1f} MB/s from 3; read {2 * megabytes / reading:.1f} MB/s from 3; "
          f"disk {disk['bytes'] / written:.2f}x the bytes written")

    store.reset()
    assert_nothing_left(store)
    assert store.disk_bytes()["bytes"] < written / 10
    # Writes after a reset (PostgreSQL: prepared statements over recreated tables).
    write_round(store, range(FILES), threads=3)
    assert [read_back(store, i)[1] for i in range(FILES)] == [FileSource(BASE, i).sha256() for i in range(FILES)]


def test_a_missing_file_is_a_store_error(store):
    store.reset()
    with pytest.raises(StoreError, match=f"^{store.name} at .*no file write-00042.bin"):
        store.read("write-00042.bin")


def test_a_file_written_again_reads_as_its_last_version(store):
    store.reset()
    store.write(FileSource(BASE, 1))
    store.write(FileSource(BASE, 1))
    assert read_back(store, 1) == (SIZE, FileSource(BASE, 1).sha256())


def test_postgres_durability_is_what_the_server_says(postgres_store):
    durability = postgres_store.durability()
    # The test server runs with fsync=off: only SHOW can say so.
    assert durability["fsync"] == "off"
    assert durability["synchronous_commit"] == "on"
    assert durability["full_page_writes"] == "on"
    assert durability["wal_sync_method"] in {"fdatasync", "fsync", "open_datasync", "open_sync"}
    assert "one transaction" in durability["per_file"]


def test_gridfs_durability_names_the_server_and_write_concern(gridfs_store):
    gridfs_store.reset()
    gridfs_store.write(FileSource(BASE, 0))
    durability = gridfs_store.durability()
    assert durability["write_concern"] == {"w": 1, "j": True}  # as the client sends it
    assert durability["server"]["product"] == "FerretDB"
    assert durability["server"]["version"].startswith("v1.")
    assert durability["server"]["backend"] == "PostgreSQL"
    assert "PostgreSQL transaction commits" in durability["acknowledged"]
    assert "ignores writeConcern" in durability["acknowledged"]


def test_postgres_connection_given_back_in_a_transaction_is_rolled_back(postgres_store):
    with postgres_store.pool.connection() as connection:
        connection.execute("SELECT 1")  # opens a transaction, left open
    postgres_store.reset()
    postgres_store.write(FileSource(BASE, 0))
    postgres_store.reset()  # a deferred FK check pending in a transaction left open would refuse this
    assert_nothing_left(postgres_store)


def test_ferretdb_collstats_leaves_the_chunks_out_so_dbstats_measures(gridfs_store):
    """FerretDB's collStats storageSize is the table's main fork only: the
    chunks' data, in TOAST, is missing from it. The store says so."""
    gridfs_store.reset()
    write_round(gridfs_store, range(4), threads=1)
    detail = gridfs_store.disk_bytes()["detail"]
    assert detail["method"].startswith("dbStats totalSize")
    assert detail["collStats"]["bench_writes.chunks"]["storageSize"] < SIZE


def test_ferretdb_disk_figure_after_an_open_without_reset(mongo_uri, gridfs_store):
    gridfs_store.reset()
    reopened = GridFSStore(mongo_uri, "storestest", threads=1)
    reopened.open()  # the bucket is absent: its figure is measured from here
    reopened.write(FileSource(BASE, 0))
    assert SIZE <= reopened.disk_bytes()["bytes"] < 3 * SIZE
    reopened.close()
    stale = GridFSStore(mongo_uri, "storestest", threads=1)
    stale.open()  # the bucket is there: only a reset can say what it takes
    with pytest.raises(StoreError, match="disk_bytes before a reset"):
        stale.disk_bytes()
    stale.reset()
    assert stale.disk_bytes()["bytes"] == 0
    stale.close()


def test_filesystem_durability_and_reset_keep_other_files(filesystem_store):
    expected = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--target", str(filesystem_store.directory)],
                              capture_output=True, text=True).stdout.strip()
    durability = filesystem_store.durability()
    assert {k: durability[k] for k in ("fsync", "filesystem")} == {"fsync": "each file, then its directory",
                                                                  "filesystem": expected}
    assert durability["syncs_per_file"].startswith("2 fsyncs") and durability["atomic"].startswith("yes")
    others = ["keep.txt", "write-1.bin", "write-00001.bin.bak"]
    for name in others:
        (filesystem_store.directory / name).write_text("not the phase's")
    filesystem_store.write(FileSource(BASE, 3))
    (filesystem_store.directory / "write-00004.bin.1-2.partial").write_bytes(b"left by a crash")
    filesystem_store.reset()
    assert sorted(p.name for p in filesystem_store.directory.iterdir()) == sorted(others)


def test_unreachable_gridfs_fails_fast_without_its_password():
    store = GridFSStore(f"mongodb://lab:{SECRET}@127.0.0.1:{free_port()}/", "x", threads=1)
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"^gridfs at mongodb://127\.0\.0\.1:\d+: cannot connect") as caught:
        store.open()
    assert time.monotonic() - started < 10
    assert SECRET not in str(caught.value) and "lab@" not in str(caught.value)
    # The runner resets and closes every store, opened or not: no second wait.
    started = time.monotonic()
    with pytest.raises(StoreError, match="cannot drop the bench_writes bucket: not connected"):
        store.reset()
    store.close()
    assert time.monotonic() - started < 1


def test_unreachable_postgres_fails_fast_without_its_password():
    port = free_port()
    store = PostgresStore(f"postgresql://lab:{SECRET}@127.0.0.1:{port}/lab", threads=1)
    started = time.monotonic()
    with pytest.raises(StoreError, match=f"^postgres at lab@127.0.0.1:{port}/lab: cannot connect") as caught:
        store.open()
    assert time.monotonic() - started < 10
    assert SECRET not in str(caught.value)


def test_store_names_come_from_the_uris_without_user_info():
    assert mongo_hosts(f"mongodb://lab:{SECRET}@mongo:27017/?w=1") == "mongo:27017"
    assert first_host("mongo:27017,other:27017") == "mongo"
    assert first_host("[::1]:27017") == "::1"
    store = GridFSStore(f"mongodb://lab:{SECRET}@mongo:27017/", "lab", threads=1)
    assert (store.location, store.service) == ("mongodb://mongo:27017", "mongo")
    store = PostgresStore(f"postgresql://lab:{SECRET}@postgres:5432/lab", threads=1)
    assert (store.location, store.service) == ("lab@postgres:5432/lab", "postgres")


def test_open_stores_opens_what_is_configured(mongo_uri, postgres, tmp_path):
    url = postgres_database(postgres.url, "storestest_open")
    stores = open_stores(mongo_uri, "storestest_open", url, str(tmp_path), threads=2)
    try:
        assert [(s.name, s.service) for s in stores] == [
            ("gridfs", "127.0.0.1"), ("postgres", "127.0.0.1"), ("filesystem", None)]
    finally:
        for s in stores:
            s.close()
    only_gridfs = open_stores(mongo_uri, "storestest_open", "", "", threads=2)
    assert [s.name for s in only_gridfs] == ["gridfs"]
    only_gridfs[0].close()
    unopened = make_stores("mongodb://127.0.0.1:1/", "x", "postgresql://lab@127.0.0.1:1/lab", str(tmp_path), 1)
    assert [s.name for s in unopened] == ["gridfs", "postgres", "filesystem"]


def test_open_stores_closes_what_it_opened_when_one_fails(mongo_uri, tmp_path):
    with pytest.raises(StoreError, match="^postgres at"):
        open_stores(mongo_uri, "storestest_open", f"postgresql://lab@127.0.0.1:{free_port()}/lab",
                    str(tmp_path), threads=1)


def test_concurrent_first_writes_make_the_gridfs_indexes_once(gridfs_store):
    gridfs_store.reset()
    write_round(gridfs_store, range(6), threads=6)
    client = pymongo.MongoClient(gridfs_store.uri)
    keys = [dict(i["key"]) for i in client.storestest["bench_writes.chunks"].list_indexes()]
    assert {"files_id": 1, "n": 1} in keys


def resident_pages(path: Path) -> int:
    """How many of the file's pages the kernel holds in its page cache:
    mincore(2) over a shared read-only mapping (what fincore(1) does)."""
    import ctypes
    import mmap
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        assert address not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        vec = (ctypes.c_ubyte * ((size + mmap.PAGESIZE - 1) // mmap.PAGESIZE))()
        try:
            assert libc.mincore(address, size, vec) == 0, ctypes.get_errno()
        finally:
            libc.munmap(address, size)
        return sum(v & 1 for v in vec)
    finally:
        os.close(fd)


def test_a_cold_read_finds_the_file_out_of_the_page_cache(filesystem_store):
    """evict() drops a file's clean pages (posix_fadvise DONTNEED), as the
    kernel itself reports them: the cold reads read the disk."""
    from bench.databases.write_data import file_name
    filesystem_store.write(FileSource(base_bytes(4 * 1024 * 1024), 0))
    path = filesystem_store.directory / file_name(0)
    filesystem_store.read(file_name(0))  # now in the page cache
    assert resident_pages(path) > 0
    filesystem_store.evict([file_name(0)])
    assert resident_pages(path) == 0
