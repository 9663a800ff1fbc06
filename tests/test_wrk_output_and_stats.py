"""wrk parser on outputs captured from real wrk runs (tests/fixtures/wrk),
and the repetition statistics."""
from pathlib import Path

import math
import random

import pytest

from bench.measure.stats import NOISY_WIDTH, summarize
from bench.clients.wrk_output import WrkOutputError, parse

FIXTURES = Path(__file__).parent / "fixtures" / "wrk"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_clean_run():
    s = parse(fixture("nginx-1KB-c5.txt"))
    assert (s.requests, s.non_2xx_3xx, s.socket_errors) == (58689, 0, 0)
    assert s.seconds == pytest.approx(2.00)
    assert s.rps == pytest.approx(29294.60)
    assert s.latency_avg_ms == pytest.approx(0.43374)
    assert s.latency_max_ms == pytest.approx(16.26)
    assert (s.p50_ms, s.p90_ms, s.p99_ms) == pytest.approx((0.115, 1.12, 6.02))
    assert s.transfer_bytes_per_s == pytest.approx(35.51 * 1024 ** 2)


def test_units_of_large_transfers():
    s = parse(fixture("nginx-1MB-c100.txt"))
    assert s.p50_ms == pytest.approx(67.03)
    assert s.transfer_bytes_per_s == pytest.approx(716.27 * 1024 ** 2)
    assert s.rps == pytest.approx(s.requests / s.seconds, rel=0.05)


def test_percentiles_in_seconds_padded_with_a_blank():
    """wrk writes '1.14s ' (padded to the width of 'ms'): captured from flask
    serving 100 KB from FerretDB to 100 connections."""
    s = parse(fixture("flask-100KB-c100-seconds.txt"))
    assert (s.p50_ms, s.p90_ms, s.p99_ms) == pytest.approx((900.35, 1370.0, 1700.0))
    assert s.latency_max_ms == pytest.approx(1840.0)
    assert (s.requests, s.seconds, s.rps) == (259, pytest.approx(3.03), pytest.approx(85.53))


def test_non_2xx_and_socket_errors_are_counted():
    assert parse(fixture("nginx-404-c5.txt")).non_2xx_3xx == 31687
    stopped = parse(fixture("nginx-stopped-midway.txt"))
    assert stopped.socket_errors == 13 + 70789
    assert stopped.socket_error_kinds == {"connect": 0, "read": 13, "write": 70789, "timeout": 0}


def test_output_without_latency_distribution_is_an_error():
    text = fixture("plain-http10-c3.txt")
    with pytest.raises(WrkOutputError, match="--latency"):
        parse(text.replace("Latency Distribution", "").replace("  99%", "  98%"))


def _stats_line(name: str, *fields: str, within: str) -> str:
    """A thread-statistics line as wrk.c's print_stats writes it: each field
    right-aligned in 8, 10 and 9 columns less a blank per unit letter it
    lacks, cut to that width."""
    line = f"    {name:<10}"
    for text, width in zip(fields, (8, 10, 9)):
        pad = 2 - text[-1].isalpha() - text[-2].isalpha()
        line += f"{text[:width - pad]:>{width - pad}}" + " " * pad
    return line + f"{within:>8}%"


def test_the_latency_line_is_read_by_column():
    text = (FIXTURES / "nginx-1MB-c100.txt").read_text()
    old = next(line for line in text.splitlines() if line.startswith("    Latency "))
    # the captured line is what the rule writes
    assert _stats_line("Latency", *old.split()[1:4], within=old.split()[4][:-1]) == old
    # a field that fills its column touches the next one: no blank to split on
    touching = _stats_line("Latency", "245.63ms", "123456.78m", "2.25s", within="83.74")
    assert "245.63ms123456.78 " in touching
    got = parse(text.replace(old, touching))
    assert (got.latency_avg_ms, got.latency_max_ms) == (245.63, 2250.0)
    # what cannot be read names the line
    with pytest.raises(WrkOutputError, match=r"not a wrk duration: '-nanus' in wrk's line 'Latency"):
        parse(text.replace(old, _stats_line("Latency", "-nanus", "0.00us", "0.00us", within="0.00")))


def test_summarize_and_half_range():
    s = summarize([100.0, 110.0, 90.0])
    assert (s.median, s.min, s.max) == (100.0, 90.0, 110.0)
    assert s.half_range == pytest.approx(0.1) and s.mad == pytest.approx(0.1) and s.noisy  # 100 ± 10%
    assert not summarize([100.0, 101.0, 99.0]).noisy
    with pytest.raises(ValueError):
        summarize([])


def test_one_stray_repetition_is_not_noise():
    # nine repetitions agree and one ran 12% fast: the range says ±6%, the interval x/÷1.03
    s = summarize([1000.0] * 9 + [1120.0])
    assert s.half_range == pytest.approx(0.06) and s.mad == 0.0 and not s.noisy


def test_noisy_is_an_interval_wider_than_x_10_percent():
    # three repetitions 2% apart: the 95% interval (t, 2 df) is about x/÷1.05; 6% apart, x/÷1.16
    steady, rough = summarize([980.0, 1000.0, 1020.0]), summarize([940.0, 1000.0, 1060.0])
    assert steady.width == pytest.approx(math.exp(4.3027 * 0.02 / math.sqrt(3)), rel=0.01) and not steady.noisy
    assert rough.width > NOISY_WIDTH and rough.noisy
    # one repetition, or all alike: nothing to doubt; a repetition at 0 beside others is noise whatever the rest
    assert not summarize([1000.0]).noisy and not summarize([5.0, 5.0, 5.0]).noisy
    assert summarize([0.0, 1000.0, 1000.0]).noisy and summarize([0.0, 1000.0, 1000.0]).width is None


def test_noisy_fires_less_as_repetitions_grow_and_more_as_the_machine_swings():
    # at this machine's 9% swing three repetitions are noisy nearly always, 30 rarely;
    # at 3% three are noisy now and then, ten almost never
    rng = random.Random(26)

    def share_noisy(sd, n, trials=400):
        return sum(summarize([rng.gauss(1000, sd) for _ in range(n)]).noisy for _ in range(trials)) / trials
    calm = [share_noisy(30, n) for n in (3, 6, 10)]
    rough = [share_noisy(90, n) for n in (3, 10, 30)]
    print("noisy at 3% sd, 3/6/10 repetitions: " + ", ".join(f"{x:.1%}" for x in calm))
    print("noisy at 9% sd, 3/10/30 repetitions: " + ", ".join(f"{x:.1%}" for x in rough))
    assert calm[2] <= calm[1] <= calm[0] and calm[2] < 0.05
    assert rough[2] <= rough[1] <= rough[0] and rough[0] > 0.8 and rough[2] < 0.2
    assert all(r >= c for r, c in zip(rough, calm))
