"""The A/A calibration (bench.measure.calibration, tools/lab/change_calibrate.py):
every statistic against SciPy on random and edge inputs, the whole
summary against a hand-made set of A/A ab.json files, what an A/B page
finds to quote, and the tool's loop with tools/lab/change.py stood in for (no
Docker)."""
import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bench.benchmark.change import judge as judge_change
from bench.measure import calibration as cal
from bench.measure.paired import signed_rank_p

import change_calibrate
import change_gate
import gate_rule
from support.kept_runs import KEPT_CALIBRATION, kept_ab

MACHINE = {"cpu_model": "Test CPU", "host_cores": 2, "kernel": "6.1.0"}


# --- Kolmogorov-Smirnov ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [3, 5, 7, 12, 20, 33, 50, 80, 100])
def test_ks_against_the_uniform_equals_scipys_exact_test(n):
    rng = random.Random(n)
    for shape in (1.0, 1.0, 1.6, 3.0):  # uniform, and skewed so the p-values reach the tail
        values = [rng.random() ** shape for _ in range(n)]
        found, expected = cal.ks_uniform(values), stats.kstest(values, "uniform", method="exact")
        assert found["statistic"] == pytest.approx(expected.statistic, abs=1e-12)
        assert found["p"] == pytest.approx(expected.pvalue, abs=1e-6)


@pytest.mark.parametrize("n", [1, 2, 5, 20, 64, 100, 140, 150, 200])
def test_kolmogorovs_exact_distribution_equals_scipys_over_its_whole_range(n):
    # SciPy's own is exact to 140 values and an approximation beyond (Simard and L'Ecuyer): 1e-5 there
    tolerance = 1e-6 if n <= 140 else 1e-5
    for x in (0.2, 0.5, 0.8, 1.0, 1.2, 1.36, 1.63, 1.9, 2.3, 3.0):
        d = x / math.sqrt(n)
        if d < 1:
            assert cal.kolmogorov_cdf(n, d) == pytest.approx(stats.kstwo.cdf(d, n), abs=tolerance), (n, d)
    assert cal.kolmogorov_cdf(n, 0.4 / n) == 0.0 and cal.kolmogorov_cdf(n, 1.0) == 1.0


def test_beyond_200_values_the_limit_with_stephens_factor_holds_the_tail():
    for n in (201, 400, 1000):
        for x in (0.4, 0.6, 0.9, 1.2, 1.36, 1.5, 1.63, 1.9, 2.2):
            d = x / math.sqrt(n)
            exact = stats.kstwo.sf(d, n)
            assert 1 - cal.kolmogorov_cdf(n, d) == pytest.approx(exact, abs=5e-4 if exact < 0.1 else 1e-2), (n, x)


def test_ks_edge_inputs():
    # all at one value, at the ends, ties: as SciPy reads them
    for values in ([0.5] * 6, [0.0, 0.0, 1.0, 1.0, 1.0], [1.0] * 20, [0.25, 0.25, 0.75, 0.75], [1e-9, 0.5, 1 - 1e-9]):
        found, expected = cal.ks_uniform(values), stats.kstest(values, "uniform", method="exact")
        assert found["statistic"] == pytest.approx(expected.statistic, abs=1e-12)
        assert found["p"] == pytest.approx(expected.pvalue, abs=1e-6)
    assert cal.ks_uniform([0.1, 0.9]) is None  # below three runs: not judged


# --- chi-square, binomial, beta, Clopper-Pearson ---------------------------------------------------------------

@pytest.mark.parametrize("df", [1, 2, 3, 4, 7, 11, 19, 30, 59, 99])
def test_chi_square_tail_equals_scipys(df):
    for q in (0.0, 1e-6, 0.01, 0.3, 1.0, df * 0.5, df - 1e-3, float(df), df + 1.0, df * 2.0, 3.0 * df + 10,
              100.0, 400.0):
        assert cal.chi2_sf(q, df) == pytest.approx(stats.chi2.sf(q, df), rel=1e-9, abs=1e-15), q


def test_binomial_cdf_equals_scipys():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 300)
        k, p = rng.randint(-1, n + 1), rng.choice([0.0, 1.0, rng.random(), rng.random() ** 6])
        assert cal.binomial_cdf(k, n, p) == pytest.approx(stats.binom.cdf(k, n, p), rel=1e-9, abs=1e-13)


@pytest.mark.parametrize("a, b", [(1, 1), (1, 20), (20, 1), (3, 18), (12, 400), (399, 2)])
def test_beta_quantile_equals_scipys(a, b):
    for q in (1e-6, 0.025, 0.2, 0.5, 0.8, 0.975, 1 - 1e-6):
        assert cal.beta_quantile(q, a, b) == pytest.approx(stats.beta.ppf(q, a, b), abs=1e-10)
    with pytest.raises(ValueError):
        cal.beta_quantile(0.5, 0, 3)


@pytest.mark.parametrize("trials", [1, 2, 6, 20, 80, 120, 500])
def test_clopper_pearson_equals_scipys_exact_interval(trials):
    for successes in sorted({0, 1, 2, trials // 3, trials - 1, trials}):
        if 0 <= successes <= trials:
            low, high = cal.clopper_pearson(successes, trials)
            expected = stats.binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="exact")
            assert (low, high) == pytest.approx((expected.low, expected.high), abs=1e-9)
    # 0 of 6, the one-run calibration a page used to quote: up to 46%
    assert cal.clopper_pearson(0, 6)[1] == pytest.approx(0.4593, abs=1e-4)


# --- Cochran's Q, I², tau ---------------------------------------------------------------------------------------

def test_heterogeneity_equals_the_textbook_formulas_and_scipys_chi_square():
    rng = random.Random(5)
    for k in (2, 3, 5, 20, 40):
        y = np.array([rng.gauss(0.0, 0.03) for _ in range(k)])
        se = np.array([rng.uniform(0.01, 0.05) for _ in range(k)])
        w = 1 / se ** 2
        pooled = (w * y).sum() / w.sum()
        q = (w * (y - pooled) ** 2).sum()
        tau2 = max(0.0, (q - (k - 1)) / (w.sum() - (w ** 2).sum() / w.sum()))
        found = cal.heterogeneity(list(y), list(se))
        assert found["q"] == pytest.approx(q, rel=1e-12) and found["df"] == k - 1
        assert found["p"] == pytest.approx(stats.chi2.sf(q, k - 1), rel=1e-9)
        assert found["i2"] == pytest.approx(max(0.0, (q - (k - 1)) / q), abs=1e-12)
        assert found["tau"] == pytest.approx(math.sqrt(tau2), abs=1e-12)
        assert found["pooled"] == pytest.approx(pooled, abs=1e-15)
    # identical estimates: no heterogeneity at all
    same = cal.heterogeneity([0.01, 0.01, 0.01], [0.02, 0.03, 0.04])
    assert same["q"] == pytest.approx(0.0, abs=1e-20) and same["i2"] == 0.0 and same["p"] == 1.0
    assert cal.heterogeneity([0.01], [0.02]) is None


def test_a_rows_se_comes_from_its_95_percent_interval():
    assert cal.se_of_interval(0.95, 1.05) == pytest.approx((math.log(1.05) - math.log(0.95)) / 3.92)
    assert cal.se_of_interval(None, None) is None and cal.se_of_interval(1.0, 1.0) is None


# --- randomised signed-rank p-values ---------------------------------------------------------------------------

def test_the_signed_rank_tail_gives_back_the_tests_p_and_scipys():
    rng = random.Random(11)
    for n in (6, 8, 12, 16):
        for _ in range(10):
            d = [rng.gauss(0.01, 0.05) for _ in range(n)]
            p, mass = cal.signed_rank_tail(d)
            assert p == pytest.approx(signed_rank_p(d), abs=1e-15)
            assert p == pytest.approx(stats.wilcoxon(d, method="exact").pvalue, rel=1e-9)
            assert 0 < mass <= p
    assert cal.signed_rank_tail([0.1] * 17) is None  # the normal approximation: nearly continuous


def test_with_tied_ranks_the_point_mass_is_enumerated():
    d = [0.1, 0.1, -0.1, 0.2, 0.3, 0.0, 0.3]
    p, mass = cal.signed_rank_tail(d)
    ranks = [2.0, 2.0, 2.0, 4.0, 5.5, 5.5]
    centre, observed = sum(ranks) / 2, 2.0 + 2.0 + 4.0 + 5.5 + 5.5
    sums = [sum(r for i, r in enumerate(ranks) if mask >> i & 1) for mask in range(64)]
    assert p == pytest.approx(signed_rank_p(d))
    assert mass == pytest.approx(sum(1 for t in sums if abs(abs(t - centre) - abs(observed - centre)) < 1e-9) / 64)


def test_randomised_p_values_of_an_unchanged_b_are_uniform_where_the_raw_ones_are_not():
    rng = random.Random(2)
    raw, randomised = [], []
    for i in range(1500):
        d = [rng.gauss(0.0, 0.1) for _ in range(8)]
        row = {"p": signed_rank_p(d), "log_ratios": d}
        raw.append(row["p"])
        randomised.append(cal.randomised_p(row, f"run{i}|1KB c=100|rps"))
        assert row["p"] - cal.signed_rank_tail(d)[1] <= randomised[-1] <= row["p"]
    assert stats.kstest(randomised, "uniform").pvalue > 0.01
    assert stats.kstest(raw, "uniform").pvalue < 1e-4  # 8 blocks: a grid of 1/256, an atom at 1
    # the same seed, the same value: a calibration reads the same twice
    row = {"p": signed_rank_p([0.1, -0.2, 0.3, 0.05, -0.07, 0.2]), "log_ratios": [0.1, -0.2, 0.3, 0.05, -0.07, 0.2]}
    assert cal.randomised_p(row, "a") == cal.randomised_p(row, "a") != cal.randomised_p(row, "b")
    # a row whose log-ratios do not give back its p keeps its p
    assert cal.randomised_p({"p": 0.5, "log_ratios": [0.1] * 8}, "x") == 0.5


# --- a hand-made calibration ------------------------------------------------------------------------------------

def row(case: str, metric: str, p: float, ratio: float, low: float | None, high: float | None,
        verdict: str = "inconclusive", n: int = 12) -> dict:
    return {"case": case, "metric": metric, "what": metric, "n": n, "p": p, "ratio": ratio, "low": low,
            "high": high, "verdict": verdict, "headline": verdict}


def aa(run_id: str, rows: list[dict], **over) -> dict:
    """An A/A ab.json as bench writes it, with only what a calibration reads:
    each case's 12 blocks counted, as planned."""
    cases = [{"file": f, "concurrency": 100, "error": "", "blocks": [
        {"block": i, "a": {}, "b": {}, "flags": [], "counted": True} for i in range(1, 13)]}
        for f in ("1KB.bin", "1MB.bin")]
    return {"run_id": run_id, "status": "complete", "kind": "A/A", "a": "flask", "b": "flask-b", "change": "",
            "blocks": 12, "threshold": 0.05, "design": "duet", "restart_twins": True, "machine": MACHINE,
            "cases": cases, "rows": rows, **over}


HAND = [  # run, 1 KB rps (p, ratio, low, high, verdict), 1 MB rps
    ("20990101T000000Z", (0.12, 1.010, 0.980, 1.040, "inconclusive"), (0.70, 0.990, 0.930, 1.050, "inconclusive")),
    ("20990101T001000Z", (0.55, 0.995, 0.970, 1.020, "no change"), (0.03, 1.080, 1.020, 1.150, "better")),
    ("20990101T002000Z", (0.91, 1.002, 0.975, 1.030, "no change"), (0.44, 1.020, 0.960, 1.090, "inconclusive")),
    ("20990101T003000Z", (0.33, 0.985, 0.955, 1.015, "inconclusive"), (0.81, 0.970, 0.900, 1.040, "inconclusive")),
    ("20990101T004000Z", (0.68, 1.006, 0.981, 1.032, "no change"), (0.26, 1.040, 0.970, 1.110, "inconclusive")),
]


def hand_runs() -> list[dict]:
    return [aa(run_id, [row("1KB c=100", "rps", *kb), row("1MB c=100", "rps", *mb)]) for run_id, kb, mb in HAND]


def test_a_hand_made_calibration_reads_as_scipy_and_numpy_read_it():
    runs = hand_runs()
    runs.insert(2, aa("20990101T001500Z", [], error="not timed: flask-b: connection refused"))
    runs.append(aa("20990101T005000Z", [row("1KB c=100", "rps", 0.5, 1.0, 0.9, 1.1)], status="interrupted"))
    broken = aa("20990101T006000Z", [row("1KB c=100", "rps", 0.4, 1.0, 0.98, 1.02),
                                     row("1MB c=100", "rps", 1.0, 1.0, None, None, n=0)])
    broken["cases"][1]["error"] = "block 1: wrk failed"
    runs.append(broken)
    summary = cal.summarise(runs, [{"attempt": 9, "run_id": None, "why": "no ab.json (tools/lab/change.py exited 2)"}])
    # every run is named: six measured, two not (with why), one gave nothing
    assert summary["runs"] == 9 and len(summary["measured"]) == 6
    assert [m["why"] for m in summary["not_measured"]] == [
        "no ab.json (tools/lab/change.py exited 2)", "not timed: flask-b: connection refused",
        "bench's run is interrupted"]
    assert summary["cases_not_measured"] == [{"run_id": "20990101T006000Z", "case": "1MB c=100", "metric": "rps",
                                              "why": "block 1: wrk failed"}]
    assert summary["settings"] == {"path": "flask", "files": ["1KB", "1MB"], "concurrency": [100], "blocks": 12,
                                   "design": "duet", "window": None, "restart_twins": True}
    by_case = {s["case"]: s for s in summary["case_metrics"]}
    kb, mb = by_case["1KB c=100"], by_case["1MB c=100"]
    assert kb["runs"] == 6 and mb["runs"] == 5
    for found, data in ((kb, [h[1] for h in HAND] + [(0.4, 1.0, 0.98, 1.02, "")]), (mb, [h[2] for h in HAND])):
        p = [d[0] for d in data]
        y = np.log([d[1] for d in data])
        se = (np.log([d[3] for d in data]) - np.log([d[2] for d in data])) / (2 * 1.96)
        # no log-ratios in these rows: the raw p-values are the randomised ones
        assert found["p"] == p and found["p_randomised"] == p
        assert found["ks"]["p"] == pytest.approx(stats.kstest(p, "uniform", method="exact").pvalue, abs=1e-6)
        assert found["ks"]["statistic"] == pytest.approx(stats.kstest(p, "uniform").statistic, abs=1e-12)
        w = 1 / se ** 2
        q = (w * (y - (w * y).sum() / w.sum()) ** 2).sum()
        assert found["heterogeneity"]["q"] == pytest.approx(q, rel=1e-9)
        assert found["heterogeneity"]["p"] == pytest.approx(stats.chi2.sf(q, len(y) - 1), rel=1e-9)
        assert found["heterogeneity"]["i2"] == pytest.approx(max(0.0, (q - len(y) + 1) / q), abs=1e-12)
        assert found["between_run_sd"] == pytest.approx(np.std(y, ddof=1), rel=1e-12)
        assert found["repeatability_pct"] == pytest.approx(280 * np.std(y, ddof=1), rel=1e-12)
    # the one "better" of an unchanged B: a false alarm, 1 of 11 case-metrics over the six runs
    assert mb["false_alarms"]["alarms"] == 1 and kb["false_alarms"]["alarms"] == 0
    expected = stats.binomtest(1, 11).proportion_ci(method="exact")
    assert summary["false_alarms"]["alarms"] == 1 and summary["false_alarms"]["rows"] == 11
    assert (summary["false_alarms"]["low"], summary["false_alarms"]["high"]) == pytest.approx(
        (expected.low, expected.high), abs=1e-9)
    assert summary["runs_with_alarm"]["alarms"] == 1 and summary["runs_with_alarm"]["rows"] == 6
    # 1 of 11 is above 5%: the calibration fails, and says why
    code, why = cal.judge(summary)
    assert code == cal.FAILS and len(why) == 1 and "1 false alarms of 11" in why[0]


def test_the_calibrations_exit():
    runs = hand_runs()
    for r in runs:
        for x in r["rows"]:
            x["verdict"] = "inconclusive"
    assert cal.judge(cal.summarise(runs)) == (cal.PASSES, [])
    # fewer than three runs measured: not measured (2)
    assert cal.judge(cal.summarise(runs[:2]))[0] == cal.NOT_MEASURED
    assert cal.judge(cal.summarise([aa("x", [], error="no B")] * 4))[0] == cal.NOT_MEASURED
    # p-values piled near 0 with nothing changed: not uniform (1)
    low = [aa(f"r{i}", [row("1KB c=100", "rps", 0.001 * (i + 1), 1.0, 0.99, 1.01)]) for i in range(8)]
    code, why = cal.judge(cal.summarise(low))
    assert code == cal.FAILS and "not uniform" in why[0] and "piled near 0" in why[0]
    # piled high (nginx-gridfs's 1 MB CPU per request, 2026-11-30: 19 of 20 above 0.36): the other side, named
    high = [aa(f"r{i}", [row("1KB c=100", "rps", 1 - 0.01 * i, 1.0, 0.99, 1.01)]) for i in range(8)]
    code, why = cal.judge(cal.summarise(high))
    assert code == cal.FAILS and "piled high" in why[0]


def test_a_run_of_other_settings_or_a_change_is_not_read_as_one_of_the_calibration():
    runs = hand_runs()
    runs.append(aa("20990101T009000Z", runs[0]["rows"], blocks=16))
    runs.append(aa("20990101T009100Z", runs[0]["rows"], kind="A/B", change="a CPU quota of 0.8 cores"))
    runs.append(aa("20990101T009200Z", runs[0]["rows"], machine={**MACHINE, "host_cores": 4}))
    summary = cal.summarise(runs)
    assert len(summary["measured"]) == 5
    assert [m["why"] for m in summary["not_measured"]] == [
        "settings differ from the first run's: blocks 16 (not 12)",
        "not an A/A run (kind 'A/B': a CPU quota of 0.8 cores)",
        f"another machine: {({**MACHINE, 'host_cores': 4})}"]


def test_a_case_that_counted_fewer_blocks_than_planned_is_left_out_as_the_gate_leaves_it():
    """Two of 12 blocks disturbed and not run again: the case has an
    interval, but the gate calls the run not measured (exit 2); the
    calibration leaves that case of that run out for the same reason, and
    its page says how many case-runs went so."""
    runs = hand_runs()
    short = runs[1]
    for blk in short["cases"][0]["blocks"][:2]:
        blk["counted"] = False
    summary = cal.summarise(runs)
    assert len(summary["measured"]) == 5  # the run's other case was measured
    assert summary["cases_not_measured"] == [{"run_id": short["run_id"], "case": "1KB c=100", "metric": "rps",
                                              "why": "10 blocks counted of 12 planned"}]
    assert summary["cases_short_of_blocks"] == 1
    by_case = {s["case"]: s for s in summary["case_metrics"]}
    assert by_case["1KB c=100"]["runs"] == 4 and short["run_id"] not in by_case["1KB c=100"]["run_ids"]
    assert by_case["1MB c=100"]["runs"] == 5
    # the gate's word on the same run, for the same reason
    assert gate_rule.judge_gate(short, ["rps"]) == (gate_rule.NOT_MEASURED,
                                                      ["1KB c=100: 10 blocks counted of 12 planned"])
    attempts = [{"attempt": k, "run_id": ab["run_id"]} for k, ab in enumerate(runs, 1)]
    doc = change_calibrate.document("calibration-flask-20990101T000000Z", "flask",
                                    change_calibrate.change_settings({}, {}), 5, attempts, runs, "20990101T000000Z",
                                    True)
    page = change_calibrate.render(doc)
    assert ("- 1 case-run left out: fewer blocks counted than planned (what the gate calls not measured, "
            "exit 2).") in page
    assert f"- {short['run_id']} 1KB c=100 rps: 10 blocks counted of 12 planned" in page
    assert "- 0 case-runs left out" in change_calibrate.render(
        change_calibrate.document("c", "flask", change_calibrate.change_settings({}, {}), 5, attempts[:1],
                                  hand_runs()[:1], "20990101T000000Z", False))


def blocks_of(rng: random.Random, n: int, sd: float) -> list[dict]:
    out = []
    for i in range(1, n + 1):
        a = 1000 * math.exp(rng.gauss(0, 0.1))
        b = a * math.exp(rng.gauss(0, sd))
        out.append({"block": i, "a": {"rps": a, "cpu_path": 1000 / a, "shed": 0.0, "whole": 3000},
                    "b": {"rps": b, "cpu_path": 1000 / b * math.exp(rng.gauss(0, sd)), "shed": 0.0, "whole": 3000},
                    "flags": [], "counted": True})
    return out


def simulated_aa(rng: random.Random, run_id: str) -> dict:
    cases = [{"file": f, "size_bytes": 1, "concurrency": 100, "error": "", "blocks": blocks_of(rng, 12, 0.05)}
             for f in ("1KB.bin", "1MB.bin")]
    ab = aa(run_id, judge_change(cases, 0.05, (("rps", "requests per second", True, ("faster", "slower")),
                                           ("cpu_path", "CPU per request", False, ("cheaper", "costlier")))))
    ab["cases"] = cases
    return ab


def test_a_calibration_of_judged_runs_reads_bench_rows_as_they_are():
    rng = random.Random(8)
    runs = [simulated_aa(rng, f"2099010{i}T000000Z") for i in range(1, 7)]
    summary = cal.summarise(runs)
    assert len(summary["case_metrics"]) == 4 and summary["false_alarms"]["rows"] == 24
    for s in summary["case_metrics"]:
        assert s["runs"] == 6 and s["ks"] and s["heterogeneity"]["runs"] == 6
        # bench's rows carry their log-ratios: each p is randomised below the raw one, never above
        assert all(r <= p for r, p in zip(s["p_randomised"], s["p"])) and s["p_randomised"] != s["p"]
    json.dumps(summary)  # calibration.json holds it as it is


# --- what a run resolves, from kept A/A runs -------------------------------------------------------------------

def test_a_calibration_of_kept_aa_runs_says_what_each_run_could_resolve():
    """The five kept A/A runs of a kept calibration, read as make
    ab-calibrate reads them: per case-metric the runs' detectable change at
    80% power (each row's own, from its blocks) as median [min-max], the
    largest counting floor, the median rho, as numpy reads the rows; the
    page's column and the per-case-metric line say them."""
    kept = json.loads((KEPT_CALIBRATION / "calibration.json").read_text())
    runs = [{"run_id": run_id, **kept_ab(run_id)} for run_id in kept["run_ids"]]
    doc = change_calibrate.read_again(kept, runs, "20991231T000000Z")
    stats = doc["statistics"]
    assert stats["measured"] == kept["run_ids"] and len(runs) == 5 and stats["threshold"] == 0.05
    page = change_calibrate.render(doc)
    for s in stats["case_metrics"]:
        rows = [r for ab in runs for r in ab["rows"] if (r["case"], r["metric"]) == (s["case"], s["metric"])]
        detectable = np.array([r["detectable"] for r in rows])
        assert len(rows) == 5 and s["detectable_runs"] == 5
        assert s["detectable_median"] == pytest.approx(np.median(detectable), abs=1e-12)
        assert (s["detectable_min"], s["detectable_max"]) == (detectable.min(), detectable.max())
        assert s["rho_median"] == pytest.approx(np.median([r["rho"] for r in rows]), abs=1e-12)
        floors = [r["counting_floor"] for r in rows if r["counting_floor"] is not None]
        assert s["counting_floor_max"] == (max(floors) if floors else None)
        assert floors if s["metric"] == "rps" else not floors  # counting whole answers bounds req/s only
        assert s["resolves_threshold"] is bool(np.median(detectable) <= 0.05)
        span = f"{detectable.min() * 100:.1f}-{detectable.max() * 100:.1f}%"
        cell = f"| {np.median(detectable) * 100:.1f}% [{span}]" + (f", floor ≤{max(floors) * 100:.2f}%" if floors
                                                                    else "") + " |"
        assert f"| {s['case']} | {s['metric']} | 5 |" in page and cell in page, cell
        assert (f"  - {s['case']} {s['metric']}: a run resolves ±5%: "
                f"{'yes' if s['resolves_threshold'] else '**no**'} (median {np.median(detectable) * 100:.1f}%, "
                f"{span} by run") in page
    assert "| detectable (80% power), median [range] |" in page
    # what the calibration said before is what it says again: only what a run resolves is new
    added = {"detectable_runs", "detectable_median", "detectable_min", "detectable_max", "resolves_threshold",
             "counting_floor_max", "rho_median"}
    assert [{k: v for k, v in s.items() if k not in added} for s in stats["case_metrics"]] == \
        kept["statistics"]["case_metrics"]
    assert doc["verdict"] == kept["verdict"] and doc["gate"] == kept["gate"]


# a docker on PATH that notes it was run, and fails
DOCKER_NOTING = "#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/docker-ran\"\nexit 1\n"


def test_report_writes_a_kept_calibration_again_from_its_runs_without_docker(tmp_path):
    """change_calibrate.py --report, run as a user runs it, on a copy of a
    kept calibration and its runs (ab.json.gz, as kept): both files written
    again with what a run resolves, when it finished kept, no docker run;
    an A/B page of the same path and machine then quotes the median. A run
    gone: exit 2 and nothing written."""
    results, bin_dir = tmp_path / "results", tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER_NOTING)
    (bin_dir / "docker").chmod(0o755)
    out = results / KEPT_CALIBRATION.name
    shutil.copytree(KEPT_CALIBRATION, out)
    kept = json.loads((out / "calibration.json").read_text())
    for run_id in kept["run_ids"]:
        shutil.copytree(KEPT_CALIBRATION.parent / run_id, results / run_id)
    repo = Path(__file__).resolve().parent.parent
    env = {"PATH": str(bin_dir), "PYTHONPATH": str(repo / "loadgen"), "HOME": str(tmp_path)}

    def report() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(repo / "tools" / "lab" / "change_calibrate.py"), "--report",
                               str(out)], env=env, capture_output=True, text=True, timeout=120)

    done = report()
    assert done.returncode == kept["verdict"]["exit"] == 0, done.stderr
    assert not (bin_dir / "docker-ran").exists()
    again = json.loads((out / "calibration.json").read_text())
    assert again["finished_at"] == kept["finished_at"] and again["run_ids"] == kept["run_ids"]
    assert all(s["detectable_median"] is not None for s in again["statistics"]["case_metrics"])
    page = (out / "calibration.md").read_text()
    assert done.stdout == page + "\n" and "| detectable (80% power), median [range] |" in page
    assert "±5% in **4 of 4 case-metrics**" in page
    # an A/B page of this path, machine and settings, begun after it: the median a run detects, on its one line
    from bench.report.change import calibration_set_items
    ab = {**kept_ab(kept["run_ids"][0]), "run_id": "20991231T000000Z", "kind": "A/B"}
    line = calibration_set_items({**ab, "calibration_set": cal.calibration_for(results, ab)})
    by_key = {(s["case"], s["metric"]): s["detectable_median"] for s in again["statistics"]["case_metrics"]}
    assert len(line) == 1 and "\n" not in line[0]
    assert f"a run detects (80% power, median of the runs): 1KB c=100 rps ±{by_key['1KB c=100', 'rps'] * 100:.1f}%" \
        in line[0]
    # a run it read is gone: refused, named, nothing written
    shutil.rmtree(results / kept["run_ids"][2])
    before = (out / "calibration.json").read_bytes(), page
    gone = report()
    assert gone.returncode == cal.NOT_MEASURED and kept["run_ids"][2] in gone.stderr
    assert "nothing written" in gone.stderr
    assert ((out / "calibration.json").read_bytes(), (out / "calibration.md").read_text()) == before
    assert not (bin_dir / "docker-ran").exists()


# --- what an A/B page quotes ------------------------------------------------------------------------------------

def write_calibration(base: Path, name: str, finished: str, **over) -> Path:
    settings = {"path": "flask", "files": ["1KB", "1MB"], "concurrency": [100], "blocks": 12, "design": "duet",
                "window": 3, "warmup": 2, "threshold": 0.05, "restart_twins": True}
    settings.update(over.pop("settings", {}))
    summary = cal.summarise(hand_runs())
    doc = {"kind": "A/A calibration", "id": name, "path": settings["path"], "status": "complete",
           "finished_at": finished, "planned_runs": 5, "settings": settings, "machine": MACHINE,
           "statistics": summary, "verdict": {"exit": cal.judge(summary)[0]}, **over}
    (base / name).mkdir()
    (base / name / "calibration.json").write_text(json.dumps(doc))
    return base / name


def test_a_change_page_finds_the_newest_calibration_of_its_path_machine_and_settings(tmp_path):
    write_calibration(tmp_path, "calibration-flask-20990101T000000Z", "20990101T090000Z")
    write_calibration(tmp_path, "calibration-flask-20990102T000000Z", "20990102T090000Z")
    write_calibration(tmp_path, "calibration-flask-20990103T000000Z", "20990103T090000Z", status="incomplete")
    write_calibration(tmp_path, "calibration-flask-20990104T000000Z", "20990104T090000Z", machine={"cpu_model": "x"})
    write_calibration(tmp_path, "calibration-flask-20990105T000000Z", "20990105T090000Z", settings={"blocks": 16})
    write_calibration(tmp_path, "calibration-node-20990106T000000Z", "20990106T090000Z", settings={"path": "node"})
    write_calibration(tmp_path, "calibration-flask-20990107T000000Z", "20990107T090000Z", settings={"window": 4})
    write_calibration(tmp_path, "calibration-flask-20990108T000000Z", "20990108T090000Z",
                      settings={"restart_twins": False})
    (tmp_path / "calibration-flask-20990109T000000Z").mkdir()
    (tmp_path / "calibration-flask-20990109T000000Z" / "calibration.json").write_text("{not json")
    ab = {**aa("20990110T000000Z", []), "kind": "A/B", "window": 3}
    found = cal.calibration_for(tmp_path, ab)
    assert found["calibration"] == "calibration-flask-20990102T000000Z" and found["unchecked"] == []
    assert found["runs"] == 5 and found["false_alarms"]["alarms"] == 1 and found["false_alarms"]["rows"] == 10
    assert set(found["cases"]) == {"1KB c=100", "1MB c=100"}
    assert found["cases"]["1MB c=100"]["rps"]["alarms"] == 1
    assert found["cases"]["1KB c=100"]["rps"]["ks_p"] == pytest.approx(
        stats.kstest([h[1][0] for h in HAND], "uniform").pvalue, abs=1e-6)
    # ab.json without its window (today's): the newest with the rest the same, the window unchecked
    no_window = {k: v for k, v in ab.items() if k != "window"}
    assert cal.calibration_for(tmp_path, no_window)["calibration"] == "calibration-flask-20990107T000000Z"
    assert cal.calibration_for(tmp_path, no_window)["unchecked"] == ["window"]
    # a calibration finished after the A/B began is not quoted by it
    assert cal.calibration_for(tmp_path, {**ab, "run_id": "20990101T120000Z"})["calibration"] == \
        "calibration-flask-20990101T000000Z"
    # none on another machine, of other settings, or at all
    assert cal.calibration_for(tmp_path, {**ab, "machine": {"cpu_model": "y"}}) is None
    assert cal.calibration_for(tmp_path, {**ab, "blocks": 20}) is None
    assert cal.calibration_for(tmp_path / "nothing", ab) is None


# --- tools/lab/change_calibrate.py ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["B_IMAGE", "B_CONTEXT", "B_REF", "B_CPUS", "B_ENV", "B_ARG", "A_REF"])
def test_a_change_to_b_is_refused_by_name(name, monkeypatch, capsys):
    monkeypatch.setenv("SERVICE", "flask")
    monkeypatch.setenv(name, "x")
    assert change_calibrate.main() == 2
    err = capsys.readouterr().err
    assert f"{name}='x'" in err and "A/A" in err and f"unset {name}" in err


def test_service_is_required(monkeypatch, capsys):
    monkeypatch.delenv("SERVICE", raising=False)
    assert change_calibrate.main() == 2 and "SERVICE: required" in capsys.readouterr().err


def test_the_settings_are_the_shells_then_the_env_files_then_bench_defaults():
    found = change_calibrate.change_settings({"AB_BLOCKS": "16", "AB_FILES": ""}, {"AB_BLOCKS": "14", "AB_WINDOW": "4",
                                                                             "AB_RESTART_TWINS": "off"})
    assert found["AB_BLOCKS"] == "16" and found["AB_WINDOW"] == "4" and found["AB_FILES"] == "1KB 1MB"
    # tools/lab/change.py reads the restarts from the shell only
    assert found["AB_RESTART_TWINS"] == "every-block"
    assert change_calibrate.settings_record("flask", found) == {
        "path": "flask", "files": ["1KB", "1MB"], "concurrency": [100], "blocks": 16, "design": "duet", "window": 4,
        "warmup": 2, "threshold": 0.05, "restart_twins": True}


def test_the_tool_runs_n_aas_names_what_was_not_measured_and_writes_both_files(tmp_path, capsys):
    results, out = tmp_path / "results", tmp_path / "results" / "calibration-flask-20990101T000000Z"
    out.mkdir(parents=True)
    rng = random.Random(21)
    outcomes = iter(["ab", "none", "error", "ab", "ab", "ab"])

    def fake_change(env, service, deadline):
        """tools/lab/change.py as seen from outside: a run folder with an ab.json, or none."""
        what = next(outcomes)
        assert service == "flask" and deadline == 3600 + change_calibrate.SLACK_S
        if what == "none":
            return 2
        run_id = f"20990101T0{len(list(results.glob('2*'))):02d}000Z"
        (results / run_id).mkdir()
        ab = simulated_aa(rng, run_id) if what == "ab" else aa(run_id, [], error="not timed: flask-b: refused")
        (results / run_id / "ab.json").write_text(json.dumps(ab))
        return 0

    variables = change_calibrate.change_settings({}, {})
    doc = change_calibrate.calibrate({}, "flask", 6, results, out, variables, run_one=fake_change)
    printed = capsys.readouterr().out
    assert "run 1 of 6" in printed and "run 6 of 6" in printed and "left" in printed
    assert "run 2 of 6: not measured: no ab.json (tools/lab/change.py exited 2)" in printed
    assert "not measured: not timed: flask-b: refused" in printed
    stored = json.loads((out / "calibration.json").read_text())
    assert stored["status"] == "complete" and stored["planned_runs"] == 6 and len(stored["run_ids"]) == 4
    assert stored["machine"] == MACHINE and stored["settings"]["window"] == 3 and stored["path"] == "flask"
    assert [a.get("run_id") is None for a in stored["attempts"]] == [False, True, False, False, False, False]
    assert len(stored["statistics"]["not_measured"]) == 2 and stored["verdict"]["exit"] == doc["verdict"]["exit"]
    page = (out / "calibration.md").read_text()
    assert "4 A/A runs measured of 6" in page and "## Not measured" in page and "| 1KB c=100 | rps | 4 |" in page
    assert "### 1MB c=100, cpu_path" in page and "| 4 | 0.800 |" in page
    # the gate's answer to each attempt: a run without ab.json or with an error is not measured (2)
    gate = stored["gate"]
    assert gate["runs"] == 6 and gate["exits"][1:3] == [2, 2]
    assert gate["passes"] == sum(c in (0, 3) for c in gate["exits"])
    assert f"passes an unchanged B (exit 0 or 3) in **{gate['passes']} of 6 runs**" in page
    # an A/B page of the same path, machine and settings finds it
    assert cal.calibration_for(results, {**aa("20991231T000000Z", []), "kind": "A/B"})["runs"] == 4


def test_a_change_page_quotes_its_calibration_or_says_it_has_none(tmp_path):
    from bench.report.change import calibration_set_items
    ab = {**aa("20990110T000000Z", []), "kind": "A/B", "window": 3}
    assert "none** (`make ab-calibrate SERVICE=flask`" in calibration_set_items(
        {**ab, "calibration_set": cal.calibration_for(tmp_path, ab)})[0]
    write_calibration(tmp_path, "calibration-flask-20990102T000000Z", "20990102T090000Z")
    line = calibration_set_items({**ab, "calibration_set": cal.calibration_for(tmp_path, ab)})[0]
    assert line.startswith("**Calibration** (calibration-flask-20990102T000000Z, 5 A/A runs")
    assert "1 of 10 case-metrics got a verdict (95% at most" in line and "1KB c=100 rps ±" in line


# --- the gate's own A/As, on its runner before its A/B --------------------------------------------------------

# tools/lab/change.py stood in for (no Docker): a real child that files the next ab.json of a queue as the run folder
# bench would have made, and notes what it was asked (the path, and the change it would have made to B)
FILES_THE_NEXT_RUN = """
import json, os, pathlib, sys
queue, results, log = (pathlib.Path(a) for a in sys.argv[1:4])
made = sorted(queue.glob("*.json"))[0]
(results / made.stem).mkdir(parents=True)
made.rename(results / made.stem / "ab.json")
with log.open("a") as f:
    f.write(json.dumps({name: os.environ.get(name) for name in ("SERVICE", "A_REF", "B_CPUS")}) + "\\n")
"""


def gated(row_: dict, passes: bool) -> dict:
    return {**row_, "gate_passes": passes, "gate_fails": not passes and row_["verdict"] == "worse"}


@pytest.mark.parametrize("runs", [0, 2, 3])
def test_the_gate_quotes_its_own_aas_and_its_exit_stays_about_b(tmp_path, monkeypatch, capsys, runs):
    """AB_GATE_CALIBRATION_RUNS A/As of the path, then its A/B, each by a
    child run as the gate runs tools/lab/change.py: the summary states k and
    what they showed (a false alarm, the gate failing one A/A, no KS p
    below 3 runs), through the calibration.json change_calibrate wrote;
    the A/As get no change to B; the exit is the A/B's alone (0)."""
    queue, results, log = tmp_path / "queue", tmp_path / "results", tmp_path / "asked"
    queue.mkdir()
    alarmed = aa("20990201T000100Z", [gated(row("1KB c=100", "rps", 0.6, 1.0, 0.99, 1.01, "no change"), True),
                                      gated(row("1MB c=100", "rps", 0.002, 0.93, 0.90, 0.94, "worse"), False)])
    quiet = [aa(f"20990201T00{i}00Z", [gated(row("1KB c=100", "rps", p, 1.0, 0.98, 1.02, "no change"), True),
                                       gated(row("1MB c=100", "rps", 1 - p, 1.0, 0.97, 1.03 + i / 100), shown)])
             for i, p, shown in ((2, 0.4, True), (3, 0.8, False))]  # the gate's answers: 0, then 3
    change = {**quiet[0], "run_id": "20990201T009900Z", "kind": "A/B", "change": "A built from the lab at HEAD",
              "rows": [gated(r, True) for r in quiet[0]["rows"]]}
    for ab in [alarmed, *quiet][:runs] + [change]:
        (queue / f"{ab['run_id']}.json").write_text(json.dumps(ab))
    monkeypatch.setattr(change_calibrate, "CHANGE", [sys.executable, "-S", "-c", FILES_THE_NEXT_RUN, str(queue),
                                                     str(results), str(log)])
    for name, value in {"AB_ENV_FILE": ".env", "RESULTS_DIR": str(results), "AB_GATE_CALIBRATION_RUNS": str(runs),
                        "B_CPUS": "0.2", "AB_GATE_METRICS": "rps",
                        "GITHUB_STEP_SUMMARY": str(tmp_path / "step-summary.md")}.items():
        monkeypatch.setenv(name, value)
    assert change_gate.main(["HEAD", "flask"]) == gate_rule.SHOWN_WITHIN
    printed = capsys.readouterr().out
    # the job's page gets the summary alone, not the runs' output printed before it
    summary = (tmp_path / "step-summary.md").read_text()
    assert summary.startswith("# A/B gate against HEAD\n") and printed.endswith(summary)
    assert ("[ab-gate]" in printed) == bool(runs) and "[ab-gate]" not in summary
    asked = [json.loads(line) for line in log.read_text().splitlines()]
    assert asked == [{"SERVICE": "flask", "A_REF": None, "B_CPUS": None}] * runs + [
        {"SERVICE": "flask", "A_REF": "HEAD", "B_CPUS": "0.2"}]
    assert "**flask: the gate passes** (exit 0, gated on rps)." in printed and "**Gate: the gate passes** (exit 0)." \
        in printed
    if not runs:
        assert "No A/A on this runner (AB_GATE_CALIBRATION_RUNS=0)." in printed
        assert "- **No A/A on this runner** (AB_GATE_CALIBRATION_RUNS=0)" in printed
        assert not list(results.glob("calibration-*"))
        return
    stored = json.loads(next(results.glob("calibration-flask-*/calibration.json")).read_text())
    assert stored["status"] == "complete" and stored["run_ids"] == [a["run_id"] for a in [alarmed, *quiet][:runs]]
    assert f"{runs} A/A runs of each path on this runner before its A/B (AB_GATE_CALIBRATION_RUNS)." in printed
    assert f"- **{runs} A/A runs on this runner** before this A/B (AB_GATE_CALIBRATION_RUNS; {stored['id']}): " \
           f"{runs} measured." in printed
    bound = stats.binomtest(1, 2 * runs).proportion_ci(method="exact")
    assert (f"False alarms of an unchanged B: **1 of {2 * runs} case-metrics** (every metric judged, gated or not; "
            f"95% Clopper-Pearson interval {bound.low:.1%}-{bound.high:.1%}") in printed
    answers = "; ".join(["1, the gate fails", "0, the gate passes", "3, inconclusive (not shown within the "
                         "threshold)"][:runs])
    assert f"The gate's own answer to each A/A (on rps), exit: {answers}. It passes an unchanged B (0 or 3) in " \
           f"{runs - 1} of {runs}." in printed
    if runs < cal.MIN_RUNS:  # a calibration of so few exits 2: the gate's exit is not moved by it
        assert stored["verdict"]["exit"] == cal.NOT_MEASURED
        assert f"No KS p: whether the p-values are uniform (whether the 5% a verdict promises holds here) needs " \
               f"at least 3 measured runs of a case-metric; {runs} runs measured." in printed
    else:
        ks = stats.kstest(stored["statistics"]["case_metrics"][1]["p_randomised"], "uniform", method="exact")
        assert stored["statistics"]["ks_min_p"] <= ks.pvalue + 1e-6
        assert f"Lowest KS p of the p-values: {stored['statistics']['ks_min_p']:.3g} over 3 runs" in printed
        assert f"the calibration's own exit {stored['verdict']['exit']}" in printed


def test_the_gates_aa_runs_are_a_whole_number_from_0_or_named():
    assert change_gate.calibration_runs({}) == change_gate.CALIBRATION_RUNS
    assert change_gate.calibration_runs({"AB_GATE_CALIBRATION_RUNS": " "}) == change_gate.CALIBRATION_RUNS
    assert [change_gate.calibration_runs({"AB_GATE_CALIBRATION_RUNS": v}) for v in ("0", "3", "100")] == [0, 3, 100]
    for bad in ("-1", "1.5", "two", "101"):
        with pytest.raises(change_gate.LabError, match=f"AB_GATE_CALIBRATION_RUNS='{bad}': expected a whole number"):
            change_gate.calibration_runs({"AB_GATE_CALIBRATION_RUNS": bad})


def test_a_bad_number_of_aa_runs_stops_the_gate_before_anything_runs(monkeypatch, capsys):
    monkeypatch.setenv("AB_GATE_CALIBRATION_RUNS", "some")
    assert change_gate.main(["HEAD", "flask"]) == gate_rule.NOT_MEASURED
    assert "ab-gate: error: AB_GATE_CALIBRATION_RUNS='some'" in capsys.readouterr().err


def test_an_aa_that_could_not_start_is_said_so():
    assert change_gate.aa_lines(None, 2, "AB_BLOCKS: invalid literal for int() with base 10: 'x'") == [
        "- **No A/A on this runner**: 2 asked, none run: AB_BLOCKS: invalid literal for int() with base 10: 'x'."]
