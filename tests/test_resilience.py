"""make resilience's pure parts: vegeta's answers parsed from a real capture
(tests/fixtures/vegeta/), a case analysed (outage answers, hangs, truncated
200s, recovery), the settings and the choice of paths checked before anything
starts, and the report."""
from pathlib import Path

import pytest

from bench.report.resilience import render
from bench.faults.resilience import Fault, analyse, answering_again, outcome
from bench.clients.vegeta_output import Answer, VegetaOutputError, parse_results
from support.modules import module_from_file

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "tests" / "fixtures" / "vegeta"
GOOD = "a" * 64


def _driver():
    return module_from_file(ROOT / "tools" / "lab" / "resilience.py", "resilience_driver")


def steady(start: float, seconds: float, rate: int, answer) -> list[Answer]:
    """rate requests a second from start; answer(sent) -> (latency, code, sha, error)."""
    out = []
    for i in range(int(seconds * rate)):
        sent = start + i / rate
        latency, code, sha, error = answer(sent)
        out.append(Answer(sent=sent, latency=latency, code=code, bytes_in=1024 if sha else 0, body_sha256=sha,
                          error=error))
    return out


FAULT = Fault(kind="pause", database="mongo", began=1010.0, down=1010.1, back=1020.0)


def test_a_path_that_fails_fast_and_recovers_is_right():
    def answer(sent):
        if FAULT.down <= sent < FAULT.back:
            return 0.004, 503, "b" * 64, "503 Service Unavailable"
        return 0.002, 200, GOOD, ""
    row = analyse("nginx-gridfs", 100, steady(1000.0, 30, 100, answer), GOOD, FAULT)
    assert row.requests == 3000
    assert row.outage_answers == {"200": 10, "503": 990}  # 10 answered before the stop took hold
    assert row.errors == 990 and row.truncated == 0
    assert row.level_before == pytest.approx(100, abs=1)
    assert row.first_good_s == pytest.approx(0.002, abs=0.001)
    assert row.rate_back_s == 1.0
    assert row.verdict.startswith("recovered in")


def test_hangs_timeouts_and_truncated_answers_are_named():
    def answer(sent):
        if FAULT.down <= sent < FAULT.back - 5:
            return 30.0, 0, "", 'Get "http://flask:8080/files/1KB.bin": context deadline exceeded'
        if FAULT.back - 5 <= sent < FAULT.back:
            return FAULT.back - sent + 0.5, 200, "c" * 64, "unexpected EOF"  # held, then cut short
        if FAULT.back <= sent < FAULT.back + 6:
            return 0.01, 500, "d" * 64, "500 Internal Server Error"
        return 0.002, 200, GOOD, ""
    row = analyse("flask", 100, steady(1000.0, 30, 100, answer), GOOD, FAULT)
    assert row.outage_answers == {"200": 10, "client timeout": 490, "200 truncated": 500}
    assert row.truncated == 500
    assert row.first_good_s == pytest.approx(6.0, abs=0.02)
    assert row.rate_back_s == 7.0
    for words in ("500 truncated 200s", "hangs: an outage answer took 30.0 s", "490 x client timeout",
                  "first good answer 6.0 s after"):
        assert words in row.verdict, row.verdict


def test_no_recovery_within_the_run():
    def answer(sent):
        return (0.002, 200, GOOD, "") if sent < FAULT.down else (0.001, 0, "", "connect: connection refused")
    row = analyse("node", 100, steady(1000.0, 30, 100, answer), GOOD, FAULT)
    assert row.first_good_s is None and row.rate_back_s is None
    assert "no good answer after the database was back" in row.verdict
    assert "x connection refused" in row.verdict


@pytest.mark.parametrize("code, sha, error, expected", [
    (200, GOOD, "", "200"), (200, "e" * 64, "", "200 truncated"), (503, "", "503 Service Unavailable", "503"),
    (0, "", "Get \"x\": net/http: request canceled (Client.Timeout exceeded while awaiting headers)",
     "client timeout"),
    (0, "", "read tcp 172.18.0.5:40000->172.18.0.3:8080: read: connection reset by peer", "connection reset"),
    (0, "", "something else", "client error"),
])
def test_outcome(code, sha, error, expected):
    assert outcome(Answer(0, 0, code, 0, sha, error), GOOD) == expected


def test_parse_results_rejects_other_text():
    with pytest.raises(VegetaOutputError, match="line 1"):
        parse_results("Requests [total] 10\n")


def test_settings_are_checked_before_anything_starts():
    driver = _driver()
    lab = {"BENCH_TARGETS": "nginx-static nginx-gridfs", "FILE_SIZES": "1KB 1MB"}
    s = driver.read_settings({}, lab)
    assert s["rate"] == 100 and s["targets"] == ["nginx-static", "nginx-gridfs"] and s["file"] == "1KB.bin"
    for env, words in [({"RESILIENCE_RATE": "fast"}, "RESILIENCE_RATE='fast': expected a number"),
                       ({"RESILIENCE_FILE": "5MB.bin"}, "RESILIENCE_FILE='5MB.bin': not a seeded file"),
                       ({"RESILIENCE_FAULTS": "restart kill"}, "RESILIENCE_FAULTS='restart kill'"),
                       ({"RESILIENCE_SECONDS": "12"}, "RESILIENCE_SECONDS=12: too short")]:
        with pytest.raises(driver.LabError, match=words):
            driver.read_settings(env, lab)


@pytest.mark.lab  # docker compose config
def test_paths_with_a_database_come_from_compose_labels():
    driver = _driver()
    import json
    import subprocess
    config = subprocess.run(["docker", "compose", "--env-file", str(ROOT / ".env"), "config", "--format", "json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    services = json.loads(config.stdout)["services"]
    paths = driver.paths_with_database(services, ["nginx-static", "httpd-static", "nginx-gridfs", "flask", "node",
                                                  "gridfs-fuse", "nginx-cache", "flask-postgres"])
    assert paths == [("nginx-gridfs", "mongo"), ("flask", "mongo"), ("node", "mongo"), ("gridfs-fuse", "mongo"),
                     ("nginx-cache", "mongo"), ("flask-postgres", "postgres")]
    with pytest.raises(driver.LabError, match="BENCH_TARGETS names nginx-gridf,"):
        driver.paths_with_database(services, ["nginx-gridf,"])


def test_report_has_a_row_per_case_and_names_the_stand_in():
    def answer(sent):
        return (0.004, 503, "", "503") if FAULT.down <= sent < FAULT.back else (0.002, 200, GOOD, "")
    row = analyse("nginx-gridfs", 100, steady(1000.0, 30, 100, answer), GOOD, FAULT)
    doc = {"run_id": "resilience-x", "env_file": "local.env", "started": "a", "finished": "b",
           "settings": {"file": "1KB.bin", "rate": 100, "seconds": 30, "fault_at": 10, "pause_s": 10},
           "server": {"product": "FerretDB", "version": "v1.24.2", "backend": "PostgreSQL"},
           "resilience": [row.to_dict()], "failed": [{"path": "node", "database": "mongo", "fault": "restart",
                                                      "error": "node: no answer within 240 s"}]}
    text = render(doc)
    assert "| nginx-gridfs | mongo | pause | 1 | - | not probed | 10.0 s | 3000 | 990 | 990 x 503, 10 x 200 |" in text
    assert "| node | mongo | restart |" in text and "not measured: node: no answer" in text
    assert "FerretDB standing in for MongoDB" in text


def test_a_path_that_stays_at_80_percent_errors_after_the_return_is_not_recovered():
    """One good answer in five after the database is back: its first good
    answer comes at once, which alone read "recovered in 0.00 s"."""
    def answer(sent):
        if sent < FAULT.down:
            return 0.002, 200, GOOD, ""
        if sent >= FAULT.back and round(sent * 100) % 5 == 0:
            return 0.002, 200, GOOD, ""
        return 0.003, 503, "b" * 64, "503 Service Unavailable"
    row = analyse("flask", 100, steady(1000.0, 30, 100, answer), GOOD, FAULT)
    assert row.first_good_s is not None and row.first_good_s < 0.1
    assert row.recovered_s is None
    assert row.errors_after_back == 800  # 10 s x 100/s after the return, four in five failed
    assert "not recovered: 800 errors after the database was back (80% of those sent)" in row.verdict
    assert not row.verdict.startswith("recovered")


def test_a_path_back_with_a_few_errors_recovers_when_the_rate_holds_clean():
    def answer(sent):
        if FAULT.down <= sent < FAULT.back + 2:
            return 0.003, 503, "b" * 64, "503 Service Unavailable"
        return 0.002, 200, GOOD, ""
    row = analyse("node", 100, steady(1000.0, 30, 100, answer), GOOD, FAULT)
    assert row.errors_after_back == 200 and row.recovered_s == 3.0
    assert row.verdict.startswith("recovered in 3 s (first good answer after 2.")


def test_trials_are_summarised_by_median_and_maximum():
    from dataclasses import replace
    from bench.faults.resilience import summarise

    def answer_after(delay):
        def answer(sent):
            if FAULT.down <= sent < FAULT.back + delay:
                return 0.003, 503, "b" * 64, "503 Service Unavailable"
            return 0.002, 200, GOOD, ""
        return answer
    rows = [replace(analyse("flask", 100, steady(1000.0, 30, 100, answer_after(d)), GOOD, FAULT), trial=i)
            for i, d in enumerate((0, 2, 9), 1)]
    (line,) = summarise(rows)
    # the third still failing 9 s after the return: not recovered within the run
    assert (line["trials"], line["right"]) == (3, 2)
    assert line["recovered_median_s"] == 2.0 and line["recovered_max_s"] == 3.0
    assert line["verdict"] == "wrong in 1 of 3 trials (1 not recovered)"
    doc = {"run_id": "r", "env_file": "local.env", "started": "a", "finished": "b",
           "settings": {"file": "1KB.bin", "rate": 100, "seconds": 30, "fault_at": 10, "pause_s": 10,
                        "jitter_s": 3.0},
           "resilience": [r.to_dict() for r in rows], "summary": [line], "failed": []}
    text = render(doc)
    assert "## Over 3 trials each" in text
    assert "| flask | mongo | pause | 3 | 2 | not probed | 2.00 / 9.00 s | 2.00 / 3.00 s | 3 / 3 ms |" in text


def test_the_database_answering_is_shown_beside_and_moves_no_figure():
    """The load's probe says when the database answered again. A slow start
    explains a slow recovery, but the probe can be late too (PostgreSQL's,
    by about 4 s, while flask-postgres served): every figure still counts
    from the command that brought the database back."""
    restart = Fault(kind="restart", database="postgres", began=1010.0, down=1010.5, back=1011.6)
    events = [("answering", 1000.2), ("silent", 1010.3), ("answering", 1013.0)]
    assert answering_again(events, restart.began) == 1013.0
    assert answering_again([("answering", 1000.2)], restart.began) is None  # never seen silent: not probed
    assert answering_again([("silent", 1010.3)], restart.began) is None  # never back within the run

    def answer(sent):
        if restart.began <= sent < 1013.05:
            return 0.003, 503, "b" * 64, "503 Service Unavailable"
        return 0.002, 200, GOOD, ""
    answers = steady(1000.0, 30, 100, answer)
    unprobed = analyse("flask-postgres", 100, answers, GOOD, restart)
    probed = analyse("flask-postgres", 100, answers, GOOD, Fault(**{**restart.__dict__, "answering": 1013.0}))
    assert probed.answering_after_s == pytest.approx(1.4) and unprobed.answering_after_s is None
    assert probed.to_dict() | {"answering_after_s": None} == unprobed.to_dict()
    assert probed.errors_after_back == 145 and probed.recovered_s == 3.0 and probed.outage_s == pytest.approx(1.6)
    text = render({"run_id": "r", "env_file": "local.env", "started": "a", "finished": "b",
                   "settings": {"file": "1KB.bin", "rate": 100, "seconds": 30, "fault_at": 10, "pause_s": 10},
                   "resilience": [probed.to_dict(), unprobed.to_dict()], "failed": []})
    assert "| flask-postgres | postgres | restart | 1 | - | 1.40 s | 1.6 s |" in text
    assert "| flask-postgres | postgres | restart | 1 | - | not probed | 1.6 s |" in text
    # a paused database may answer a moment before `unpause` returns: "at once", not a negative time
    early = analyse("flask-postgres", 100, answers, GOOD, Fault(**{**restart.__dict__, "answering": 1011.0}))
    shown = render({"run_id": "r", "env_file": "local.env", "started": "a", "finished": "b",
                    "settings": {"file": "1KB.bin", "rate": 100, "seconds": 30, "fault_at": 10, "pause_s": 10},
                    "resilience": [early.to_dict()], "failed": []})
    assert "| restart | 1 | - | 0.00 s |" in shown
