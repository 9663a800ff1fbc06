"""Repetitions, their spread, ab -k against wrk, the sweep and the run's
phases: in the results model, results.json and report.md. Every figure comes
from real captured outputs (tests/fixtures/repetitions: three repetitions of
one case by ab, ab -k and wrk, with each tool's own CPU time)."""
import json
import statistics
from pathlib import Path

import pytest

from bench.charts import sweep_chart
from bench.report import render_markdown
from bench.results import NOISY, Comparison, Results, SweepPoint, TargetResult, ToolResult, repeated_run
from bench.settings import SettingsError, from_env
from bench.stats import NOISY_SPREAD, TOOLS_DISAGREE, relative_difference
from bench.timing import ab_measurement, wrk_measurement
from bench.usage import LOADGEN_BOUND, LOADGEN_BOUND_SHARE, tool_bound

FIXTURES = Path(__file__).parent / "fixtures" / "repetitions"
CPU = json.loads((FIXTURES / "loadgen-cpu-seconds.json").read_text())
REQUESTS = 2000


def ab_rep(name: str, keepalive: bool = False):
    return ab_measurement((FIXTURES / f"{name}.txt").read_text(), (FIXTURES / f"{name}.csv").read_text(),
                          REQUESTS, keepalive, CPU[name], f"{name}.txt")


def wrk_rep(name: str):
    return wrk_measurement((FIXTURES / f"{name}.txt").read_text(), 1, CPU[name], f"{name}.txt")


def plain_reps():
    return [ab_rep(f"nginx-1KB-c5-r{i}") for i in (1, 2, 3)]


def comparison(wrk_reps=(1, 2, 3)) -> Comparison:
    ab_k = [ab_rep(f"nginx-1KB-c5-abk-r{i}", keepalive=True) for i in (1, 2, 3)]
    wrk = [wrk_rep(f"nginx-1KB-c5-wrk-r{i}") for i in wrk_reps]
    return Comparison("nginx-static", "1KB.bin", 1024, 5, ToolResult.of(ab_k), ToolResult.of(wrk))


def results(**extra) -> Results:
    return Results(run_id="20261122T040000Z", started_at="2026-11-22T04:00:00+00:00",
                   parameters={"BENCH_REPETITIONS": "3", "BENCH_TOOLS": "ab wrk", "BENCH_SWEEP_REQUESTS": "100"},
                   environment={"server": {"product": "MongoDB", "version": "7.0.14"}},
                   targets=[TargetResult("nginx-static", "http://nginx-static:8080", True)],
                   runs=[repeated_run("nginx-static", "1KB.bin", 1024, 5, REQUESTS, plain_reps())], **extra)


def test_measurements_read_every_percentile_and_the_tools_cpu():
    ab = ab_rep("nginx-1KB-c5-r1")
    csv = dict(line.split(",") for line in (FIXTURES / "nginx-1KB-c5-r1.csv").read_text().splitlines()[1:])
    assert (ab.p50_ms, ab.p90_ms, ab.p99_ms, ab.max_ms) == tuple(float(csv[p]) for p in ("50", "90", "99", "100"))
    assert ab.requests == REQUESTS and ab.failed == 0 and ab.tool == "ab"
    assert ab.loadgen_cores == pytest.approx(CPU["nginx-1KB-c5-r1"] / ab.seconds)
    wrk = wrk_rep("nginx-1KB-c5-wrk-r1")
    assert wrk.tool == "wrk" and wrk.time_per_request_ms == pytest.approx(1000 / wrk.rps)
    assert wrk.max_ms >= wrk.p99_ms >= wrk.p90_ms >= wrk.p50_ms > 0
    assert ab_rep("nginx-1KB-c5-abk-r1", keepalive=True).tool == "ab -k"


def test_a_run_is_the_median_of_its_repetitions_with_their_spread():
    reps = plain_reps()
    run = repeated_run("nginx-static", "1KB.bin", 1024, 5, REQUESTS, reps)
    rps = [m.rps for m in reps]
    assert run.rps == statistics.median(rps)
    assert run.time_per_request_ms == statistics.median(m.time_per_request_ms for m in reps)
    assert run.p50_ms == statistics.median(m.p50_ms for m in reps)
    assert run.p99_ms == statistics.median(m.p99_ms for m in reps)
    assert run.requests == REQUESTS and run.failed == sum(m.failed for m in reps) == 0
    assert run.spread["rps"] == {"median": run.rps, "min": min(rps), "max": max(rps),
                                 "spread": round((max(rps) - min(rps)) / run.rps, 4),
                                 "noisy": (max(rps) - min(rps)) / run.rps > NOISY_SPREAD}
    # The raw output quoted is the repetition whose rate is the median.
    assert run.raw_output == next(m.raw_output for m in reps if m.rps == run.rps)
    assert [r["raw_output"] for r in run.repetitions] == [m.raw_output for m in reps]
    # Captured on a busy machine: the repetitions are far apart, so the case is noisy.
    assert run.noisy and run.flags == [NOISY]


def test_report_quotes_medians_with_spread_and_marks_noisy_cases():
    res = results()
    run = res.runs[0]
    md = render_markdown(res)
    tpr = run.spread["time_per_request_ms"]["spread"]
    assert f"| 1KB | {run.time_per_request_ms:.3f} **±{tpr:.0%} noisy** (0.174) |" in md
    assert f"| 1KB | {run.rps:.0f} **±{run.spread['rps']['spread']:.0%} noisy** (1.000) |" in md
    assert "Medians of 3 repetitions" in md
    rps = run.spread["rps"]
    assert f"| {rps['min']:.0f}–{rps['max']:.0f} ({rps['spread']:.1%}, noisy) |" in md
    assert "⚑" not in md  # nothing was loadgen-bound


def test_results_json_keeps_every_repetition_and_old_results_still_load(tmp_path):
    res = results(comparisons=[comparison()],
                  sweep=[SweepPoint("nginx-static", "1KB.bin", 1024, 5, "ab", 2000, 0, 8430.35, 0.5, 2.0, 0.45,
                                    "sweep-nginx-static-1KB-c5.txt")],
                  phases={"seed": 4.2, "verify": 1.0, "timed cases": 12.5})
    res.write_json(tmp_path / "results.json")
    data = json.loads((tmp_path / "results.json").read_text())
    assert len(data["runs"][0]["repetitions"]) == 3
    assert data["runs"][0]["spread"]["rps"]["median"] == res.runs[0].rps
    assert data["comparisons"][0]["difference"] == round(res.comparisons[0].difference, 4)
    assert len(data["comparisons"][0]["wrk"]["repetitions"]) == 3
    assert data["phases"] == {"seed": 4.2, "verify": 1.0, "timed cases": 12.5}
    assert Results.load(tmp_path / "results.json") == res

    old = res.to_dict()
    for key in ("comparisons", "sweep", "sweep_charts", "phases"):
        del old[key]
    for run in old["runs"]:
        del run["repetitions"], run["spread"]
    again = Results.from_dict(old)
    assert again.runs[0].repetitions == [] and again.runs[0].spread is None and not again.runs[0].noisy
    assert again.comparisons == [] and again.sweep == [] and again.phases == {}
    md = render_markdown(again)
    assert f"| 1KB | {again.runs[0].rps:.0f} (1.000) |" in md  # one measurement: no spread quoted
    assert "## ab -k against wrk" not in md and "## What this run cost" not in md


def test_agreement_of_ab_keepalive_and_wrk_is_shown_and_a_difference_flagged():
    c = comparison()
    a, w = c.ab_keepalive, c.wrk
    assert a.rps == statistics.median(ab_rep(f"nginx-1KB-c5-abk-r{i}", True).rps for i in (1, 2, 3))
    assert w.rps == statistics.median(wrk_rep(f"nginx-1KB-c5-wrk-r{i}").rps for i in (1, 2, 3))
    assert w.p90_ms == statistics.median(wrk_rep(f"nginx-1KB-c5-wrk-r{i}").p90_ms for i in (1, 2, 3))
    assert c.difference == relative_difference(a.rps, w.rps)
    md = render_markdown(results(comparisons=[c]))
    assert "## ab -k against wrk" in md
    # On the busy capture machine they were far apart: flagged.
    assert c.disagree and c.difference > TOOLS_DISAGREE
    assert (f"| nginx-static | 1KB | 5 | {a.rps:.0f} ±{a.spread['spread']:.0%} | {w.rps:.0f} "
            f"±{w.spread['spread']:.0%} | **{c.difference:.1%} differ** |") in md
    assert f"| {a.p50_ms:.2f} / {a.p90_ms:.2f} / {a.p99_ms:.2f} / {a.max_ms:.0f} |" in md
    assert "0 of 1 cases agree within 10%" in md


def test_agreeing_tools_are_not_flagged():
    """wrk's first repetition alone was within 10% of ab -k's median."""
    c = comparison(wrk_reps=(1,))
    assert c.difference < TOOLS_DISAGREE and not c.disagree
    md = render_markdown(results(comparisons=[c]))
    assert f"| {c.difference:.1%} |" in md and "1 of 1 cases agree" in md


def test_tool_bound_from_the_tools_own_cpu():
    reps = plain_reps()
    for m in reps:  # one thread, a whole core to itself: not at its limit when captured
        assert m.loadgen_cores < LOADGEN_BOUND_SHARE
        assert not tool_bound(m.loadgen_cpu_seconds, m.seconds, 1, 1.0)
    # The same CPU against a tenth of a core (LOADGEN_CPU_QUOTA=0.1) is the limit.
    assert all(tool_bound(m.loadgen_cpu_seconds, m.seconds, 1, 0.1) for m in reps)
    # wrk's threads each count as a core, up to the allowance.
    w = wrk_rep("nginx-1KB-c5-wrk-r1")
    assert tool_bound(w.loadgen_cpu_seconds, w.seconds, 2, 2.0) == (w.loadgen_cores >= 0.9 * 2)


def test_loadgen_bound_cells_are_marked_not_quoted_plainly():
    res = results()
    flask = repeated_run("flask", "1KB.bin", 1024, 5, REQUESTS, plain_reps()[:1])
    res.targets.append(TargetResult("flask", "http://flask:8080", True))
    res.runs.append(flask)
    res.runs[0].flags.append(LOADGEN_BOUND)  # the baseline: every ratio against it is marked
    c = comparison()
    c.wrk.flags.append(LOADGEN_BOUND)
    res.comparisons = [c]
    md = render_markdown(res)
    base = res.runs[0]
    assert f"| 1KB | {base.rps:.0f} **±{base.spread['rps']['spread']:.0%} noisy** (1.000) ⚑ | " \
           f"{flask.rps:.0f} ({flask.rps / base.rps:.3f}) ⚑ |" in md
    assert "⚑ loadgen-bound: the load generator was at its CPU limit" in md
    assert f"| {c.wrk.rps:.0f} ±{c.wrk.spread['spread']:.0%} ⚑ | **{c.difference:.1%} differ** ⚑ |" in md


def test_sweep_table_chart_and_phases(tmp_path):
    reps = plain_reps()
    points = [SweepPoint("nginx-static", "1KB.bin", 1024, c, "ab", m.requests, m.failed, m.rps, m.p50_ms,
                         m.p99_ms, round(m.loadgen_cores, 4), m.raw_output,
                         [LOADGEN_BOUND] if c == 25 else [])
              for c, m in zip((1, 5, 25), reps)]
    res = results(sweep=points, sweep_charts={"nginx-static": "sweep-nginx-static.png"},
                  phases={"seed": 3.1, "verify": 0.4, "conformance": 6.0, "timed cases": 20.2, "sweep": 5.5,
                          "charts": 1.2, "bench total": 33.5})
    md = render_markdown(res)
    assert "## Concurrency sweep (requests per second)" in md
    assert f"| nginx-static | 1KB | ab | {reps[0].rps:.0f} | {reps[1].rps:.0f} | {reps[2].rps:.0f} ⚑ |" in md
    assert "![nginx-static: requests per second against concurrency](sweep-nginx-static.png)" in md
    assert "One run per level of 100 requests" in md
    assert "| seed | 3.1 |" in md and "| bench total | 33.5 |" in md
    path = tmp_path / "sweep-nginx-static.png"
    assert sweep_chart(res, "nginx-static", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert not sweep_chart(res, "flask", tmp_path / "sweep-flask.png")
    assert not (tmp_path / "sweep-flask.png").exists()


GOOD = {"BENCH_TARGETS": "nginx-static", "BENCH_CONCURRENCY": "5", "BENCH_REQUESTS": "50"}


def test_settings_of_repetitions_tools_and_sweep():
    s = from_env(GOOD)
    assert (s.repetitions, s.tools, s.sweep, s.sweep_requests) == (3, ("ab",), (1, 5, 25, 100, 250), 200)
    s = from_env({**GOOD, "BENCH_TOOLS": "wrk ab", "BENCH_SWEEP": "25 1 5", "BENCH_REPETITIONS": "1"})
    assert (s.tools, s.sweep, s.repetitions) == (("ab", "wrk"), (1, 5, 25), 1)
    assert from_env({**GOOD, "BENCH_SWEEP": "off"}).sweep == ()
    for change, named in (({"BENCH_TOOLS": "wrk"}, "BENCH_TOOLS"), ({"BENCH_TOOLS": "ab siege"}, "BENCH_TOOLS"),
                          ({"BENCH_REPETITIONS": "0"}, "BENCH_REPETITIONS"), ({"BENCH_SWEEP": "1 x"}, "BENCH_SWEEP")):
        with pytest.raises(SettingsError, match=named):
            from_env({**GOOD, **change})
