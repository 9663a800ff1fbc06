"""The rounds' ratios (bench.measure.rounds): paired by round, the t
interval against scipy's, the baseline's bound, the stopping rule's
coverage simulated, and the words the report prints."""
import math
import random
from statistics import fmean, stdev

import pytest
from scipy import stats

from bench.benchmark.schedule import round_order
from bench.measure.rounds import (CPU, LEVEL, MIN_ROUNDS, QUANTILE_LEVEL, RPS, apart, baseline_bound, converged,
                                  flagged_baseline, mean_positions, paired_logs, ratio_of, ratios)
from bench.measure.usage import CORE_SATURATED, LOADGEN, LOADGEN_BOUND
from bench.report.headline import ratio_words


def window(round_, rps, cpu_ms=None, db_ms=None, target="p", flags=()):
    cpu = {}
    if cpu_ms is not None:
        cpu[target] = {"cpu_ms_per_request": cpu_ms}
        cpu[LOADGEN] = {"cpu_ms_per_request": 9.0}  # never part of a total
    if db_ms is not None:
        cpu["mongo"] = {"cpu_ms_per_request": db_ms}
    return {"round": round_, "rps": rps, "cpu": cpu, "flags": list(flags)}


def test_ratios_pair_windows_by_round_and_skip_a_round_either_missed():
    base = [window(1, 100, 1.0, target="b"), window(2, 200, 2.0, target="b"), window(4, 100, 1.0, target="b")]
    path = [window(1, 50, 3.0, 1.0), window(2, 100, 6.0, 2.0), window(3, 70, 3.0, 1.0)]
    assert paired_logs(path, base, RPS, "p", "b") == [math.log(0.5), math.log(0.5)]
    found = ratios(path, base, "p", "b")
    assert found[RPS].ratio == 0.5 and found[RPS].rounds == 2 and found[RPS].low is None
    assert found[CPU].ratio == 3.0
    assert found["cpu_total"].ratio == 4.0  # the path with its database, never the load generator


@pytest.mark.parametrize("n", [6, 9, 20])
def test_the_interval_is_the_t_interval_of_the_log_ratios(n):
    rng = random.Random(n)
    logs = [rng.gauss(-1.0, 0.1) for _ in range(n)]
    found = ratio_of(logs, RPS)
    half = stats.t.ppf(1 - (1 - LEVEL) / 2, n - 1) * stdev(logs) / math.sqrt(n)
    assert found.ratio == pytest.approx(math.exp(fmean(logs)), abs=1e-4)
    assert found.low == pytest.approx(math.exp(fmean(logs) - half), rel=2e-3)
    assert found.high == pytest.approx(math.exp(fmean(logs) + half), rel=2e-3)
    assert found.width == pytest.approx(math.exp(half), rel=2e-3)
    assert ratio_of(logs[:MIN_ROUNDS - 1], RPS).low is None  # no interval below MIN_ROUNDS
    wider = ratio_of(logs, RPS, level=QUANTILE_LEVEL)  # a row stopped on its width
    assert wider.width == pytest.approx(math.exp(stats.t.ppf(1 - (1 - QUANTILE_LEVEL) / 2, n - 1) * stdev(logs)
                                                 / math.sqrt(n)), rel=2e-3)
    assert wider.width > found.width


def test_stopping_on_width_keeps_the_coverage():
    """The run's rule, simulated: rounds from MIN_ROUNDS until the interval is
    within x/÷1.10, at most 30; the interval then covers the truth about 95%
    of the time at this machine's spreads."""
    rng = random.Random(7)
    for sd in (0.05, 0.12, 0.15):
        covered, trials = 0, 1500
        for _ in range(trials):
            logs = []
            while len(logs) < 30:
                logs.append(rng.gauss(0.0, sd))
                found = ratio_of(logs, RPS, level=QUANTILE_LEVEL)
                if found.low is not None and found.within(1.10):
                    break
            covered += found.low <= 1.0 <= found.high
        assert covered / trials >= 0.935, (sd, covered / trials)  # 95% less the simulation's own +-1.1% (2 sd)


@pytest.mark.parametrize("budget", [6, 8])
def test_rows_the_budget_stopped_keep_the_coverage_at_the_plain_level(budget):
    """The run's rule with a budget of `budget` rounds: a row stopped on its
    width has the 96% interval, one the budget stopped the 95% one. Those
    the budget stopped were never caught narrow: they cover at least 95%,
    and all rows together about 95%."""
    rng = random.Random(budget)
    for sd in (0.08, 0.15, 0.2):
        covered, trials, late_covered, late = 0, 1500, 0, 0
        for _ in range(trials):
            logs, narrow = [], False
            while len(logs) < budget and not narrow:
                logs.append(rng.gauss(0.0, sd))
                found = ratio_of(logs, RPS, level=QUANTILE_LEVEL)
                narrow = found.low is not None and found.within(1.10)
            if not narrow:
                found = ratio_of(logs, RPS)
                late += 1
                late_covered += found.low <= 1.0 <= found.high
            covered += found.low <= 1.0 <= found.high
        assert covered / trials >= 0.935, (sd, covered / trials)
        assert late > 100 and late_covered / late >= 0.94, (sd, late, late_covered / max(late, 1))


def test_a_baseline_that_measured_the_load_generator_makes_the_ratio_a_bound_not_judged():
    base = [window(i, 1000, 1.0, target="b", flags=[LOADGEN_BOUND] if i != 3 else []) for i in range(1, 7)]
    path = [window(i, 500 + 200 * (i % 2), 2.0) for i in range(1, 7)]
    assert baseline_bound(base) == LOADGEN_BOUND and baseline_bound(base[2:3]) is None
    # one repetition's figure (no rounds): either flag marks a ratio over it
    assert flagged_baseline([LOADGEN_BOUND]) and flagged_baseline([CORE_SATURATED, "noisy"])
    assert not flagged_baseline(["noisy"]) and not flagged_baseline([])
    found = ratios(path, base, "p", "b")
    assert found[RPS].bound == LOADGEN_BOUND and found[CPU].bound is None
    assert not found[RPS].within(1.10) and found[CPU].within(1.10)
    assert converged(found, 1.10)  # the req/s bound is not judged; the CPU ratio is, and is narrow
    assert ratio_words(found[RPS].to_dict()).startswith("≤ ")


def test_the_report_says_what_each_ratio_rests_on():
    assert ratio_words({"ratio": 0.1551, "low": 0.14, "high": 0.171, "rounds": 8}) == "0.16 [0.14, 0.17] (8)"
    assert ratio_words({"ratio": 0.5, "low": None, "high": None, "rounds": 3}) == "0.50 (3, no interval)"
    assert ratio_words(None, 0.25) == "0.25" and ratio_words(None) == "-"
    assert apart({"low": 0.5, "high": 0.6}, {"low": 0.7, "high": 0.8})
    assert not apart({"low": 0.5, "high": 0.75}, {"low": 0.7, "high": 0.8}) and not apart({"low": None}, None)


def test_round_orders_are_drawn_again_from_the_seed_and_positions_even_out():
    names = ["nginx-static", "a", "b", "c", "d", "e", "f", "g"]
    orders = {"1KB.bin c=100": [round_order(names, "run:1KB.bin c=100", r) for r in range(1, 201)]}
    assert orders["1KB.bin c=100"][0] == round_order(names, "run:1KB.bin c=100", 1)
    assert len({tuple(o) for o in orders["1KB.bin c=100"]}) > 150  # fresh each round
    positions = mean_positions(orders)
    assert set(positions) == set(names) and all(abs(p - 4.5) < 0.6 for p in positions.values()), positions


def test_the_report_prints_each_headline_ratio_with_what_it_rests_on():
    """results/example's first three rounds, with a rounds' record derived
    here: the headline and the Rounds section, in report.md and index.html,
    print the record's ratios (three rounds: no interval yet)."""
    from pathlib import Path

    from bench.report.headline import headline_rows
    from bench.report.html import render_html
    from bench.report.markdown import render_markdown
    from bench.results import Results

    results = Results.load(Path(__file__).resolve().parent.parent / "results" / "example" / "results.json")
    top = max(r.concurrency for r in results.runs)
    rows = []
    for run in results.runs:
        run.repetitions = run.repetitions[:3]
        for i, rep in enumerate(run.repetitions, 1):
            rep["round"] = i
    for run in results.runs:
        base = results.run_for("nginx-static", run.file, top)
        if run.concurrency == top and run.target != "nginx-static" and run.ok:
            found = ratios(run.repetitions, base.repetitions, run.target, "nginx-static")
            rows.append({"target": run.target, "file": run.file, "concurrency": top, "headline": True,
                         "rounds": len(run.repetitions), "converged_at": None,
                         **{m: r.to_dict() for m, r in found.items()}})
    results.rounds = {"rounds": 3, "stopped": "budget", "target_width": 1.1, "rows": rows,
                      "estimator": "geometric mean of the rounds' ratios"}
    report, page = render_markdown(results), render_html(results)
    row = next(r for r in rows if r["target"] == "flask" and r["rps"].get("bound") is None)
    flask = next(h for h in headline_rows(results) if (h.target, h.run.file) == ("flask", row["file"]))
    assert flask.rps_ratio == row["rps"]["ratio"] and flask.rps == row["rps"]
    words = ratio_words(row["rps"])
    assert words.endswith("(3, no interval)")
    assert f"| flask | {flask.store} | {flask.size} | {flask.run.rps:.0f} | {words}" in report
    assert "## Rounds" in report and "**not within x/÷1.1** (budget)" in report
    assert words in page and 'id="rounds"' in page


def test_the_exports_carry_each_ratio_with_its_interval():
    from pathlib import Path

    from bench.report.exports import bencher, github_benchmark, rows as export_rows
    from bench.results import Results

    results = Results.load(Path(__file__).resolve().parent.parent / "results" / "example" / "results.json")
    top = max(r.concurrency for r in results.runs)
    run, base = (results.run_for(t, "1KB.bin", top) for t in ("flask-postgres", "nginx-static"))
    logs = [math.log(a["rps"] / b["rps"]) for a, b in zip(run.repetitions, base.repetitions)][:6]  # six rounds
    found = ratio_of(logs, RPS).to_dict()
    results.rounds = {"rows": [{"target": run.target, "file": run.file, "concurrency": top, "headline": True,
                                "rounds": 6, "rps": found}]}
    (row,) = [r for r in export_rows(results)
              if (r["target"], r["file"], r["concurrency"], r["tool"]) == (run.target, run.file, top, "ab")]
    assert (row["rps_ratio_to_nginx_static"], row["rps_ratio_low"], row["rps_ratio_high"], row["rps_ratio_rounds"]) == (
        found["ratio"], found["low"], found["high"], 6)
    measure = bencher(results)[f"flask-postgres/1KB/c={top}/ab"]["ratio-to-nginx-static"]
    assert (measure["lower_value"], measure["upper_value"]) == (found["low"], found["high"])
    assert any(e["name"].endswith("ratio to nginx-static") and str(found["low"]) in e["range"]
               for e in github_benchmark(results)[0])
