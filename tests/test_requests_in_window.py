"""CPU per request from the requests inside the CPU window (issue 26, item
3): a window's CPU is divided by the requests that completed in that same
window, from the tool's own per-request times (ab -g, vegeta's results), so
a run's ramp and tail count on neither side. Parsers on real captured
output; the arithmetic against figures worked by hand."""
from pathlib import Path

import pytest

from bench.clients.ab_output import AbOutputError, parse_completions, parse_summary
from bench.clients.timing import ab_measurement
from bench.clients.vegeta_output import completion_times, parse_results
from bench.measure.cadvisor import Counters
from bench.measure.usage import (PER_REQUEST_IN_WINDOW, PER_REQUEST_RATE, PER_REQUEST_RUN, completion_bins,
                                 container_usage, requests_between)

FIXTURES = Path(__file__).parent / "fixtures"
# ab -r -k -t 3 -c 10 -g against nginx on loopback, 1 MiB: the wall clock
# around ab's process as bench records it
AB_STARTED_NS, AB_ENDED_NS = 1795641343605052914, 1795641346629489513
S = 1_000_000_000


def ab_fixture() -> tuple[str, str]:
    return ((FIXTURES / "ab" / "nginx-1MB-c10-keepalive.txt").read_text(),
            (FIXTURES / "ab" / "nginx-1MB-c10-keepalive.tsv").read_text())


def test_every_request_of_ab_g_is_counted_once():
    report, per_request = ab_fixture()
    spans = parse_completions(per_request)
    assert sum(n for _, _, n in spans) == parse_summary(report).complete == 1850
    # a completion is known to a second: start (whole seconds) + ttime
    assert all(latest - earliest == pytest.approx(1.0) for earliest, latest, _ in spans)
    bins = completion_bins(spans, AB_STARTED_NS, AB_ENDED_NS)
    assert sum(n for _, n in bins) == pytest.approx(1850, abs=0.01)
    # clipped to the tool's own process: nothing before it started or after it ended
    assert bins[0][0] >= 1795641343.6 and bins[-1][0] < 1795641346.7


def test_ab_g_without_its_header_or_with_a_bad_line_is_an_error():
    _, per_request = ab_fixture()
    with pytest.raises(AbOutputError, match="header"):
        parse_completions(per_request.split("\n", 1)[1])
    with pytest.raises(AbOutputError, match="line 3"):
        lines = per_request.splitlines()
        parse_completions("\n".join([lines[0], lines[1], "Wed Nov 25 21:15:43 2026\tx\t0\t7\t7\t1"]))


def test_the_measurement_carries_the_bins():
    report, per_request = ab_fixture()
    m = ab_measurement(report, None, keepalive=True, started_ns=AB_STARTED_NS, ended_ns=AB_ENDED_NS,
                       gnuplot_text=per_request)
    assert m.requests == 1850 and sum(n for _, n in m.completions) == pytest.approx(1850, abs=0.01)
    assert ab_measurement(report, None).completions is None


def test_requests_between_counts_part_of_a_cut_bin():
    bins = [(100.0, 10.0), (100.1, 10.0), (100.2, 10.0)]
    assert requests_between(bins, 100 * S, 101 * S) == pytest.approx(30)
    assert requests_between(bins, int(100.05 * S), int(100.25 * S)) == pytest.approx(5 + 10 + 5)
    assert requests_between(bins, 99 * S, 100 * S) == 0


def test_a_span_is_spread_evenly_after_clipping_to_the_run():
    # 10 requests known to complete in [10.0, 11.0); the run ended at 10.5
    bins = completion_bins([(10.0, 11.0, 10)], 9 * S, int(10.5 * S))
    assert sum(n for _, n in bins) == pytest.approx(10)
    assert [t for t, _ in bins] == [10.0, 10.1, 10.2, 10.3, 10.4]
    assert all(n == pytest.approx(2) for _, n in bins)


def test_vegeta_answers_complete_at_send_plus_latency():
    answers = parse_results((FIXTURES / "vegeta" / "slow-0.3s-rate200.jsonl").read_text())
    spans = completion_times(answers)
    assert len(spans) == len(answers) and all(earliest == latest for earliest, latest, _ in spans)
    first = min(a.sent for a in answers)
    last = max(a.done for a in answers)
    bins = completion_bins(spans, int(first * S), int(last * S) + 1)
    assert sum(n for _, n in bins) == pytest.approx(len(answers))
    # nothing completes before the first answer's latency (0.3 s) has
    # passed, to the bins' tenth of a second
    assert requests_between(bins, int(first * S), int((first + 0.2) * S)) == 0
    assert requests_between(bins, int((first + 0.4) * S), int((first + 0.5) * S)) > 0


def counters(t_s: float, cpu_s: float) -> Counters:
    return Counters(int(t_s * S), int(cpu_s * S), 0, 0, 0, 0, 0)


def test_cpu_per_request_divides_by_the_requests_inside_the_window():
    # cAdvisor read at 1.0 and 3.0 s inside a run of 0.5-3.5 s; 0.5 core over that window
    series = [counters(0.0, 0.0), counters(1.0, 0.2), counters(3.0, 1.2), counters(4.0, 1.5)]
    # the run's rate is 100/s, but only 150 requests completed
    # in the window (a slow start): 1.0 s of CPU / 150 requests
    bins = [(1.0 + i / 10, 7.5) for i in range(20)]
    used = container_usage(series, S // 2, int(3.5 * S), whole=300, whole_rps=100.0, allowance=1.0, completions=bins)
    assert used["cpu_ms_per_request_from"] == PER_REQUEST_IN_WINDOW
    assert used["requests_in_window"] == pytest.approx(150)
    assert used["cpu_ms_per_request"] == pytest.approx(1000 * 1.0 / 150)
    # without per-request times (wrk): the window's rate over the run's
    without = container_usage(series, S // 2, int(3.5 * S), whole=300, whole_rps=100.0, allowance=1.0)
    assert without["cpu_ms_per_request_from"] == PER_REQUEST_RATE
    assert without["cpu_ms_per_request"] == pytest.approx(1000 * 0.5 / 100)


def test_an_inner_window_after_the_last_answer_falls_back_to_the_whole_run():
    # a 1 s run (0.5-1.9 s: ab's process also writes its -g file after its
    # last answer at 1.5 s); cAdvisor read at 1.6 and 1.8 s, both in that
    # tail, where the target idles. Dividing that idle rate by the run's
    # rate would report a cost near zero: the window becomes 0.0-2.0 s
    series = [counters(0.0, 0.0), counters(1.6, 0.5), counters(1.8, 0.501), counters(2.0, 0.502)]
    bins = [(0.5 + i / 10, 10.0) for i in range(10)]  # 100 requests, all done by 1.5 s
    used = container_usage(series, S // 2, int(1.9 * S), whole=100, whole_rps=100.0, allowance=1.0, completions=bins)
    assert not used["inner_window"] and used["window_seconds"] == pytest.approx(2.0)
    assert used["cpu_ms_per_request_from"] == PER_REQUEST_RUN
    assert used["cpu_ms_per_request"] == pytest.approx(1000 * 0.502 / 100)
