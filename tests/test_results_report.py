"""The results model round-trips through JSON, and report.md is rendered from
it: seed 000's figures beside ours, ratios to nginx-static, failures."""
from pathlib import Path

from bench.ab_output import parse_percentiles, parse_summary
from bench.report import render_markdown
from bench.results import Results, Run, TargetResult

FIXTURES = Path(__file__).parent / "fixtures" / "ab"


def run_from_fixture(target: str, fixture: str, file: str, size: int, concurrency: int) -> Run:
    s = parse_summary((FIXTURES / f"{fixture}.txt").read_text())
    p = parse_percentiles((FIXTURES / f"{fixture}.csv").read_text())
    return Run(target, file, size, concurrency, s.complete, s.failed + s.non_2xx, s.rps,
               s.time_per_request_ms, s.transfer_kbps, p[50], p[99], f"{fixture}.txt")


def sample(server=None) -> Results:
    static = run_from_fixture("nginx-static", "nginx-1KB-c5", "1KB.bin", 1024, 5)
    flask = Run("flask", "1KB.bin", 1024, 5, 500, 0, static.rps / 4, static.time_per_request_ms * 4,
                1.0, 1.0, 2.0, "flask-1KB-c5.txt")
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


def test_unverified_target_or_failed_requests_fail_the_run():
    results = sample()
    assert results.failed  # node did not verify
    results.targets = results.targets[:2]
    assert not results.failed
    results.runs[1].failed = 3
    assert results.failed


def test_report_shows_ours_beside_seed_000_and_ratios():
    results = sample()
    md = render_markdown(results)
    static = results.runs[0]
    assert f"| 1KB | {static.time_per_request_ms:.3f} (0.174) | " \
           f"{results.runs[1].time_per_request_ms:.3f} (1.982) |" in md
    assert f"{static.rps:.0f} (1.000)" in md
    assert f"{results.runs[1].rps:.0f} (0.250)" in md
    assert "| node | **no** | never answered |" in md
    assert "FerretDB" not in md


def test_report_names_ferretdb_and_warns_it_bounds_gridfs_rows():
    md = render_markdown(sample({"product": "FerretDB", "version": "v1.24.2", "wire_version": "7.0.42"}))
    assert "**FerretDB v1.24.2 (MongoDB wire version 7.0.42, PostgreSQL backend)**" in md
    assert "CPU per request" in md


def test_report_lists_failed_cases():
    results = sample()
    results.runs[1].failed = 7
    assert "- flask 1KB.bin c=5: 7 failed of 500" in render_markdown(results)


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
