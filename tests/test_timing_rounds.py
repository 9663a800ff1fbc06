"""bench's timing rounds against real servers on 127.0.0.1: nginx-static's
configuration natively, twice, and real ab, wrk and vegeta. Repetitions
rotate through the targets; a target that dies between rounds is found,
its remaining cases and its fixed-rate run read failed, the other target
goes on, and the report says so."""
import math
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from support.service_processes import NginxStatic

from bench.benchmark.cases import Timer
from bench.benchmark.closed_loop import fixed_rounds, time_rounds
from bench.benchmark.open_loop import time_open_loop
from bench.benchmark.tool_check import compare_round
from bench.benchmark.schedule import round_order
from bench.measure.rounds import MIN_ROUNDS, QUANTILE_LEVEL, ratio_of
from bench.measure.usage import LOADGEN_BOUND
from bench.progress import Progress
from bench.report.markdown import render_markdown
from bench.results import Results, TargetResult
from bench.settings import from_env

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def vegeta():
    binary = subprocess.run([str(REPO / "tools" / "install" / "install-vegeta.sh")], check=True, capture_output=True,
                            text=True, timeout=900).stdout.strip().splitlines()[-1]
    os.environ["VEGETA"] = binary
    yield binary
    os.environ.pop("VEGETA", None)


def serving_twice(changes: dict[str, str] | None = None):
    """Two nginx-static on one folder holding 1KB.bin; changes: to their
    nginx.conf ({files} is the folder)."""
    # not under pytest's tmp tree: it is private to root, and nginx's worker is not root
    files = Path(tempfile.mkdtemp(prefix="lab-rounds-"))
    files.chmod(0o755)
    (files / "1KB.bin").write_bytes(os.urandom(1024))
    (files / "1KB.bin").chmod(0o644)
    changes = {old: new.replace("{files}", str(files)) for old, new in (changes or {}).items()}
    first, second = NginxStatic(files, changes).start(), NginxStatic(files, changes).start()
    yield first, second
    first.stop()
    second.stop()
    shutil.rmtree(files, ignore_errors=True)


@pytest.fixture
def two_nginx():
    yield from serving_twice()


def test_rounds_follow_the_schedule_and_a_target_that_dies_is_failed_not_timed(two_nginx, vegeta, tmp_path):
    first, second = two_nginx
    cfg = from_env({"BENCH_TARGETS": "a b", "BENCH_DURATION": "1", "BENCH_WARMUP": "1",
                    "BENCH_REPETITIONS": "2", "BENCH_TOOLS": "ab wrk", "BENCH_CONCURRENCY": "2 4",
                    "BENCH_MIN_REQUESTS": "0", "BENCH_OPEN_LOOP": "0.2", "CADVISOR_URL": ""})
    targets = [TargetResult("a", first.url, True), TargetResult("b", second.url, True)]
    results = Results(run_id="t", started_at="s", targets=targets, status="complete",
                      environment={"server": {"product": "MongoDB", "version": "7.0"}})
    timer = Timer(cfg, tmp_path, results, None, 1.0, Progress(60))
    f = {"name": "1KB.bin", "size": 1024}

    results.runs += fixed_rounds(timer, targets, f, 2)
    # each round's order drawn again from the recorded seed and the round's number
    orders = results.schedule["orders"]["1KB.bin c=2"]
    assert orders == [round_order(["a", "b"], "t:1KB.bin c=2", i) for i in (1, 2)]
    assert all(r["round"] == i for run in results.runs for i, r in enumerate(run.repetitions, 1))
    assert results.order == [f"{t} 1KB.bin c=2 r={i}" for i, order in enumerate(orders, 1) for t in order]
    warm = results.schedule["warm_ups"]["a 1KB.bin c=2"]
    assert warm["seconds"] == 1.0 and len(warm["windows"]) == 1 and warm["windows"][0]["requests"] > 0
    for run in results.runs:
        assert run.ok and run.rps > 0 and len(run.repetitions) == 2, run
        assert all(0.9 <= r["seconds"] <= 1.5 for r in run.repetitions)  # timed by seconds, not requests
        assert all(0 < r["loadgen_cpu_seconds"] / ((r["ended_ns"] - r["started_ns"]) / 1e9) <= 1.0
                   for r in run.repetitions)  # ab: one thread, never above one core
        assert (tmp_path / run.raw_output).exists()

    second.stop()  # b dies between rounds
    results.runs += fixed_rounds(timer, targets, f, 4)
    results.comparisons += compare_round(timer, targets, f, 4)
    results.open_loop += [time_open_loop(timer, t, f) for t in targets]

    a4, b4 = results.run_for("a", "1KB.bin", 4), results.run_for("b", "1KB.bin", 4)
    assert a4.ok and a4.rps > 0
    assert not b4.ok and "stopped answering" in b4.error and b4.rps == 0
    assert "b" in timer.down
    assert [c.target for c in results.comparisons] == ["a"]
    # ab -k and wrk take turns going first, so a warming path favours neither
    assert [o for o in results.order if "ab -k" in o or "wrk" in o] == [
        "a 1KB.bin c=4 ab -k r=1", "a 1KB.bin c=4 wrk r=1", "a 1KB.bin c=4 wrk r=2", "a 1KB.bin c=4 ab -k r=2"]
    assert [len(t.repetitions) for t in (results.comparisons[0].ab_keepalive, results.comparisons[0].wrk)] == [2, 2]
    a_loop, b_loop = results.open_loop
    # the share is of the keep-alive capacity: the faster of ab -k and wrk, as vegeta keeps connections alive
    keep_alive = max(results.comparisons[0].ab_keepalive.rps, results.comparisons[0].wrk.rps)
    assert a_loop.ok and a_loop.capacity == pytest.approx(keep_alive, abs=0.1)
    assert a_loop.rate == pytest.approx(0.2 * keep_alive, abs=0.5)
    assert a_loop.requests > 0 and a_loop.p50_ms <= a_loop.p99_ms <= a_loop.p999_ms <= a_loop.max_ms
    assert a_loop.requests == pytest.approx(min(10_000, 20 * a_loop.rate), rel=0.02)  # 10,000 or 20 s
    assert sum(n for _, n in a_loop.latency_histogram) == a_loop.requests
    assert not b_loop.ok and "stopped answering" in b_loop.error
    assert results.failed

    report = render_markdown(results)
    assert "| b | not recorded | 1KB | failed | failed |" in report
    assert "1 case(s) failed" in report


# 1,000 requests a second each: ab is far from a core's worth of work, so
# the baseline measures nginx, not the load generator, on any machine (a
# baseline that measured ab makes the req/s ratio a bound, never judged).
PACED = {"http {": "http {\n    limit_req_zone $server_port zone=paced:1m rate=1000r/s;",
         "alias /data/files/;": "alias {files}/; limit_req zone=paced burst=50;"}


@pytest.fixture
def two_paced_nginx():
    yield from serving_twice(PACED)


def test_headline_rounds_go_on_until_the_interval_is_narrow_then_one_more(two_paced_nginx, tmp_path):
    """Two real nginx, paced: the baseline and a path. The headline case
    runs at least MIN_ROUNDS rounds and stops once the path's interval is
    within the width, and each ratio is the one the recorded windows give;
    a budget already spent stops after one round, with no interval."""
    first, second = two_paced_nginx
    cfg = from_env({"BENCH_TARGETS": "nginx-static b", "BENCH_DURATION": "1", "BENCH_WARMUP": "1",
                    "BENCH_REPETITIONS": "1", "BENCH_TARGET_WIDTH": "2", "BENCH_CONCURRENCY": "2",
                    "BENCH_MIN_REQUESTS": "0", "CADVISOR_URL": ""})
    targets = [TargetResult("nginx-static", first.url, True), TargetResult("b", second.url, True)]
    results = Results(run_id="w", started_at="s", targets=targets, status="complete")
    timer = Timer(cfg, tmp_path, results, None, 1.0, Progress(60))
    f = {"name": "1KB.bin", "size": 1024}

    runs = time_rounds(timer, targets, [(f, 2)], headline=2)
    base, path = (next(r for r in runs if r.target == t) for t in ("nginx-static", "b"))
    assert not any(LOADGEN_BOUND in r["flags"] for r in base.repetitions), base.repetitions
    assert len(path.repetitions) == len(base.repetitions) == MIN_ROUNDS
    (row,) = results.rounds["rows"]
    assert results.rounds["stopped"] == "every interval within the width" and row["converged_at"] == MIN_ROUNDS
    logs = [math.log(p["rps"] / b["rps"]) for p, b in zip(path.repetitions, base.repetitions)]
    again = ratio_of(logs, "rps", level=QUANTILE_LEVEL)  # it stopped on its width: the inflated interval
    assert (row["rps"]["ratio"], row["rps"]["low"], row["rps"]["high"]) == (again.ratio, again.low, again.high)
    assert row["rps"]["low"] <= row["rps"]["ratio"] <= row["rps"]["high"] and row["rps"]["width"] <= 2
    orders = results.schedule["orders"]["1KB.bin c=2"]
    assert orders == [round_order(["nginx-static", "b"], "w:1KB.bin c=2", i) for i in range(1, len(orders) + 1)]

    runs = time_rounds(timer, targets, [(f, 2)], headline=2, deadline=time.monotonic())
    assert results.rounds["stopped"] == "budget" and results.rounds["rounds"] == 1
    assert all(len(r.repetitions) == 1 for r in runs)
    assert results.rounds["rows"][0]["rps"]["low"] is None
