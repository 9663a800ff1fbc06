"""The whole lab, end to end, as a user runs it: `docker compose up bench` on
the local images (make local-images), with small files and few requests.
Then a bench run with a target that does not exist must fail and name it."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROJECT = f"gridfs-lab-e2e-{os.getpid()}"
SIZES = "1KB 300KB"          # one file within a chunk, one across two chunks
CONCURRENCY = [1, 8]


def env_value(name: str) -> str:
    for line in (REPO / "local.env").read_text().splitlines():
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1]
    raise KeyError(name)


def compose(*args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    files = ["--env-file", "local.env"] + (["--env-file", "cpus-2.env"] if os.cpu_count() < 4 else [])
    return subprocess.run(["docker", "compose", "-p", PROJECT, *files, *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    results = tmp_path_factory.mktemp("results")
    env = {**os.environ, "RESULTS_DIR": str(results), "FILE_SIZES": SIZES,
           "BENCH_CONCURRENCY": " ".join(map(str, CONCURRENCY)), "BENCH_REQUESTS": "40",
           "BENCH_WARMUP_REQUESTS": "8"}
    try:
        up = compose("up", "--build", "--exit-code-from", "bench", "bench", env=env, timeout=1800)
        yield up, results, env
    finally:
        compose("down", "-v", "--remove-orphans", "-t", "2", env=env, timeout=300)
        shutil.rmtree(results, ignore_errors=True)  # written by root in containers


def test_bench_exits_zero_with_every_target_verified_and_timed(lab):
    up, results, _ = lab
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr[-4000:]
    data = json.loads((results / "latest" / "results.json").read_text())
    targets = env_value("BENCH_TARGETS").split()
    assert [t["name"] for t in data["targets"]] == targets
    assert all(t["verified"] and t["error"] is None for t in data["targets"]), data["targets"]
    cases = {(r["target"], r["file"], r["concurrency"]) for r in data["runs"]}
    assert cases == {(t, f"{s}.bin", c) for t in targets for s in SIZES.split() for c in CONCURRENCY}
    for run in data["runs"]:
        assert run["rps"] > 0 and run["failed"] == 0 and run["requests"] == 40, run
        assert run["p50_ms"] <= run["p99_ms"]
        assert (results / "latest" / run["raw_output"]).exists()


def test_results_record_what_produced_the_run(lab):
    _, results, _ = lab
    data = json.loads((results / "latest" / "results.json").read_text())
    assert data["parameters"]["MONGO_IMAGE"] == env_value("MONGO_IMAGE")
    assert data["parameters"]["FILE_SIZES"] == SIZES
    assert data["environment"]["server"]["product"] == "FerretDB"
    assert data["environment"]["host_cores"] == os.cpu_count()


def test_report_has_the_seed_table_and_names_ferretdb(lab):
    _, results, _ = lab
    report = (results / "latest" / "report.md").read_text()
    assert "FerretDB v1.24.2" in report
    assert "| File size | " + " | ".join(env_value("BENCH_TARGETS").split()) + " |" in report
    assert "(0.174)" in report  # seed 000's nginx figure beside ours for 1KB


def test_a_target_that_never_answers_is_named_and_fails_the_run(lab):
    up, results, env = lab
    assert up.returncode == 0
    bad = compose("run", "--rm", "--no-deps", "-e", "BENCH_TARGETS=nginx-static no-such-path",
                  "-e", "BENCH_STARTUP_TIMEOUT=3", "bench", env=env, timeout=600)
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert "no-such-path: FAILED verification" in bad.stdout
    runs = sorted(p for p in results.iterdir() if p.is_dir() and not p.is_symlink())
    assert len(runs) == 2, "a second run must not overwrite the first"
    data = json.loads((results / "latest" / "results.json").read_text())
    failed = {t["name"]: t for t in data["targets"]}["no-such-path"]
    assert not failed["verified"] and "never answered" in failed["error"]
    assert {r["target"] for r in data["runs"]} == {"nginx-static"}
