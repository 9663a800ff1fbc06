"""The open-loop latency run (vegeta): its capacity from keep-alive, its
length, whether it kept its schedule, its sample count, exact percentiles
with p99's distribution-free interval, and the histogram kept for charts.
Fixtures are real vegeta v12.13.0 outputs against a Python server that
answers every request after 0.3 s (tests/fixtures/vegeta/slow-0.3s-*):
200/s for 4 s with workers enough, and with -max-workers=20."""
import random
from dataclasses import asdict
from pathlib import Path

import pytest

from bench.benchmark.open_loop import open_loop_capacity, open_loop_figures, open_loop_seconds
from bench.clients.timing import TIMEOUT_S, vegeta_max_workers, vegeta_measurement
from bench.measure import latency
from bench.measure.usage import BEHIND_SCHEDULE, FEW_SAMPLES, LOADGEN_BOUND, REFUSED
from bench.report.markdown import render_markdown
from bench.results import Comparison, OpenLoop, Results, TargetResult, ToolResult, repeated_run

VEGETA = Path(__file__).parent / "fixtures" / "vegeta"


def measured(report: str, rate: float, encoded: str | None = None) -> dict:
    """A vegeta Measurement as Timer.measured returns it, without cAdvisor."""
    m = vegeta_measurement((VEGETA / report).read_text(), rate, raw_output=report,
                           encoded=(VEGETA / encoded).read_text() if encoded else None)
    return {**asdict(m), "flags": [], "cpu": None}


def test_a_slow_last_answer_after_a_kept_schedule_is_not_behind_it():
    # 800 requests sent over 4.0 s, the last answered 0.34 s later: the old
    # "sent rate", requests / (duration + wait) = 184/s, read as falling behind 200/s
    rep = measured("slow-0.3s-rate200.json", 200, "slow-0.3s-rate200.jsonl")
    loop = open_loop_figures(OpenLoop("slow", "1KB.bin", 1024, 200.0), rep)
    assert loop.requests == 800 and loop.sent_rate == pytest.approx(200.24, abs=0.01)
    assert rep["requests"] / rep["seconds"] < 0.95 * 200
    assert BEHIND_SCHEDULE not in loop.flags and LOADGEN_BOUND not in loop.flags
    assert FEW_SAMPLES in loop.flags  # 800 < 10,000


def test_an_open_loop_point_refused_throughout_fails_and_one_refused_in_part_is_flagged():
    """A point of 404s (a real capture) measures no serving: it fails, with
    the statuses; one with some refused answers is timed and flagged."""
    every = open_loop_figures(OpenLoop("nginx", "missing.bin", 0, 50.0), measured("nginx-404-rate50.json", 50))
    assert every.status == "failed" and every.error == "every answer of 50 was refused (50 x 404)"
    rep = measured("nginx-404-rate50.json", 50)
    part = open_loop_figures(OpenLoop("nginx", "missing.bin", 0, 50.0), {**rep, "refused": 10})
    assert part.ok and REFUSED in part.flags and part.refused == 10


def test_vegeta_out_of_workers_is_flagged_behind_schedule():
    # -max-workers=20 at 200/s of 0.3 s answers: 59/s sent, the rest waited unrecorded
    loop = open_loop_figures(OpenLoop("slow", "1KB.bin", 1024, 200.0),
                             measured("slow-0.3s-rate200-workers20.json", 200))
    assert loop.sent_rate == pytest.approx(59.38, abs=0.01) and BEHIND_SCHEDULE in loop.flags


def test_max_workers_let_every_request_of_a_timeout_be_in_flight():
    assert vegeta_max_workers(5) == 5 * TIMEOUT_S
    assert vegeta_max_workers(7311) == 256  # capped: what the paths are sized for; past it, behind-schedule
    assert vegeta_max_workers(0.25) == 10


def test_a_run_lasts_until_10000_requests_or_20_seconds():
    assert 2.0 < open_loop_seconds(5000) <= 2.001
    assert open_loop_seconds(3333) * 3333 >= 10_000  # 10000 / 3333 = 3.0003 s: rounding down would lose one
    assert open_loop_seconds(10) == 20.0  # a slow GridFS row: 200 requests, flagged few-samples


def test_percentiles_are_order_statistics_of_every_request():
    rep = measured("slow-0.3s-rate200.json", 200, "slow-0.3s-rate200.jsonl")
    from bench.clients.vegeta_output import parse_results
    ordered = sorted(a.latency * 1000 for a in parse_results((VEGETA / "slow-0.3s-rate200.jsonl").read_text()))
    assert rep["latency"]["samples"] == 800
    assert rep["p99_ms"] == ordered[791] and rep["latency"]["p999_ms"] == ordered[799] == rep["max_ms"]
    assert rep["p50_ms"] == ordered[399]
    low, high = rep["latency"]["p99_interval_ms"]
    assert low <= rep["p99_ms"] <= high
    histogram = rep["latency"]["histogram"]
    assert sum(n for _, n in histogram) == 800 and histogram[0][0] >= 300  # every answer took >= 0.3 s


def test_p99_interval_matches_the_binomial_and_covers():
    scipy_stats = pytest.importorskip("scipy.stats")
    n = 10_000
    ranks = [float(i) for i in range(1, n + 1)]  # the value is its rank
    low, high = latency.quantile_interval(ranks, 0.99)
    # P(B < l) <= 2.5% and P(B >= u) <= 2.5%, B ~ Binomial(n, 0.99), l largest and u smallest such
    assert scipy_stats.binom.cdf(low - 1, n, 0.99) <= 0.025 < scipy_stats.binom.cdf(low, n, 0.99)
    assert scipy_stats.binom.sf(high - 1, n, 0.99) <= 0.025 < scipy_stats.binom.sf(high - 2, n, 0.99)
    assert 9875 < low < 9900 < high < 9925
    # too few answers for an upper bound: p99 could lie beyond the slowest
    assert latency.quantile_interval(ranks[:100], 0.99)[1] is None
    # coverage by simulation: exponential latencies, the true p99 known
    rng, true_p99, covered, trials = random.Random(26), -__import__("math").log(0.01), 0, 300
    for _ in range(trials):
        low, high = latency.quantile_interval(sorted(rng.expovariate(1) for _ in range(2000)), 0.99)
        covered += low <= true_p99 <= high
    assert covered / trials >= 0.92


def test_histogram_stays_bounded_however_many_requests():
    rng = random.Random(1)
    values = [10 ** rng.uniform(-2, 4.5) for _ in range(50_000)]  # 10 us to 30 s
    histogram = latency.histogram(values)
    assert len(histogram) <= 330 and sum(n for _, n in histogram) == 50_000
    assert all(a[0] < b[0] for a, b in zip(histogram, histogram[1:]))
    assert histogram[-1][0] >= max(values)


def run(target, rps, c=100):
    rep = {"rps": rps, "requests": 1000, "failed": 0, "seconds": 4.0, "time_per_request_ms": 1.0,
           "transfer_kbps": 1.0, "p50_ms": 1.0, "p90_ms": 1.0, "p99_ms": 1.0, "raw_output": None, "flags": []}
    return repeated_run(target, "1KB.bin", 1024, c, [rep])


def tool(name, rps):
    return ToolResult(name, rps, 1.0, 1.0, 1.0, 1.0, 0, {"median": rps})


def test_capacity_is_the_keep_alive_rate_else_abs_best():
    results = Results("r", "s", runs=[run("a", 3000.0), run("a", 2000.0, 5), run("b", 500.0)])
    results.comparisons = [Comparison("a", "1KB.bin", 1024, 100, tool("ab -k", 9000.0), tool("wrk", 11000.0))]
    assert open_loop_capacity(results, "a", "1KB.bin") == (11000.0, "wrk at c=100")
    assert open_loop_capacity(results, "b", "1KB.bin") == (500.0, "ab at c=100 (no keep-alive)")
    assert open_loop_capacity(results, "c", "1KB.bin") is None


def test_report_shows_the_count_interval_and_p999_of_a_short_run():
    rep = measured("slow-0.3s-rate200.json", 200, "slow-0.3s-rate200.jsonl")
    loop = open_loop_figures(OpenLoop("flask", "1KB.bin", 1024, 200.0, capacity=400.0,
                                      capacity_from="wrk at c=100"), rep)
    report = render_markdown(Results("r", "s", targets=[TargetResult("flask", "http://flask", True)],
                                     runs=[run("flask", 300.0)], open_loop=[loop]))
    low, high = loop.p99_interval_ms
    assert (f"| flask | 1KB | 200 of 400 (wrk at c=100) | 200.238 | 800 | {loop.p50_ms:.2f} | {loop.p99_ms:.2f} "
            f"| {low:.2f}–{high:.2f} | {loop.p999_ms:.2f} |") in report
    assert "few-samples |" in report and "fewer than 10,000 requests" in report
    assert f"| {loop.p99_ms:.2f} @ 200/s ⁿ |" in report  # the headline's p99 carries the mark
    # results.json keeps the histogram and reads it back
    again = Results.from_dict(Results("r", "s", open_loop=[loop]).to_dict()).open_loop[0]
    assert again.latency_histogram == loop.latency_histogram and again.p99_interval_ms == [low, high]


def test_percentile_curve_climbs_to_the_slowest_answer():
    latencies = [1.0] * 900 + [10.0] * 90 + [100.0] * 9 + [1000.0]
    curve = latency.percentile_curve(latency.histogram(latencies))
    xs, ys = zip(*curve)
    assert list(xs) == sorted(xs) and list(ys) == sorted(ys)
    assert xs[0] == pytest.approx(latency.nines(0.9)) and ys[0] == pytest.approx(1.0, rel=0.05)
    assert xs[1] == pytest.approx(latency.nines(0.99)) and ys[1] == pytest.approx(10.0, rel=0.05)
    # the maximum sits at the last sample's plotting position, not at infinity
    assert xs[-1] == pytest.approx(latency.nines(1 - 0.5 / 1000)) and ys[-1] == pytest.approx(1000.0, rel=0.05)


def curve_results(shares=(0.25, 0.5, 0.9)) -> Results:
    """Open-loop points of one path at several shares of its capacity, from
    a real vegeta run's latencies stretched with the load."""
    rep = measured("slow-0.3s-rate200.json", 200, "slow-0.3s-rate200.jsonl")
    loops = []
    for share in shares:
        loop = open_loop_figures(OpenLoop("flask", "1KB.bin", 1024, 400.0 * share, capacity=400.0,
                                          capacity_from="wrk at c=100", share=share), rep)
        loop.p99_ms *= 1 + share  # a later point is slower
        loops.append(loop)
    return Results("r", "s", targets=[TargetResult("flask", "http://flask", True)], runs=[run("flask", 300.0)],
                   open_loop=loops, timing={"open_loop_share": 0.5, "open_loop_curve": list(shares)})


def test_the_headline_quotes_the_headline_share_of_a_curve():
    from bench.report.headline import open_loop_for
    results = curve_results()
    assert open_loop_for(results, "flask", "1KB.bin").share == 0.5
    report = render_markdown(results)
    assert "| 100 of 400 (wrk at c=100), 25% |" in report and "| 360 of 400 (wrk at c=100), 90% |" in report


def test_the_page_draws_the_percentile_curve_and_p99_against_load(tmp_path):
    from bench.report.html import render_html
    page = render_html(curve_results())
    for title in ("Latency distribution, 1KB", "p99 against load, 1KB"):
        assert f'aria-label="{title}"' in page
        chart = page[page.index(f'aria-label="{title}"'):]
        chart = chart[:chart.index("</svg>")]
        assert chart.count("<polyline") == 1 and chart.count("<circle") >= 3
    # one point per share on the load curve
    load = page[page.index('aria-label="p99 against load, 1KB"'):]
    assert load[:load.index("</svg>")].count("<circle") == 3
    # a single share draws no load curve
    assert "p99 against load" not in render_html(curve_results((0.5,)))
