"""results.csv, Bencher's BMF and github-action-benchmark's JSONs, written
from results/example/results.json and parsed back: names, units and values
against results.json itself."""
import csv
import gzip
import json
from pathlib import Path

import pytest

from bench.report.exports import BENCHER, BIGGER, CSV, SMALLER, write_exports
from bench.results import Results
from support.kept_runs import A_A_RUN, EXAMPLE_ROUNDS, change_run

EXAMPLE = Path(__file__).parent.parent / "results" / "example" / "results.json"
# a BENCH_CPU_DESIGN=same-moment run as kept (docs/methodology.md cites it), and a rounds design run
SAME_MOMENT = Path(__file__).parent.parent / "results" / "evidence" / "20261129T051316Z" / "results.json.gz"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("exports")
    raw = json.loads(EXAMPLE.read_text())
    names = write_exports(Results.from_dict(raw), out)
    assert names == [CSV, BENCHER, BIGGER, SMALLER]
    return out, raw


def ok_runs(raw: dict) -> list[dict]:
    return [run for run in raw["runs"] if run["status"] == "ok"]


def test_csv_has_a_row_per_case_and_tool_with_results_json_figures(written):
    out, raw = written
    with (out / CSV).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(raw["runs"]) + 2 * len(raw["comparisons"])
    ab = {(r["target"], r["file"], int(r["concurrency"])): r for r in rows if r["tool"] == "ab"}
    for run in raw["runs"]:
        row = ab[(run["target"], run["file"], run["concurrency"])]
        assert row["status"] == run["status"]
        if run["status"] != "ok":  # a failed case: a row, no figure
            assert (row["rps"], row["error"]) == ("", run["error"])
            continue
        assert float(row["rps"]) == run["rps"]
        assert float(row["rps_min"]) == run["spread"]["min"] and float(row["rps_max"]) == run["spread"]["max"]
        assert float(row["cpu_ms_per_request"]) == run["cpu"][run["target"]]["cpu_ms_per_request"]
        assert row["flags"].split() == run["flags"]
        assert (float(row["p50_ms"]), float(row["p99_ms"])) == (run["p50_ms"], run["p99_ms"])  # ab's own
        assert row["wrk_corrected_p99_ms"] == ""
        # a headline row's ratio is its rounds' (with their interval), else the two rows' rates
        case = (run["target"], run["file"], run["concurrency"])
        rounds = next((r for r in (raw.get("rounds") or {}).get("rows", ())
                       if (r["target"], r["file"], r["concurrency"]) == case), None)
        if rounds is not None:
            assert (float(row["rps_ratio_to_nginx_static"]), float(row["rps_ratio_low"]),
                    float(row["rps_ratio_high"]), int(row["rps_ratio_rounds"])) == (
                rounds["rps"]["ratio"], rounds["rps"]["low"], rounds["rps"]["high"], rounds["rps"]["rounds"])
            # the CPU ratio's own rounds: same-moment windows behind schedule have none
            assert int(row["cpu_ratio_rounds"]) == rounds["cpu"]["rounds"]
            continue
        base = next(b for b in raw["runs"] if (b["target"], b["file"], b["concurrency"])
                    == ("nginx-static", run["file"], run["concurrency"]))
        assert float(row["rps_ratio_to_nginx_static"]) == pytest.approx(run["rps"] / base["rps"], abs=1e-4)
    wrk = {(r["target"], r["file"]): r for r in rows if r["tool"] == "wrk"}
    ab_k = {(r["target"], r["file"]): r for r in rows if r["tool"] == "ab-k"}
    for c in raw["comparisons"]:
        row = wrk[(c["target"], c["file"])]
        assert row["status"] == ("failed" if c["wrk"]["failed"] else "ok")
        assert float(row["rps"]) == c["wrk"]["rps"]
        # wrk's percentiles are corrected for coordinated omission: never under ab's (and the answers') names
        assert (row["p50_ms"], row["p99_ms"]) == ("", "")
        assert (float(row["wrk_corrected_p50_ms"]), float(row["wrk_corrected_p99_ms"])) == (
            c["wrk"]["p50_ms"], c["wrk"]["p99_ms"])
        row = ab_k[(c["target"], c["file"])]
        assert (float(row["p99_ms"]), row["wrk_corrected_p99_ms"]) == (c["ab_keepalive"]["p99_ms"], "")
    loops = {(o["target"], o["file"]): o for o in raw["open_loop"]}
    for row in ab.values():
        if row["status"] == "ok":
            assert float(row["open_loop_p99_ms"]) == loops[(row["target"], row["file"])]["p99_ms"]


def test_bencher_metric_format(written):
    out, raw = written
    bmf = json.loads((out / BENCHER).read_text())
    for run in ok_runs(raw):
        size = run["file"].removesuffix(".bin")
        measures = bmf[f"{run['target']}/{size}/c={run['concurrency']}/ab"]
        assert measures["throughput"] == {"value": run["rps"], "lower_value": run["spread"]["min"],
                                          "upper_value": run["spread"]["max"]}
        assert measures["cpu-ms-per-request"]["value"] == run["cpu"][run["target"]]["cpu_ms_per_request"]
    for c in raw["comparisons"]:
        if c["ab_keepalive"]["failed"]:
            continue
        size = c["file"].removesuffix(".bin")
        assert bmf[f"{c['target']}/{size}/c={c['concurrency']}/ab-k"]["throughput"]["value"] == c["ab_keepalive"]["rps"]
    for o in raw["open_loop"]:
        latency = bmf[f"{o['target']}/{o['file'].removesuffix('.bin')}/open-loop"]["latency"]["value"]
        assert latency == round(o["p99_ms"] * 1e6)  # Bencher's built-in latency is in nanoseconds
    # every metric is BMF's shape: numbers only, value required
    for measures in bmf.values():
        for metric in measures.values():
            assert "value" in metric and all(isinstance(v, (int, float)) for v in metric.values())


def test_github_action_benchmark_formats(written):
    out, raw = written
    bigger = json.loads((out / BIGGER).read_text())
    smaller = json.loads((out / SMALLER).read_text())
    for entries in (bigger, smaller):
        for e in entries:
            assert {"name", "unit", "value"} <= set(e) and isinstance(e["value"], (int, float))
        assert len({e["name"] for e in entries}) == len(entries)
    by_name = {e["name"]: e for e in bigger}
    tools_ok = sum(not c[tool]["failed"] for c in raw["comparisons"] for tool in ("ab_keepalive", "wrk"))
    ratios = [e for e in bigger if e["name"].endswith(" ratio to nginx-static")]  # a headline row's, with rounds
    assert len(ratios) == sum(1 for r in (raw.get("rounds") or {}).get("rows", ()) if r.get("rps"))
    assert len(bigger) == len(ok_runs(raw)) + tools_ok + len(ratios)
    for run in ok_runs(raw):
        e = by_name[f"{run['target']}/{run['file'].removesuffix('.bin')}/c={run['concurrency']}/ab requests/s"]
        assert (e["unit"], e["value"]) == ("req/s", run["rps"])
    small = {e["name"]: e for e in smaller}
    for run in ok_runs(raw):
        e = small[f"{run['target']}/{run['file'].removesuffix('.bin')}/c={run['concurrency']}/ab CPU per request"]
        assert (e["unit"], e["value"]) == ("ms", run["cpu"][run["target"]]["cpu_ms_per_request"])
    for o in raw["open_loop"]:
        assert small[f"{o['target']}/{o['file'].removesuffix('.bin')}/open-loop p99"]["value"] == o["p99_ms"]


def test_a_failed_case_is_a_csv_row_and_no_metric(tmp_path):
    results = Results.load(EXAMPLE)
    run = results.runs[0]
    run.status, run.error = "failed", "3 failed requests over 3 repetitions"
    write_exports(results, tmp_path)
    with (tmp_path / CSV).open(newline="") as f:
        row = next(csv.DictReader(f))
    assert (row["status"], row["rps"], row["error"]) == ("failed", "", run.error)
    name = f"{run.target}/{run.file.removesuffix('.bin')}/c={run.concurrency}/ab"
    assert name not in json.loads((tmp_path / BENCHER).read_text())
    assert not [e for e in json.loads((tmp_path / BIGGER).read_text()) if e["name"].startswith(name + " ")]


def test_an_ab_runs_rows_name_wrk_and_its_corrected_percentiles(tmp_path):
    """An A/B run's rows are timed by wrk (each twin's windows): results.csv
    names the tool, and gives wrk's percentiles, corrected for coordinated
    omission and not the answers' own, only as wrk_corrected_*."""
    raw = change_run(A_A_RUN)
    write_exports(Results.from_dict(raw), tmp_path)
    with (tmp_path / CSV).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(raw["runs"]) == 4
    for run, row in zip(raw["runs"], rows):
        assert {r["tool"] for r in run["repetitions"]} == {"wrk"} and (row["target"], row["tool"]) == (
            run["target"], "wrk")
        assert (row["p50_ms"], row["p99_ms"]) == ("", "")
        assert (float(row["wrk_corrected_p50_ms"]), float(row["wrk_corrected_p99_ms"])) == (
            run["p50_ms"], run["p99_ms"])
    names = json.loads((tmp_path / BENCHER).read_text())
    assert "flask-postgres/1KB/c=100/wrk" in names and not [n for n in names if n.endswith("/ab")]


@pytest.mark.parametrize("source, design", [(EXAMPLE_ROUNDS, "rounds"), (SAME_MOMENT, "same-moment")],
                         ids=["rounds", "same-moment"])
def test_the_cpu_ratio_says_which_design_gave_it(tmp_path, source, design):
    """results.csv's cpu_design: the windows a row's CPU ratio came from,
    rounds.cpu_design's (the rounds' when results.json names none) for a
    headline case, the rounds' own for any other; empty where the ratio is
    no rounds' (nginx-static's 1.0). Bencher gets the same-moment ratio
    under a measure of its own, never one series across two designs."""
    raw = json.loads(gzip.decompress(source.read_bytes()) if source.suffix == ".gz" else source.read_text())
    assert (raw["rounds"].get("cpu_design") or "rounds") == design
    raw["rounds"]["rows"][0]["headline"] = False  # a case at another concurrency: its CPU from the rounds' windows
    write_exports(Results.from_dict(raw), tmp_path)
    with (tmp_path / CSV).open(newline="") as f:
        rows = {(r["target"], r["file"], int(r["concurrency"])): r for r in csv.DictReader(f) if r["tool"] == "ab"}
    bmf = json.loads((tmp_path / BENCHER).read_text())
    rounds = {(r["target"], r["file"], r["concurrency"]): r for r in raw["rounds"]["rows"]}
    designs = set()
    for case, row in rows.items():
        found = rounds.get(case)
        if row["status"] != "ok" or not (found and found.get("cpu")):
            assert row["cpu_design"] == "", case
            continue
        expected = design if found["headline"] else "rounds"
        designs.add(expected)
        assert (row["cpu_design"], float(row["cpu_ratio_to_nginx_static"])) == (expected, found["cpu"]["ratio"])
        measures = bmf[f"{case[0]}/{case[1].removesuffix('.bin')}/c={case[2]}/ab"]
        name = "cpu-ratio-to-nginx-static" + ("-same-moment" if expected == "same-moment" else "")
        assert measures[name]["value"] == found["cpu"]["ratio"]
        assert [m for m in measures if m.startswith("cpu-ratio")] == [name]
    assert designs == {design, "rounds"}
    assert rows[("nginx-static", "1KB.bin", 100)]["cpu_design"] == ""
