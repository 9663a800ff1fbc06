"""ab parsers on outputs captured from real ab runs (tests/fixtures/ab)."""
from pathlib import Path

import pytest

from bench.clients.ab_output import AbOutputError, parse_percentiles, parse_summary, short_answers

FIXTURES = Path(__file__).parent / "fixtures" / "ab"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_summary_of_a_clean_run():
    s = parse_summary(fixture("nginx-1KB-c5.txt"))
    assert (s.complete, s.failed, s.non_2xx, s.document_length) == (500, 0, 0, 1024)
    assert s.rps == pytest.approx(10006.40)
    assert s.time_per_request_ms == pytest.approx(0.100)
    assert s.time_per_request_concurrent_ms == pytest.approx(0.500)
    assert s.transfer_kbps == pytest.approx(12371.20)
    assert s.seconds == pytest.approx(0.050)


def test_time_per_request_across_concurrent_is_concurrent_mean_over_concurrency():
    s = parse_summary(fixture("nginx-1MB-c100.txt"))
    assert s.time_per_request_ms == pytest.approx(s.time_per_request_concurrent_ms / 100, rel=0.01)
    assert s.document_length == 1048576


def test_keepalive_run_parses():
    s = parse_summary(fixture("nginx-1KB-c5-keepalive.txt"))
    assert s.complete == 500 and s.rps > 0


def test_non_2xx_responses_are_counted():
    s = parse_summary(fixture("nginx-404-c5.txt"))
    assert s.non_2xx == 50
    assert s.failed == 0


def test_length_failures_are_counted():
    s = parse_summary(fixture("varlen-failed-c3.txt"))
    assert s.failed == 40


def test_percentiles_keep_fractional_milliseconds():
    p = parse_percentiles(fixture("nginx-1KB-c5.csv"))
    assert sorted(p) == list(range(101))
    assert p[0] <= p[50] <= p[99] <= p[100]
    assert p[50] != int(p[50])


def test_truncated_output_is_an_error():
    text = fixture("nginx-1KB-c5.txt")
    with pytest.raises(AbOutputError, match="Requests per second"):
        parse_summary(text[: text.index("Requests per second")])
    with pytest.raises(AbOutputError):
        parse_percentiles("0,0.1\n")


def test_percentiles_past_the_last_sample_are_the_maximum():
    """ab -n 40 printed a 99th percentile below its 98th: it read past its samples."""
    csv = fixture("nginx-1KB-n40-c1.csv")
    raw = parse_percentiles(csv)
    assert raw[99] < raw[98]  # ab's own row, as captured
    fixed = parse_percentiles(csv, parse_summary(fixture("nginx-1KB-n40-c1.txt")).complete)
    assert fixed[99] == fixed[100] == raw[100]
    assert all(fixed[p] <= fixed[p + 1] for p in range(100))
    assert fixed[50] == raw[50]
    many = fixture("nginx-1KB-c5.csv")
    assert parse_percentiles(many, 500) == parse_percentiles(many)  # 500 requests: every row is a sample


def test_a_run_that_completed_nothing_has_no_rates():
    """ab -t 1 -c 100 on 1 MB through gridfs-fuse: every answer still arriving."""
    s = parse_summary(fixture("fuse-1MB-c100-none-completed.txt"))
    assert (s.complete, s.rps, s.transfer_kbps) == (0, 0.0, 0.0)
    assert s.body_bytes == 7944 and short_answers(s, 1048576) == 0


def test_answers_without_the_file_are_short_whatever_ab_counted():
    """A server that closed every connection without answering: ab counted
    100 complete requests, 0 failed, at 13760 per second."""
    s = parse_summary(fixture("closed-without-answer-c10.txt"))
    assert (s.complete, s.failed, s.body_bytes) == (100, 0, 0)
    assert short_answers(s, 1048576) == 100
    whole = parse_summary(fixture("nginx-1MB-c100.txt"))
    assert short_answers(whole, 1048576) == 0
    assert short_answers(s, 0) == 0  # no size known: nothing to check against
