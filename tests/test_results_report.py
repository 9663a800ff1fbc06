"""The results model round-trips through JSON, and report.md is rendered from
it: seed 000's figures beside ours, ratios to nginx-static, failures."""
import json
from pathlib import Path

from bench.clients.ab_output import parse_percentiles, parse_summary
from bench.report.markdown import render_markdown
from bench.results import SCHEMA, Comparison, OpenLoop, Results, Run, StorePass, SweepPoint, TargetResult, ToolResult, \
    WorkingSet

FIXTURES = Path(__file__).parent / "fixtures" / "ab"


def run_from_fixture(target: str, fixture: str, file: str, size: int, concurrency: int) -> Run:
    s = parse_summary((FIXTURES / f"{fixture}.txt").read_text())
    p = parse_percentiles((FIXTURES / f"{fixture}.csv").read_text())
    return Run(target, file, size, concurrency, requests=s.complete, failed=s.failed + s.non_2xx, seconds=s.seconds,
               rps=s.rps, time_per_request_ms=s.time_per_request_ms, transfer_kbps=s.transfer_kbps,
               p50_ms=p[50], p90_ms=p[90], p99_ms=p[99], raw_output=f"{fixture}.txt")


def sample(server=None) -> Results:
    static = run_from_fixture("nginx-static", "nginx-1KB-c5", "1KB.bin", 1024, 5)
    flask = Run("flask", "1KB.bin", 1024, 5, requests=500, rps=static.rps / 4,
                time_per_request_ms=static.time_per_request_ms * 4, raw_output="flask-1KB-c5.txt")
    return Results(
        run_id="20261122T000000Z", started_at="2026-11-22T00:00:00+00:00",
        finished_at="2026-11-22T00:01:00+00:00",
        parameters={"MONGO_IMAGE": "img", "BENCH_CONCURRENCY": "5"},
        environment={"server": server or {"product": "MongoDB", "version": "7.0.14"}},
        targets=[TargetResult("nginx-static", "http://nginx-static:8080", True),
                 TargetResult("flask", "http://flask:8080", True),
                 TargetResult("node", "http://node:8080", False, error="never answered")],
        runs=[static, flask])


def test_json_round_trip(tmp_path):
    results = sample()
    results.write_json(tmp_path / "results.json")
    again = Results.load(tmp_path / "results.json")
    assert again == results
    assert not (tmp_path / "results.tmp").exists()


def test_results_json_says_its_schema_first(tmp_path):
    sample().write_json(tmp_path / "results.json")
    doc = json.loads((tmp_path / "results.json").read_text())
    assert next(iter(doc)) == "schema" and doc["schema"] == SCHEMA == 1


def test_a_newer_benchs_unknown_keys_are_ignored(tmp_path):
    """A results.json from a newer bench (a higher schema, keys this one does
    not know at every level) still loads, with what this bench knows."""
    tool = ToolResult("wrk", 100.0, 1.0, 2.0, 3.0, 4.0, 0, {"median": 100.0, "noisy": False})
    results = sample()
    results.comparisons = [Comparison("flask", "1KB.bin", 1024, 5, tool, tool)]
    results.open_loop = [OpenLoop("flask", "1KB.bin", 1024, 50.0)]
    results.sweep = [SweepPoint("flask", "1KB.bin", 1024, 5, "ab", 10, 0, 100.0, 1.0, 2.0, 0.1, None)]
    results.writes = [StorePass("gridfs", "write", 1, "in order", 4, 1024)]
    results.working_set = WorkingSet("40x1KB", 40, 40960, 5, runs=[Run("flask", "set 40x1KB", 1024, 5)])
    doc = results.to_dict()
    doc |= {"schema": SCHEMA + 1, "a_new_section": {"rows": []}}
    for row in (doc["targets"] + doc["runs"] + doc["comparisons"] + doc["open_loop"] + doc["sweep"]
                + doc["writes"] + doc["working_set"]["runs"]
                + [doc["working_set"], doc["comparisons"][0]["wrk"], doc["comparisons"][0]["ab_keepalive"]]):
        row["a_new_figure"] = 1.5
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert Results.load(tmp_path / "results.json") == results


def test_unverified_target_or_failed_requests_fail_the_run():
    results = sample()
    assert results.failed  # node did not verify
    results.targets = results.targets[:2]
    assert not results.failed
    results.runs[1].status = "failed"
    assert results.failed


def test_report_shows_ours_beside_seed_000_and_ratios():
    results = sample()
    md = render_markdown(results)
    static, flask = results.runs
    # seed 000's time per request as requests per second: 1000 / 0.174 ms, 1000 / 1.982 ms
    assert f"| 1KB | {static.rps:.0f} [5747] | {flask.rps:.0f} (0.250) [505] |" in md
    assert "| node | http://node:8080 | **no** | never answered |" in md  # the page's url column, in both
    assert "FerretDB" not in md


def test_report_names_ferretdb_and_warns_it_bounds_gridfs_rows():
    md = render_markdown(sample({"product": "FerretDB", "version": "v1.24.2", "wire_version": "7.0.42"}))
    assert "**FerretDB v1.24.2 (MongoDB wire version 7.0.42, backend not reported)**" in md
    md = render_markdown(sample({"product": "FerretDB", "version": "v1.24.2", "wire_version": "7.0.42",
                                 "backend": "PostgreSQL"}))
    assert "**FerretDB v1.24.2 (MongoDB wire version 7.0.42, PostgreSQL backend)**" in md
    assert "CPU per request" in md
    md = render_markdown(sample({"product": "MongoDB", "version": "7.0.14", "storage_engine": "wiredTiger"}))
    assert "**MongoDB 7.0.14 (wiredTiger)**" in md


def test_report_lists_the_images_each_container_ran_and_swapped_bases():
    results = sample()
    results.parameters.update({"PYTHON_IMAGE": "python:3.12-slim", "FLASK_IMAGE": "python:3.13-slim",
                               "BENCH_IMAGE": "python:3.12-slim"})
    results.environment["images"] = {"flask": {"image": "gridfs-lab-flask", "image_id": "sha256:" + "ab" * 32}}
    md = render_markdown(results)
    assert "PYTHON_IMAGE=`python:3.12-slim`, FLASK_IMAGE=`python:3.13-slim`" in md
    assert "BENCH_IMAGE=" not in md  # not swapped: the shared base says it
    assert "| flask | `gridfs-lab-flask` | `abababababab` |" in md


def test_report_lists_failed_cases():
    results = sample()
    results.runs[1].status, results.runs[1].error = "failed", "7 failed requests over 3 repetitions"
    md = render_markdown(results)
    assert "| flask | 1KB | 5 | failed | - | - | - | - | - | 0 | 0 | 7 failed requests over 3 repetitions |" in md


def test_report_shows_conformance_and_failed_cases():
    results = sample()
    results.targets[0].conformance = [{"case": "GET 1KB.bin", "expected": "200", "got": "200", "passed": True}]
    results.targets[0].conforming = True
    results.targets[1].conformance = [
        {"case": "Range first byte (bytes=0-0) 1KB.bin", "expected": "206 bytes 0-0/1024", "got": "200",
         "passed": False}]
    results.targets[1].conforming = False
    md = render_markdown(results)
    assert "| nginx-static | 1 | 0 | yes |" in md
    assert "| flask | 0 | 1 | **no**, timed anyway (rows marked) |" in md
    assert "| flask | Range first byte (bytes=0-0) 1KB.bin | 206 bytes 0-0/1024 | 200 |" in md
    again = Results.from_dict(results.to_dict())
    assert again.targets[1].conforming is False and again.targets[1].conformance[0]["got"] == "200"
