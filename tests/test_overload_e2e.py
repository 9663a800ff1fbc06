"""make overload end to end on local images, small: nginx-static and
nginx-gridfs under a few hundred clients, then a 20 MB file to a few
clients in a 256m limit (tools/overload.py as `make overload` runs it), in a
compose project of its own."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gridfs-lab-overload-e2e"
PATHS = ["nginx-static", "nginx-gridfs"]
CLIENTS = 300


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    results = tmp_path_factory.mktemp("overload")
    env = {**os.environ, "OVERLOAD_PROJECT": PROJECT, "RESULTS_DIR": str(results), "BENCH_TARGETS": " ".join(PATHS),
           "OVERLOAD_CLIENTS": str(CLIENTS), "OVERLOAD_SECONDS": "5", "OVERLOAD_FILE": "100KB",
           "LARGE_FILE": "20MB", "LARGE_CLIENTS": "4", "LARGE_MEM": "256m"}
    proc = subprocess.run([sys.executable, "tools/overload.py"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1800)
    dirs = sorted(results.glob("overload-*"))
    assert len(dirs) == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads((dirs[0] / "results.json").read_text()), dirs[0]


def test_every_path_is_checked_both_ways_and_holds(run):
    proc, doc, _ = run
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {(r["check"], r["path"]): r for r in doc["overload"]}
    assert set(rows) == {(c, p) for c in ("clients", "large file") for p in PATHS}
    for (check, path), r in rows.items():
        assert r["oom_kills"] == 0 and r["container"] == "running", r
        assert r["broken"] == {}, r
        assert r["verdict"] == "ok", r
        # the peak was sampled from the container's cgroup, within its limit
        assert r["peak_mib"] is not None and 0 < r["peak_mib"] <= r["limit_mib"], r
    for path in PATHS:
        # under the lab's 3 s deadline a client waits at most that long for
        # an answer, whole or 503, and asks again: more answers than clients
        assert rows[("clients", path)]["answers"] > CLIENTS, "every client got an answer and asked again"
        assert rows[("clients", path)]["limit_mib"] == 512
        large = rows[("large file", path)]
        # LARGE_DEADLINE_MS (300 s) for the memory check: every answer whole; on
        # the stand-in 4 x 20 MB headers came after 2.0-2.75 s, near the lab's 3 s
        assert large["limit_mib"] == 256 and large["answers"] == 4 and large["whole"] == 4, large
        assert "deadline 300 s" in large["load"], large


def test_report_and_the_project_taken_down(run):
    _, doc, out = run
    report = (out / "report.md").read_text()
    assert f"## {CLIENTS} clients at once on `100KB`" in report
    assert "## `20MB` to 4 clients at once" in report
    for r in doc["overload"]:
        assert f"| {r['path']} | {r['answers']} | {r['whole']} |" in report
    left = subprocess.run(["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={PROJECT}"],
                          capture_output=True, text=True, timeout=60)
    assert left.stdout.strip() == "", "overload left containers behind"
