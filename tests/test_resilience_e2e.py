"""make resilience end to end on local images, short: a GridFS path and the
SQL path each under load while their database restarts and pauses
(tools/lab/resilience.py, as `make resilience` runs it), in a project of its own."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gridfs-lab-resilience-e2e"
TARGETS = ["nginx-static", "nginx-gridfs", "flask-postgres"]  # nginx-static has no database: skipped
RATE = 50


def resilience(env_extra: dict, timeout: float) -> subprocess.CompletedProcess:
    env = {**os.environ, "RESILIENCE_PROJECT": PROJECT, **env_extra}
    return subprocess.run([sys.executable, "tools/lab/resilience.py"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    results = tmp_path_factory.mktemp("resilience")
    proc = resilience({"RESULTS_DIR": str(results), "BENCH_TARGETS": " ".join(TARGETS), "FILE_SIZES": "1KB",
                       "RESILIENCE_RATE": str(RATE), "RESILIENCE_SECONDS": "19", "RESILIENCE_FAULT_AT": "5",
                       "RESILIENCE_PAUSE": "3", "RESILIENCE_TRIALS": "2"}, timeout=1800)
    dirs = sorted(results.glob("resilience-*"))
    assert len(dirs) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((dirs[0] / "results.json").read_text()), dirs[0]


def test_every_path_with_a_database_is_measured_under_both_faults(run):
    proc, doc, _ = run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert doc["failed"] == []
    cases = {(r["path"], r["fault"], r["database"]) for r in doc["resilience"]}
    assert cases == {("nginx-gridfs", "restart", "mongo"), ("nginx-gridfs", "pause", "mongo"),
                     ("flask-postgres", "restart", "postgres"), ("flask-postgres", "pause", "postgres")}
    assert doc["server"]["product"] == "FerretDB"
    for r in doc["resilience"]:
        # the load ran at its rate and was served whole before the fault
        assert r["requests"] == pytest.approx(RATE * 19, rel=0.05), r
        assert r["level_before"] == pytest.approx(RATE, rel=0.1), r
        assert r["good"] + r["errors"] == r["requests"]
        assert 0 < r["outage_s"] < 30, r
        assert sum(r["outage_answers"].values()) > 0, r
        # the load's probe saw the database go silent and answer again (a paused one may answer a moment
        # before `unpause` returns)
        assert r["answering_after_s"] is not None and -1 < r["answering_after_s"] < 30, r


def test_each_fault_is_felt_and_every_path_serves_again_within_5_s(run):
    """What a path answers while its database is away is its own (the
    report's verdict judges it); here: the fault reached the path (an answer
    other than a whole 200, or one held past a second) and it recovered."""
    _, doc, _ = run
    for r in doc["resilience"]:
        felt = set(r["outage_answers"]) - {"200"} or r["outage_slowest_ms"] > 1000
        assert felt, r
        assert r["first_good_s"] is not None and r["first_good_s"] < 5, r
        assert r["rate_back_s"] is not None, r


def test_report_answers_and_the_project_taken_down(run):
    _, doc, out = run
    report = (out / "report.md").read_text()
    for r in doc["resilience"]:
        assert f"| {r['path']} | {r['database']} | {r['fault']} |" in report
    assert "FerretDB standing in for MongoDB" in report
    for r in doc["resilience"]:
        with open(out / f"{r['path']}-{r['fault']}-t{r['trial']}.csv") as f:
            rows = list(csv.DictReader(f))
        # the CSV is the row's evidence: a line per request, its errors the row's
        assert len(rows) == r["requests"]
        assert sum(1 for row in rows if row["code"] != "200" or row["whole_file"] != "1") == r["errors"], r
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == "", "resilience left containers behind"


def test_each_case_runs_its_trials_with_the_fault_at_another_moment(run):
    _, doc, out = run
    for path, fault in {(r["path"], r["fault"]) for r in doc["resilience"]}:
        trials = [r for r in doc["resilience"] if (r["path"], r["fault"]) == (path, fault)]
        assert sorted(r["trial"] for r in trials) == [1, 2]
        assert len({r["fault_at_s"] for r in trials}) == 2 and all(5 <= r["fault_at_s"] < 8 for r in trials)
    assert {(s["path"], s["fault"], s["trials"]) for s in doc["summary"]} == {
        (p, f, 2) for p in ("nginx-gridfs", "flask-postgres") for f in ("restart", "pause")}
    assert "## Over 2 trials each" in (out / "report.md").read_text()


def test_a_bad_setting_stops_it_before_anything_starts():
    proc = resilience({"RESILIENCE_PAUSE": "ten"}, timeout=120)
    assert proc.returncode == 2
    assert "RESILIENCE_PAUSE='ten': expected a whole number" in proc.stderr
    assert "[resilience]" not in proc.stdout  # nothing built or started
