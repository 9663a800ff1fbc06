"""A path past its capacity sheds load: every lab path answers 503 when a
request's deadline passes before its answer starts. Such answers are
refused, not failed: the case is timed, flagged `refused` with its count
and share, and its requests per second count the 2xx answers only. The
fixtures are real runs of 20261126T050301Z (1 MB at c=100 on FerretDB)."""
from pathlib import Path

import pytest

from bench.clients.ab_output import AbOutputError, parse_summary, short_answers
from bench.clients.timing import ab_measurement, wrk_measurement
from bench.measure.usage import REFUSED
from bench.measure.flags import FLAGS
from bench.report.markdown import render_markdown
from bench.results import FAILED, OK, Results, TargetResult, repeated_run

FIXTURES = Path(__file__).parent / "fixtures"
MB = 1048576


def test_ab_tells_the_kinds_of_failure_and_a_503_is_not_a_cut_body():
    """node: 519 answers, 375 not 2xx; ab counted 374 of them again as
    length failures (a 503's page is not the first answer's length)."""
    text = (FIXTURES / "ab" / "node-1MB-c100-shed.txt").read_text()
    s = parse_summary(text)
    assert (s.complete, s.failed, s.non_2xx) == (519, 374, 375)
    assert (s.failed_connect, s.failed_receive, s.failed_length, s.failed_exceptions) == (0, 0, 374, 0)
    assert s.socket_failures == 0 and short_answers(s, MB) == 0
    m = ab_measurement(text, None, expected_size=MB)
    assert (m.requests, m.failed, m.refused) == (519, 0, 375)
    assert m.rps == pytest.approx(32.36 * 144 / 519, abs=1e-3)
    assert m.time_per_request_ms == pytest.approx(1000 / m.rps)
    # a body cut short is still failed: the same run with 20 fewer megabytes read
    cut = text.replace("HTML transferred:       152051020", f"HTML transferred:       {152051020 - 20 * MB}")
    assert ab_measurement(cut, None, expected_size=MB).failed == 19


def test_a_count_of_failures_without_their_kinds_is_unreadable():
    text = (FIXTURES / "ab" / "node-1MB-c100-shed.txt").read_text()
    with pytest.raises(AbOutputError, match="kinds"):
        parse_summary(text.replace("   (Connect: 0, Receive: 0, Length: 374, Exceptions: 0)\n", ""))


def test_wrk_counts_answers_not_2xx_as_refused():
    text = (FIXTURES / "wrk" / "flask-1MB-c100-shed.txt").read_text()
    m = wrk_measurement(text, threads=1)
    assert (m.requests, m.failed, m.refused) == (695, 0, 300)
    assert m.rps == pytest.approx(43.24 * 395 / 695, abs=1e-3)


def rep(requests: int, refused: int, rps: float, failed: int = 0) -> dict:
    return {"tool": "ab", "requests": requests, "failed": failed, "refused": refused, "seconds": 16.0, "rps": rps,
            "time_per_request_ms": 1000 / rps if rps else 0.0, "transfer_kbps": 1.0, "p50_ms": 2800.0,
            "p90_ms": 3000.0, "p99_ms": 3050.0, "max_ms": 3066.0, "raw_output": None, "flags": []}


def test_a_case_that_sheds_is_timed_and_flagged_with_its_share():
    run = repeated_run("flask", "1MB.bin", MB, 100, [rep(580, 235, 21.5), rep(610, 230, 23.7), rep(598, 220, 23.6)])
    assert run.status == OK and REFUSED in run.flags
    assert (run.refused, run.answers, run.rps) == (685, 1788, 23.6)
    assert run.refused_share == pytest.approx(685 / 1788)
    md = render_markdown(Results("r", "now", targets=[TargetResult("flask", "http://flask:8080", True)],
                                 runs=[run]))
    assert "| 685 (38%) |" in md and f"{FLAGS[REFUSED].mark} `{REFUSED}`: {FLAGS[REFUSED].legend}" in md


def test_a_case_whose_answers_were_all_refused_fails():
    run = repeated_run("flask", "1MB.bin", MB, 100, [rep(580, 235, 21.5), rep(300, 300, 0.0), rep(598, 220, 23.6)])
    assert run.status == FAILED and "every answer of a repetition was refused" in run.error


def test_a_cut_body_still_fails_a_case_that_also_sheds():
    run = repeated_run("flask", "1MB.bin", MB, 100, [rep(580, 235, 21.5, failed=1), rep(598, 220, 23.6)])
    assert run.status == FAILED and run.error == "1 failed requests over 2 repetitions"
