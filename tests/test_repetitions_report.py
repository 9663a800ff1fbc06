"""Timed repetitions, their spread, ab -k against wrk, latency at a fixed
rate, the sweep, the plan of a run: in the results model and report.md.
Every figure comes from real captured outputs: tests/fixtures/repetitions
(three 2 s repetitions of one case by ab, ab -k and wrk, with each tool's own
CPU time and wall clock) and tests/fixtures/vegeta."""
import json
import math
import statistics
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from bench.benchmark.cases import case_seconds, few_rounds
from bench.benchmark.phase import Scope
from bench.benchmark.phases import planned_seconds
from bench.report.markdown import render_markdown
from bench.results import (Comparison, OpenLoop, Results, SweepPoint, TargetResult, ToolResult, WorkingSet,
                           repeated_run)
from bench.settings import from_env
from bench.measure.stats import NOISY_WIDTH, TOOLS_DISAGREE
from bench.clients.timing import Measurement, _seconds, ab_measurement, vegeta_measurement, wrk_measurement
from bench.measure.usage import LOADGEN_BOUND, tool_bound
from bench.clients.vegeta_output import VegetaOutputError, parse as parse_vegeta

FIXTURES = Path(__file__).parent / "fixtures" / "repetitions"
VEGETA = Path(__file__).parent / "fixtures" / "vegeta"
AB = Path(__file__).parent / "fixtures" / "ab"
RUNS = json.loads((FIXTURES / "loadgen-runs.json").read_text())


def ab_rep(name: str, keepalive: bool = False) -> Measurement:
    r = RUNS[name]
    return ab_measurement((FIXTURES / f"{name}.txt").read_text(), (FIXTURES / f"{name}.csv").read_text(),
                          keepalive, r["cpu_seconds"], f"{name}.txt", r["started_ns"], r["ended_ns"])


def wrk_rep(name: str) -> Measurement:
    r = RUNS[name]
    return wrk_measurement((FIXTURES / f"{name}.txt").read_text(), 1, r["cpu_seconds"], f"{name}.txt",
                           r["started_ns"], r["ended_ns"])


def as_rep(m: Measurement) -> dict:
    return {**asdict(m), "cpu": None, "flags": [], "cpu_window": None}


def plain_reps() -> list[dict]:
    return [as_rep(ab_rep(f"nginx-1KB-c5-r{i}")) for i in (1, 2, 3)]


def test_timed_ab_runs_parse_with_their_wall_clock_and_cpu():
    for i in (1, 2, 3):
        m = ab_rep(f"nginx-1KB-c5-r{i}")
        assert m.seconds == pytest.approx(2.0, abs=0.1) and m.requests > 1000  # -t 2, not a request count
        assert m.failed == 0 and m.p50_ms <= m.p90_ms <= m.p99_ms <= m.max_ms
        assert m.wall_seconds >= m.seconds  # the process outlives ab's own timer
        assert 0 < m.loadgen_cores <= m.threads  # one thread's CPU over wall time: never above one core


def test_the_tool_bound_flag_comes_from_cpu_over_wall_time():
    m = ab_rep("nginx-1KB-c5-r1")
    # ab's own timer is shorter than the process: over it, the same CPU would read higher
    assert m.loadgen_cpu_seconds / m.seconds > m.loadgen_cores
    assert tool_bound(m.loadgen_cores, 1, 1.0) == (m.loadgen_cores >= 0.9)
    assert tool_bound(m.loadgen_cores, 1, m.loadgen_cores / 0.9)  # a quota just above its use


def test_a_row_is_the_median_repetition_with_its_half_range():
    reps = plain_reps()
    run = repeated_run("nginx-static", "1KB.bin", 1024, 5, reps, 2.0)
    rates = sorted(r["rps"] for r in reps)
    row = next(r for r in reps if r["rps"] == rates[1])
    assert (run.rps, run.p99_ms, run.requests, run.raw_output) == (row["rps"], row["p99_ms"], row["requests"],
                                                                   row["raw_output"])
    assert run.spread["half_range"] == pytest.approx((rates[2] - rates[0]) / 2 / rates[1], abs=1e-4)
    mad = sorted(abs(r - rates[1]) for r in rates)[1] / rates[1]
    assert run.spread["mad"] == pytest.approx(mad, abs=1e-4)
    logs = [math.log(r) for r in rates]
    width = math.exp(4.3027 * statistics.stdev(logs) / math.sqrt(3))  # t(0.975, 2 df)
    assert run.spread["width"] == pytest.approx(width, rel=1e-3)
    assert run.noisy == (width > NOISY_WIDTH) == ("noisy" in run.flags)
    assert run.ok and run.failed == 0 and run.duration_s == 2.0


def comparison() -> Comparison:
    ab_k = [as_rep(ab_rep(f"nginx-1KB-c5-abk-r{i}", keepalive=True)) for i in (1, 2, 3)]
    wrk = [as_rep(wrk_rep(f"nginx-1KB-c5-wrk-r{i}")) for i in (1, 2, 3)]
    return Comparison("nginx-static", "1KB.bin", 1024, 5, ToolResult.of(ab_k), ToolResult.of(wrk))


def test_comparison_takes_each_tools_median_repetition():
    c = comparison()
    wrk = sorted(r["rps"] for r in c.wrk.repetitions)
    assert c.wrk.rps == wrk[1]
    assert c.difference == pytest.approx(abs(c.ab_keepalive.rps - c.wrk.rps) / ((c.ab_keepalive.rps + c.wrk.rps) / 2))
    assert c.disagree == (c.difference > TOOLS_DISAGREE)


def test_vegeta_report_parses_latency_rate_and_failures():
    ok = parse_vegeta((VEGETA / "nginx-1KB-rate200.json").read_text())
    assert ok.requests == 400 and ok.successes == 400 and ok.rate == pytest.approx(200, rel=0.01)
    assert 0 < ok.p50_ms <= ok.p90_ms <= ok.p99_ms <= ok.max_ms
    missing = vegeta_measurement((VEGETA / "nginx-404-rate50.json").read_text(), 50)
    assert (missing.failed, missing.refused, missing.rps, missing.status_codes) == (0, 50, 0, {"404": 50})
    no_answer = vegeta_measurement((VEGETA / "refused-rate20.json").read_text(), 20)
    assert no_answer.failed == no_answer.requests > 0 and no_answer.refused == 0
    refused = parse_vegeta((VEGETA / "refused-rate20.json").read_text())
    assert refused.successes == 0 and "connection refused" in refused.errors[0]
    with pytest.raises(VegetaOutputError):
        parse_vegeta('{"latencies": {}}')


def test_a_slow_case_runs_longer_to_hold_its_minimum_of_requests():
    cfg = from_env({"BENCH_TARGETS": "a", "BENCH_DURATION": "4", "BENCH_MIN_REQUESTS": "200"})
    fast = replace(ab_rep("nginx-1KB-c5-r1"), rps=10000.0)
    assert case_seconds(cfg, fast, 5) == 4
    assert case_seconds(cfg, replace(fast, rps=20.0), 5) == 10  # 200 requests at 20/s
    assert case_seconds(cfg, replace(fast, rps=1.0), 5) == 16   # at most 4 x BENCH_DURATION
    assert case_seconds(cfg, None, 5) == 4


def test_a_slow_case_at_high_concurrency_runs_for_rounds_of_its_clients():
    """100 clients at 40 answers/s: 5 rounds are 500 requests, 12.5 s."""
    cfg = from_env({"BENCH_TARGETS": "a", "BENCH_DURATION": "4", "BENCH_MIN_REQUESTS": "200"})
    slow = replace(ab_rep("nginx-1KB-c5-r1"), rps=40.0)
    assert case_seconds(cfg, slow, 5) == 5      # 200 requests
    assert case_seconds(cfg, slow, 100) == 13   # 5 x 100 requests
    assert few_rounds(499, 100) and not few_rounds(500, 100)


def test_a_warm_up_that_completed_nothing_gives_the_longest_stretch():
    """Captured: ab -t 1 -c 100 on 1 MB through gridfs-fuse stopped with
    every answer still arriving; ab then prints no rates."""
    cfg = from_env({"BENCH_TARGETS": "a", "BENCH_DURATION": "4", "BENCH_MIN_REQUESTS": "200"})
    text = (AB / "fuse-1MB-c100-none-completed.txt").read_text()
    warm = ab_measurement(text, None, expected_size=1048576)
    assert warm.requests == 0 and warm.rps == 0 and warm.failed == 0
    assert case_seconds(cfg, warm, 100) == 16


def scope(targets: int, files: int) -> Scope:
    return Scope([TargetResult(f"t{i}", f"http://t{i}", True) for i in range(targets)],
                 [{"name": f"f{i}.bin", "size": 1} for i in range(files)], None, "20261123T040000Z")


def test_the_plan_of_a_run_counts_every_tool_run():
    cfg = from_env({"BENCH_TARGETS": "a b", "BENCH_DURATION": "4", "BENCH_WARMUP": "2", "BENCH_REPETITIONS": "3",
                    "BENCH_PROFILE": "full", "BENCH_CPU_DESIGN": "rounds",
                    "BENCH_TOOLS": "ab wrk", "BENCH_CONCURRENCY": "5 100", "BENCH_SWEEP": "off",
                    "BENCH_OPEN_LOOP": "0.5", "BENCH_OPEN_LOOP_SECONDS": "5"})
    # per target and file: 2 levels x (2 + 3 rounds x (1 + 4)) + ab -k and wrk 3 x (2 + 2 x 4) + open loop at
    # most 5, plus overheads
    bare = 2 * 3 * (2 * (2 + 15) + 30 + 5)
    assert bare < planned_seconds(cfg, scope(2, 3)) < bare * 1.3
    quick = from_env({"BENCH_TARGETS": "a", "BENCH_PROFILE": "quick"})
    # the quick look: under three minutes for eight paths, start-up included
    assert planned_seconds(quick, scope(8, 3)) < 150


def test_ab_is_given_whole_seconds():
    # ab reads -t with atoi: "0.5" would be 0, no time limit at all
    assert [_seconds(s) for s in (0.4, 1, 2.5, 10.2)] == ["1", "1", "2", "10"]


def results(**extra) -> Results:
    return Results(run_id="20261123T040000Z", started_at="2026-11-23T04:00:00+00:00",
                   parameters={"BENCH_CONCURRENCY": "5"},
                   environment={"server": {"product": "MongoDB", "version": "7.0.14"}},
                   targets=[TargetResult("nginx-static", "http://nginx-static:8080", True)],
                   runs=[repeated_run("nginx-static", "1KB.bin", 1024, 5, plain_reps(), 2.0)],
                   timing={"repetitions": 3, "duration_s": 2.0, "tools": ["ab", "wrk"], "sweep_duration_s": 1.0,
                           "planned_seconds": 40.0, "actual_seconds": 44.0},
                   phases={"timed cases": 44.0}, status="complete", **extra)


def test_report_quotes_the_median_repetition_with_a_half_range():
    r = results()
    report = render_markdown(r)
    run = r.runs[0]
    assert f"| 1KB | {run.rps:.0f} ±{run.spread['half_range']:.0%}" in report
    assert f"{run.spread['min']:.0f}–{run.spread['max']:.0f}" in report
    assert "expected to take 40 s from the settings and took 44 s" in report


def test_agreement_counts_only_cases_with_no_tool_at_its_limit():
    c = comparison()
    bound = replace(comparison(), wrk=replace(c.wrk, flags=[LOADGEN_BOUND]))
    report = render_markdown(results(comparisons=[c, bound]))
    agree = int(not c.disagree)
    assert f"{agree} of 1 cases with neither tool at its CPU limit agree within 10%; 1 more had a tool" in report
    assert "⚑ `loadgen-bound`" in report


def section(report: str, title: str) -> str:
    """One section of report.md: its heading to the next."""
    return report.split(f"\n## {title}")[1].split("\n## ")[0]


def test_no_table_shows_wrks_percentiles_as_latency():
    """wrk's mean and percentiles count samples it adds for slow answers
    (results.CORRECTED_LATENCY_TOOLS): not its answers' own. Neither table
    timed by wrk shows them (the tool check, the working set), nor sets ab
    -k's closed-loop ones beside them as the same thing; each says why."""
    c = comparison()
    wrk = [as_rep(wrk_rep(f"nginx-1KB-c5-wrk-r{i}")) for i in (1, 2, 3)]
    ws = WorkingSet("3x1KB", 3, 3072, 5, runs=[repeated_run("nginx-static", "set 3x1KB", 1024, 5, wrk, 2.0)])
    report = render_markdown(results(comparisons=[c], working_set=ws))
    why = "wrk's percentiles are corrected for coordinated omission, not its answers' own"
    tools = section(report, "ab -k against wrk")
    assert "| target | size | concurrency | ab -k req/s | wrk req/s | difference | failed | refused |" in tools
    assert why in tools and not [t for t in (c.ab_keepalive, c.wrk) if f"{t.p99_ms:.2f}" in tools]
    working = section(report, "Working set")
    assert ws.runs[0].ok and "| nginx-static |" in working and why in working
    assert "p50 / p99" not in working and f"{ws.runs[0].p99_ms:.2f}" not in working


def test_latency_at_a_fixed_rate_in_the_headline_and_its_table():
    loop = OpenLoop("nginx-static", "1KB.bin", 1024, 200.0, sent_rate=200.5, requests=400, p50_ms=0.43,
                    p90_ms=0.56, p99_ms=1.25, max_ms=3.3, raw_output="x.json")
    report = render_markdown(results(open_loop=[loop]))
    assert "1.25 @ 200/s" in report.split("## Requests per second")[0]
    # written before the interval and p99.9 were kept: they read "-" and 0
    assert "| nginx-static | 1KB | 200 | 200.5 | 400 | 0.43 | 1.25 | - | 0.00 | 3.3 |" in report
    failed = render_markdown(results(open_loop=[replace(loop, status="failed", error="vegeta exited with 1")]))
    assert "| nginx-static | 1KB | 200 | failed |" in failed


def test_sweep_table_and_its_flags():
    points = [SweepPoint("nginx-static", "1KB.bin", 1024, c, tool, 100, 0, rps, 1.0, 2.0, 0.5, None,
                         [LOADGEN_BOUND] if c == 250 else [])
              for c, rps in ((1, 3000.0), (250, 9000.0)) for tool in ("ab", "wrk")]
    report = render_markdown(results(sweep=points))
    assert "| nginx-static | 1KB | ab | 3000 | 9000 ⚑ |" in report
    assert "One run per level of 1 s" in report
