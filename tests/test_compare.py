"""bench compare on real captured runs (tests/fixtures/compare, README.txt
says how each was made): a pair with identical settings marks nothing
significant, GUNICORN_WORKERS=1 against 2 marks flask's figures (two sync
workers on flask's one pinned core: slower); the
differing parameters come first; a failed case reads `failed`; --fail-above
gates; a run that cannot be read is a clear error; make matrix's table."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report.compare import (CompareError, compare, load, main, mann_whitney, regressions, render_markdown,
                           smallest_p)
from bench.results import Results
from support.kept_runs import A_A_RUN, A_B_RUN, change_run

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "compare"
NOISE_A, NOISE_B = FIXTURES / "noise-a.json", FIXTURES / "noise-b.json"
WORKERS_2 = FIXTURES / "workers-2.json"      # the settings of noise-a but GUNICORN_WORKERS=2
FLASK_KILLED = FIXTURES / "flask-killed.json"  # BENCH_DURATION=2, flask's container killed while timing


def changes(comparison: dict, target: str) -> dict:
    (case,) = [c for c in comparison["cases"] if c["target"] == target]
    return case


def cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "loadgen")}
    return subprocess.run([sys.executable, "-m", "bench", "compare", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def test_exact_mann_whitney_matches_its_tables():
    # every B above every A: the two most extreme of C(n1 + n2, n1) arrangements
    assert mann_whitney([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert mann_whitney([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney([1, 2, 4], [3, 5, 6]) == pytest.approx(0.2)
    assert mann_whitney([1, 2, 3], [1, 2, 3]) == 1.0
    assert smallest_p(3, 3) == pytest.approx(0.1) and smallest_p(5, 5) < 0.01


def test_identical_settings_mark_no_case_apart_and_nothing_is_ever_significant():
    comparison = compare(load(NOISE_A), load(NOISE_B))
    assert comparison["differences"] == []
    assert comparison["cases"], "the noise pair has cases in common"
    for case in comparison["cases"]:
        assert case["status"] == "compared"
        for metric, change in case["metrics"].items():
            assert change is None or not change["apart"], (case["target"], metric, change)
    markdown = render_markdown(comparison, "a", "b")
    assert "No parameter, environment fact or timing setting differs." in markdown
    assert "apart" not in markdown.split("## Per case")[1].split("\n\nRatios")[0]
    assert "**Not a verdict.** Two separate runs differ in machine, time and neighbours" in markdown


def test_more_gunicorn_workers_is_apart_for_flask_but_never_called_significant():
    comparison = compare(load(NOISE_A), load(WORKERS_2))
    flask = changes(comparison, "flask")["metrics"]
    for metric, change in flask.items():
        assert change["apart"] and change["direction"] == "worse", (metric, change)
        assert not change["significant"]
    assert flask["rps"]["ratio"] < 0.9 and flask["cpu_ms_per_request"]["ratio"] > 1.1
    markdown = render_markdown(comparison, "a", "b")
    (row,) = [line for line in markdown.splitlines() if line.startswith("| flask |")]
    assert row.count("apart") == 3 and "~" not in row and "**" not in row


def test_nginx_static_moved_across_runs_that_cannot_touch_it_and_normalising_takes_it_out():
    """The captured pair differs in GUNICORN_WORKERS only, which nginx-static
    never reads: its 0.93x is drift between two runs, which the repetitions
    of each run cannot show. Normalised to each run's nginx-static, flask's
    change is what is left after that drift."""
    plain = compare(load(NOISE_A), load(WORKERS_2))
    nginx = changes(plain, "nginx-static")["metrics"]["rps"]
    assert nginx["ratio"] < 0.95 and not nginx["significant"]
    normal = compare(load(NOISE_A), load(WORKERS_2), normalise=True)
    assert normal["normalised_to"] == "nginx-static"
    assert "nginx-static" not in {c["target"] for c in normal["cases"]}
    flask_plain = changes(plain, "flask")["metrics"]["rps"]["ratio"]
    flask_normal = changes(normal, "flask")["metrics"]["rps"]["ratio"]
    assert flask_normal == pytest.approx(flask_plain / nginx["ratio"], rel=0.05)
    assert "divided by the same run's nginx-static" in render_markdown(normal, "a", "b")


def test_differing_parameters_come_first():
    comparison = compare(load(NOISE_A), load(WORKERS_2))
    params = [d for d in comparison["differences"] if d["kind"] == "parameter"]
    assert params == [{"kind": "parameter", "name": "GUNICORN_WORKERS", "a": "1", "b": "2"}]
    markdown = render_markdown(comparison, "a", "b")
    assert markdown.index("- parameter `GUNICORN_WORKERS` 1 -> 2") < markdown.index("## Per case")


def test_database_version_is_a_difference(tmp_path):
    # the same captured run with its server read as another version: the
    # environment line names it (product and version come from buildInfo)
    data = json.loads(NOISE_B.read_text())
    data["environment"]["server"]["version"] = "v2.0.0"
    (tmp_path / "results.json").write_text(json.dumps(data))
    comparison = compare(load(NOISE_A), load(tmp_path))
    version = load(NOISE_A).environment["server"]["version"]
    assert {"kind": "environment", "name": "server.version", "a": version, "b": "v2.0.0"} in comparison["differences"]


def test_a_failed_case_renders_failed_never_a_number():
    b = load(FLASK_KILLED)
    failed = [r for r in b.runs if not r.ok]
    assert failed and all(r.target == "flask" for r in failed)
    comparison = compare(load(NOISE_A), b)
    case = changes(comparison, "flask")
    assert case["status"] == "failed" and case["metrics"] == {}
    (row,) = [line for line in render_markdown(comparison, "a", "b").splitlines() if line.startswith("| flask |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == ["failed", "failed", "failed"]
    assert "failed in B" in cells[-1]
    assert regressions(comparison, 1000) == [f"flask 1KB c=5: failed in B ({case['b_error']})"]


def test_a_row_timed_by_wrk_has_no_p99_to_compare():
    """Two kept A/B runs (flask-postgres and its twin, 1 KB at c=100 in
    both): their rows are wrk's windows, whose p99 counts samples wrk adds
    for slow answers (results.CORRECTED_LATENCY_TOOLS), not the answers'
    own. No p99 ratio, so --fail-above cannot trip on one; req/s and CPU
    are compared as ever."""
    a, b = (Results.from_dict(change_run(path)) for path in (A_B_RUN, A_A_RUN))
    comparison = compare(a, b)
    assert {c["target"] for c in comparison["cases"]} == {"flask-postgres", "flask-postgres-b"}
    for case in comparison["cases"]:
        reps = a.run_for(case["target"], case["file"], case["concurrency"]).repetitions
        assert {r["tool"] for r in reps} == {"wrk"} and all(r["p99_ms"] > 0 for r in reps)  # wrk printed one
        assert case["metrics"]["p99_ms"] is None
        assert case["metrics"]["rps"] and case["metrics"]["cpu_ms_per_request"]
    markdown = render_markdown(comparison, "a", "b")
    (row,) = [line for line in markdown.splitlines() if line.startswith("| flask-postgres |")]
    assert [c.strip() for c in row.strip("|").split("|")][5] == "-"  # the p99 column
    assert "a row timed by wrk has none" in markdown
    assert regressions(comparison, 0) and not [r for r in regressions(comparison, 0) if "p99" in r]


def test_fail_above_exits_1_on_a_regression_beyond_the_repetitions(tmp_path):
    # B with two gunicorn workers after A with one: flask's req/s fell
    worse = cli(str(NOISE_A), str(WORKERS_2), "--fail-above", "10", "--out", str(tmp_path))
    assert worse.returncode == 1, worse.stderr
    assert "regression: flask 1KB c=5: req/s" in worse.stderr
    assert "regression: nginx-static" not in worse.stderr  # its change is under 10%
    report = json.loads((tmp_path / "compare.json").read_text())
    assert report["regressions"] and report["fail_above"] == 10
    # the same change is an improvement the other way round; a threshold above it passes too
    flask = changes(compare(load(NOISE_A), load(WORKERS_2)), "flask")["metrics"]
    largest = max(abs(c["ratio"] - 1) for c in flask.values()) * 100
    assert cli(str(WORKERS_2), str(NOISE_A), "--fail-above", "10", "--out", str(tmp_path)).returncode == 0
    assert cli(str(NOISE_A), str(WORKERS_2), "--fail-above", str(largest + 1), "--out",
               str(tmp_path)).returncode == 0
    assert cli(str(NOISE_A), str(NOISE_B), "--fail-above", "0", "--out", str(tmp_path)).returncode == 0


def test_writes_beside_run_b_by_default(tmp_path):
    run_b = tmp_path / "20990101T000000Z"
    run_b.mkdir()
    shutil.copy(WORKERS_2, run_b / "results.json")
    done = cli(str(NOISE_A), str(run_b))
    assert done.returncode == 0, done.stderr
    assert (run_b / "compare.md").read_text().startswith("# Comparison:")
    assert json.loads((run_b / "compare.json").read_text())["b"]["run_id"] == load(WORKERS_2).run_id


def test_a_run_that_cannot_be_read_is_named(tmp_path):
    missing = tmp_path / "nowhere"
    done = cli(str(missing), str(NOISE_B))
    assert done.returncode == 2 and f"{missing}: no such file" in done.stderr
    broken = tmp_path / "results.json"
    broken.write_text("{ not json")
    done = cli(str(NOISE_A), str(broken))
    assert done.returncode == 2 and f"{broken}: not JSON" in done.stderr
    with pytest.raises(CompareError, match="not a bench results.json"):
        broken.write_text('{"runs": [{"target": "x"}]}')
        load(str(broken))
    assert main([str(NOISE_A), str(missing)]) == 2


def test_matrix_table_and_unknown_variable(tmp_path):
    import matrix
    runs = []
    for value, fixture in (("1", NOISE_A), ("2", WORKERS_2)):
        run_id = load(fixture).run_id
        (tmp_path / run_id).mkdir()
        shutil.copy(fixture, tmp_path / run_id / "results.json")
        runs.append({"value": value, "run_id": run_id, "exit_code": 0, "error": None, "log": "run.log"})
    markdown, data = matrix.table("GUNICORN_WORKERS", runs, tmp_path)
    (flask,) = [r for r in data["rows"] if r["target"] == "flask"]
    assert flask["cells"][1]["rps"]["apart"] and not flask["cells"][1]["rps"]["significant"]
    assert "| target | file | c | GUNICORN_WORKERS=1 | GUNICORN_WORKERS=2 |" in markdown
    assert "GUNICORN_WORKERS 1 -> 2" in markdown
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "lab" / "matrix.py"), "NO_SUCH_SETTING", "1", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "VAR='NO_SUCH_SETTING' is not a setting in .env" in done.stderr


def test_fixtures_are_captured_runs():
    for path in (NOISE_A, NOISE_B, WORKERS_2, FLASK_KILLED):
        results = Results.load(path)
        assert results.run_id and results.environment.get("server"), path
        assert all(len(r.repetitions) == 3 for r in results.runs if r.ok), path


def test_a_moved_reference_warns_that_the_machine_changed(tmp_path):
    # the same captured run with nginx-static 30% slower in every repetition:
    # no setting of it changed, so the machine did
    data = json.loads(NOISE_B.read_text())
    for run in data["runs"]:
        if run["target"] == "nginx-static":
            for rep in run["repetitions"]:
                rep["rps"] *= 0.7
    (tmp_path / "results.json").write_text(json.dumps(data))
    comparison = compare(load(NOISE_A), load(tmp_path))
    (warning,) = [w for w in comparison["warnings"] if "the reference" in w]
    assert warning.startswith("nginx-static, the reference, moved beyond its repetitions in 1 case(s) "
                              "(nginx-static 1KB c=5 0.")
    assert "the machine itself was not the same" in render_markdown(comparison, "a", "b")
    assert not [w for w in compare(load(NOISE_A), load(NOISE_B))["warnings"] if "the reference" in w]


@pytest.mark.parametrize("args", [["compare", "--help"], ["--help"], ["-h"]])
def test_help_prints_usage_and_exits_zero(args):
    """`python -m bench compare --help` crashed on a % in a help string."""
    proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT / "loadgen", capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and "compare" in proc.stdout


def test_an_unknown_command_is_named_with_the_usage():
    proc = subprocess.run([sys.executable, "-m", "bench", "comapre"], cwd=ROOT / "loadgen", capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "unknown command 'comapre'" in proc.stderr and "usage:" in proc.stderr
