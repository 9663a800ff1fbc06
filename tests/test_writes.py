"""Seed 002's store benchmark, small, against the real stores: FerretDB (a
MongoDB-protocol server) on PostgreSQL, PostgreSQL itself and a directory.
Every store is written with 1 thread and with several, verified by sha256,
measured on disk, read back and emptied; a file changed behind the store's
back is caught; the report renders seed 002's table shape."""
import json
from pathlib import Path

import pytest

from support.service_processes import postgres_database

from bench.report import study002
from bench.benchmark.cases import Timer
from bench.progress import Progress
from bench.report.markdown import render_markdown
from bench.results import Results, StorePass
from bench.settings import from_env
from bench.databases.stores import make_stores
from bench.databases.write_data import file_name
from bench.benchmark.writes import StoreBenchmark, memory_shortfall, timed_pass

FILES, THREADS = 6, 3


def make_benchmark(tmp_path: Path, **env: str):
    (tmp_path / "writes").mkdir()
    cfg = from_env({"BENCH_TARGETS": "none", "CADVISOR_URL": "", "GRIDFS_DB": "writetest",
                    "WRITE_DIR": str(tmp_path / "writes"), **env})
    results = Results(run_id="t", started_at="s", status="complete",
                      environment={"server": {"product": "FerretDB", "version": "v1.24.2"}})
    timer = Timer(cfg, tmp_path, results, None, 1.0, Progress(1))
    return cfg, results, StoreBenchmark(cfg, timer, results)


@pytest.fixture
def benchmark(mongo_uri, postgres, tmp_path):
    return make_benchmark(tmp_path, MONGO_URI=mongo_uri, POSTGRES_URL=postgres_database(postgres.url, "writetest"),
                          BENCH_REPETITIONS="2", WRITE_FILES=str(FILES), WRITE_SIZE="300KB",
                          WRITE_THREADS=str(THREADS))


def test_every_store_is_written_verified_read_back_and_emptied(benchmark):
    cfg, results, bench = benchmark
    bench.run()
    stores = ["gridfs", "postgres", "filesystem"]
    assert [(w.store, w.threads) for w in results.writes] == [(s, t) for t in (1, THREADS) for s in stores]
    # warm reads (after a pass not counted) from every store; cold reads where bench can empty the
    # caches (the filesystem's page cache), and for the databases the reason they are not measured
    assert [(r.store, r.threads, r.order, r.cache_state) for r in results.reads] == [
        (s, t, o, "warm") for t, o in ((1, "in order"), (THREADS, "random")) for s in stores] + [
        ("filesystem", 1, "in order, cold", "cold")]
    cold = results.store_setup["cold_reads"]
    assert cold["filesystem"].startswith("posix_fadvise(DONTNEED)")
    assert cold["gridfs"].startswith("not measured:") and cold["postgres"].startswith("not measured:")
    for row in results.writes + results.reads:
        assert row.ok and len(row.passes) == 2 and row.files == FILES and row.file_bytes == 300 * 1024, row
        assert row.mb_per_s == pytest.approx(FILES * 300 * 1024 / 1e6 / row.seconds, rel=1e-3)
        assert all(p["requests"] == FILES and p["threads"] == row.threads for p in row.passes)
        assert all(p["p50_ms"] <= p["p99_ms"] <= p["max_ms"] for p in row.passes)
    for row in results.writes:
        assert row.verified is True and 0.9 <= row.disk["ratio"] < 3, row.disk
        assert row.durability == results.store_setup["durability"][row.store]
        assert row.durability["syncs_per_file"] and row.durability["atomic"], row.durability
        # sizes read after the store settled (or the reason it could not)
        assert row.disk["detail"]["settled"], row.disk
    settled = {r.store: r.disk["detail"]["settled"] for r in results.writes}
    assert settled["postgres"] == "CHECKPOINT" and settled["filesystem"].startswith("sync(2)")
    assert settled["gridfs"].startswith(("fsync command", "not settled: fsync refused"))
    # the passes follow the schedule's order of the stores, another each repetition
    orders = results.schedule["orders"]["stores write threads=1"]
    assert orders[0] != orders[1] and all(sorted(o) == sorted(stores) for o in orders)
    assert results.order[:6] == [f"{s} write threads=1 r={i}" for i, order in enumerate(orders, 1) for s in order]
    # the test PostgreSQL runs with fsync off: reported as the server says, not assumed
    assert results.store_setup["durability"]["postgres"]["fsync"] == "off"
    assert not results.failed and results.store_setup["errors"] == {}
    # removed afterwards, so a rerun starts equal
    assert list(Path(cfg.write_dir).iterdir()) == []
    for store in make_stores(cfg.mongo_uri, cfg.gridfs_db, cfg.postgres_url, cfg.write_dir, 1):
        store.open()
        assert store.disk_bytes()["bytes"] < 300 * 1024, store.name
        store.close()
    # the model survives its JSON
    again = Results.from_dict(json.loads(json.dumps(results.to_dict())))
    assert again.writes == results.writes and again.reads == results.reads

    report = render_markdown(results)
    assert "## Stores: writes and reads (seed 002)" in report and "| gridfs (FerretDB) | write | 1 |" in report
    assert "### Storage used" in report and "### What made a write durable" in report
    # not seed 002's setting: its rate for reference, not its seconds
    assert f"({study002.write_mb_per_s('gridfs', 1):.1f} MB/s)" in report and "921 s" not in report


def test_a_file_changed_behind_the_stores_back_fails_verification(benchmark):
    cfg, results, bench = benchmark
    (store,) = [s for s in make_stores("", "", "", cfg.write_dir, 1) if s.name == "filesystem"]
    store.open()
    store.reset()
    expected = [bench.source(i).sha256() for i in range(FILES)]
    timed_pass("write", lambda i: store.write(bench.source(i)), list(range(FILES)), 2, cfg.write_size)
    target = Path(cfg.write_dir) / file_name(4)
    target.write_bytes(b"x" + target.read_bytes()[1:])
    row = StorePass("filesystem", "write", 1, "in order", FILES, cfg.write_size)
    bench.check(store, row, expected)
    store.reset()
    assert row.verified is False and not row.ok and file_name(4) in row.error and "1 of 6" in row.error


def test_an_unreachable_store_fails_its_rows_and_the_others_go_on(mongo_uri, tmp_path):
    _, results, bench = make_benchmark(tmp_path, MONGO_URI=mongo_uri, BENCH_REPETITIONS="1",
                                       POSTGRES_URL="postgresql://lab:secret-pw@127.0.0.1:1/lab", WRITE_FILES="2",
                                       WRITE_SIZE="4KB", WRITE_THREADS="2")
    bench.run()
    rows = results.writes + results.reads
    # 4 writes and warm reads per store, and the filesystem's cold reads
    assert {r.store for r in rows} == {"gridfs", "postgres", "filesystem"} and len(rows) == 13
    assert all(not r.ok and "not reachable" in r.error for r in rows if r.store == "postgres")
    assert all(r.ok for r in rows if r.store != "postgres")
    assert "secret-pw" not in json.dumps(results.to_dict())
    assert "postgres" in results.store_setup["errors"] and results.failed


def test_writer_threads_that_cannot_fit_bench_s_memory_limit_are_refused_before_any_write():
    # 20 threads x 10,000,000 bytes: OOM-killed at 512 MiB in a default run here
    why = memory_shortfall(20, 10_000_000, 512 * 2**20)
    assert "WRITE_THREADS=20" in why and "WRITE_SIZE=10,000,000" in why and "LOADGEN_MEM allows 512 MiB" in why
    assert memory_shortfall(20, 10_000_000, 1024 * 2**20) is None
    assert memory_shortfall(20, 10_000_000, None) is None  # no limit
