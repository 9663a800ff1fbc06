"""make overload end to end on local images, small: nginx-static and
nginx-gridfs's goodput (capacity at 1 and 4 clients, then 1 s windows at
3x and 10x it), then under a few hundred clients, then a 20 MB file to a
few clients in a 256m limit (tools/lab/overload.py as `make overload` runs it),
in a compose project of its own."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.faults.overload import MULTIPLES, WINDOWS

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gridfs-lab-overload-e2e"
PATHS = ["nginx-static", "nginx-gridfs"]
CLIENTS = 300
CONCURRENCIES = [1, 4]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    results = tmp_path_factory.mktemp("overload")
    env = {**os.environ, "OVERLOAD_PROJECT": PROJECT, "RESULTS_DIR": str(results), "BENCH_TARGETS": " ".join(PATHS),
           "OVERLOAD_CLIENTS": str(CLIENTS), "OVERLOAD_SECONDS": "5", "OVERLOAD_FILE": "100KB",
           "OVERLOAD_CONCURRENCIES": " ".join(map(str, CONCURRENCIES)), "OVERLOAD_WINDOW_SECONDS": "1",
           "LARGE_FILE": "20MB", "LARGE_CLIENTS": "4", "LARGE_MEM": "256m"}
    proc = subprocess.run([sys.executable, "tools/lab/overload.py"], cwd=REPO, env=env, capture_output=True, text=True,
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


def test_goodput_capacity_first_then_interleaved_windows_at_each_multiple(run):
    proc, doc, out = run
    rows = {r["path"]: r for r in doc["goodput"]}
    assert set(rows) == set(PATHS), proc.stdout[-3000:]
    windows = doc["goodput_windows"]
    for path, row in rows.items():
        steps = [w for w in windows if w["path"] == path and w["multiple"] == 0]
        # closed loop at 1 client, then 4 only if the rate rose
        assert [w["window"]["workers"] for w in steps] == CONCURRENCIES[:len(steps)]
        best = max(steps, key=lambda w: w["window"]["whole_rate"])
        assert row["capacity_rps"] == best["window"]["whole_rate"] > 0, row
        assert [c["multiple"] for c in row["conditions"]] == list(MULTIPLES)
        for c in row["conditions"]:
            these = [w for w in windows if w["path"] == path and w["multiple"] == c["multiple"]]
            assert len(these) == c["windows"] == WINDOWS
            # offered at the multiple of the capacity measured in the same run
            assert all(w["window"]["rate"] == max(1, round(c["multiple"] * row["capacity_rps"])) for w in these)
            # a window not judged names its bottleneck; a judged one's share is its whole answers over capacity
            assert c["judged"] + len(c["not_judged"]) == WINDOWS
            assert c["judged"] == 0 or c["share_low"] <= c["share"] <= c["share_high"]
        assert row["container"] == "running" and row["oom_kills"] == 0, row
        assert row["verdict"]
    # nginx-static has no admission: offered 3x what it serves, the excess waits in its listen queue and a
    # client may time out (seen here: 3x #1 at 8,630/s, 97% sent, nginx-static at 0.88 of its core), but in the
    # windows judged nginx never cuts an answer it started nor drops a connection
    assert set(rows["nginx-static"]["failures"]) <= {"client timeout"}, rows["nginx-static"]
    # interleaved: every condition's first window before any second one
    opened = [(w["path"], w["multiple"], w["round"]) for w in windows if w["multiple"]]
    firsts = [i for i, (_, _, r) in enumerate(opened) if r == 1]
    assert len(firsts) == len(PATHS) * len(MULTIPLES) and max(firsts) < min(
        i for i, (_, _, r) in enumerate(opened) if r == 2)
    report = (out / "report.md").read_text()
    assert "## Goodput: `100KB` offered open loop at 3x and 10x" in report
    for path, row in rows.items():
        assert f"| {path} | {row['capacity_rps']:g} at c={row['capacity_workers']}" in report
        assert f"**{row['verdict']}** |" in report


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
