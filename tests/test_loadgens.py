"""BENCH_LOADGENS: several ab processes on one case at once (issue 27), so
a path one ab (one thread) cannot fill is measured, not the tool. Their
results are merged as one run's: requests and rates summed, latencies from
every request together, each worker's own CPU kept and checked."""
from pathlib import Path

import pytest

from bench.clients.ab_output import parse_requests
from bench.clients.timing import ab_measurement, merged_ab, run_ab, worker_concurrencies
from bench.measure.latency import order_statistic
from bench.measure.usage import a_worker_bound

AB = Path(__file__).parent / "fixtures" / "ab"


def test_the_concurrency_is_shared_never_a_worker_without_a_connection():
    assert worker_concurrencies(100, 2) == [50, 50]
    assert worker_concurrencies(5, 2) == [3, 2]
    assert worker_concurrencies(2, 4) == [1, 1]
    assert sum(worker_concurrencies(101, 3)) == 101


def test_two_workers_merge_as_one_run_of_every_request():
    """The same captured ab run (ab -k, 1 MB, c=10, its -g lines) as two
    workers: twice the requests and the rate, the same latency percentiles
    (every request counted, not an average of percentiles)."""
    text, tsv = (AB / "nginx-1MB-c10-keepalive.txt").read_text(), (AB / "nginx-1MB-c10-keepalive.tsv").read_text()
    one = ab_measurement(text, None, keepalive=True, cpu_seconds=0.5, started_ns=10**9, ended_ns=3 * 10**9)
    merged = merged_ab([one, one], [tsv, tsv], [5, 5])
    assert merged.requests == 2 * one.requests and merged.rps == pytest.approx(2 * one.rps)
    assert merged.transfer_kbps == pytest.approx(2 * one.transfer_kbps) and merged.threads == 2
    assert merged.loadgen_cpu_seconds == pytest.approx(1.0)
    times = sorted(float(ms) for _, ms in parse_requests(tsv))
    assert len(times) == one.requests
    both = sorted(times * 2)  # every request of both workers, in one order
    assert (merged.p50_ms, merged.p90_ms, merged.p99_ms) == tuple(order_statistic(both, q) for q in (0.5, 0.9, 0.99))
    assert merged.max_ms == max(times)  # no -e CSV captured with it: -g's whole milliseconds
    assert sum(n for _, n in merged.completions) == pytest.approx(2 * one.requests)
    assert [w["concurrency"] for w in merged.workers] == [5, 5]
    assert all(w["cores"] == pytest.approx(0.25) for w in merged.workers)


def test_one_worker_at_its_threads_limit_flags_the_case():
    assert a_worker_bound([{"cores": 0.95}, {"cores": 0.4}])
    assert not a_worker_bound([{"cores": 0.6}, {"cores": 0.6}])
    assert not a_worker_bound(None)


@pytest.mark.native  # ab and nginx
def test_two_ab_workers_against_nginx(tmp_path):
    """Real ab processes against a real nginx: started together, each with
    its own output and CPU, merged."""
    import shutil
    import tempfile
    from support.service_processes import NginxStatic
    files = Path(tempfile.mkdtemp(prefix="lab-loadgens-"))
    files.chmod(0o755)  # nginx's workers read it as nobody
    (files / "64KB.bin").write_bytes(b"x" * 65536)
    (files / "64KB.bin").chmod(0o644)
    server = NginxStatic(files).start()
    try:
        out = tmp_path / "out"
        out.mkdir()
        m = run_ab(f"{server.url}/files/64KB.bin", 1, 4, out, "case", expected_size=65536, workers=2)
    finally:
        server.stop()
        shutil.rmtree(files)
    assert m.failed == 0 and m.requests == sum(w["requests"] for w in m.workers) > 0
    assert [w["concurrency"] for w in m.workers] == [2, 2]
    assert m.rps == pytest.approx(sum(w["rps"] for w in m.workers), rel=1e-3)
    assert all(w["cpu_seconds"] > 0 for w in m.workers)
    assert m.loadgen_cpu_seconds == pytest.approx(sum(w["cpu_seconds"] for w in m.workers), abs=1e-5)
    assert sorted(p.name for p in out.iterdir()) == ["case-w1.txt", "case-w2.txt"]
    # started together: their runs overlap almost wholly
    assert m.wall_seconds < 1.9
