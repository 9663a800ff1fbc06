"""`make matrix` and the CI workflow's steps on local images, end to end:
tools/lab/matrix.py runs the lab twice through tools/ci/ci-lab.sh run (the
workflow's own step), GUNICORN_WORKERS=1 then 2, with two targets and tiny
settings; then the workflow's summary and compare steps on those two runs."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gridfs-lab-e2e-matrix"


@pytest.fixture(scope="module")
def matrix():
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    results = REPO / "results" / f"e2e-matrix-{os.getpid()}"
    results.mkdir(parents=True)
    env = {**os.environ, "RESULTS_DIR": str(results), "MATRIX_ENV_FILE": "local.env", "MATRIX_PROJECT": PROJECT,
           "MATRIX_RUN_TIMEOUT": "1200", "BENCH_TARGETS": "nginx-static flask", "FILE_SIZES": "1KB",
           "BENCH_CONCURRENCY": "5", "BENCH_DURATION": "1", "BENCH_WARMUP": "1", "BENCH_MIN_REQUESTS": "0",
           "BENCH_REPETITIONS": "3", "BENCH_TARGET_WIDTH": "off",
           "BENCH_TOOLS": "ab", "BENCH_OPEN_LOOP": "0", "BENCH_SWEEP": "off",
           "BENCH_PROFILE": "full", "BENCH_WRITE": "off", "FILE_SET": "off"}
    try:
        done = subprocess.run([sys.executable, str(REPO / "tools" / "lab" / "matrix.py"), "GUNICORN_WORKERS", "1", "2"],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=2700)
        yield done, results, env
    finally:
        subprocess.run(["docker", "compose", "--env-file", "local.env", "-p", PROJECT, "down", "-v",
                        "--remove-orphans", "-t", "2"], cwd=REPO, capture_output=True, timeout=300)
        shutil.rmtree(results, ignore_errors=True)


def outcome(done: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in done.stdout.splitlines() if "[bench]" in line or "matrix" in line)[-6000:] \
        + done.stderr[-2000:]


def test_matrix_runs_each_value_and_tables_them(matrix):
    done, results, _ = matrix
    assert done.returncode == 0, outcome(done)
    (out,) = results.glob("matrix-*")
    data = json.loads((out / "matrix.json").read_text())
    assert [(r["value"], r["exit_code"], r["error"]) for r in data["runs"]] == [("1", 0, None), ("2", 0, None)]
    for r in data["runs"]:
        ran = json.loads((results / r["run_id"] / "results.json").read_text())
        assert ran["parameters"]["GUNICORN_WORKERS"] == r["value"] and ran["status"] == "complete"
    # the second run differs from the first in the varied setting alone
    assert [d["name"] for d in data["differences"][1] if d["kind"] == "parameter"] == ["GUNICORN_WORKERS"]
    rows = {row["target"]: row for row in data["rows"]}
    assert set(rows) == {"nginx-static", "flask"}
    for row in rows.values():
        first, second = row["cells"]
        assert first["status"] == "ok" and len(first["rps"]) == 3 and min(first["rps"]) > 0
        assert second["status"] == "ok" and second["rps"]["ratio"] > 0 and second["rps"]["n_b"] == 3
    table = (out / "matrix.md").read_text()
    assert "| target | file | c | GUNICORN_WORKERS=1 | GUNICORN_WORKERS=2 |" in table
    assert "differs from the first run (GUNICORN_WORKERS=2): GUNICORN_WORKERS 1 -> 2" in table


def test_the_workflows_summary_and_compare_steps(matrix):
    done, results, env = matrix
    assert done.returncode == 0, outcome(done)
    (out,) = results.glob("matrix-*")
    first, second = (results / r["run_id"] for r in json.loads((out / "matrix.json").read_text())["runs"])
    step = [str(REPO / "tools" / "ci" / "ci-lab.sh")]
    summary = subprocess.run([*step, "summary", str(second)], capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.startswith("# GridFS Serving Lab report") and "## Headline" in summary.stdout
    assert "## Requests per second" not in summary.stdout and "## Verification" not in summary.stdout
    compared = subprocess.run([*step, "compare", str(first), str(second), "1000"], capture_output=True, text=True,
                              timeout=120)
    assert compared.returncode == 0, compared.stderr
    assert "- parameter `GUNICORN_WORKERS` 1 -> 2" in compared.stdout
    assert "## Regressions above 1000%" in compared.stdout and (second / "compare.json").exists()
    missing = subprocess.run([*step, "summary", str(results / "no-such-run")], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode != 0 and "no-such-run/report.md: no such file" in missing.stderr
