"""The A/B mode's parts that need no running lab: its settings, the judged
table and its page, the calibration lookup, and make ab's twin as compose
itself reads it (docker compose config). The whole A/B runs in
tests/test_compose_e2e.py."""
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.benchmark.change import WINDOW_STRETCH, blocks, case_window_seconds, judge, upstream_of, window_metrics
from bench.check_settings import change_errors
from bench.clients.timing import served_rate
from bench.report.change import SHEDDING, last_calibration, render_change
from bench.results import Results, TargetResult
from bench.settings import SettingsError, from_env

import change as change_tool
import change_gate
import gate_rule
from lab_compose import newest_result, run_stopped_at

REPO = Path(__file__).resolve().parent.parent

TARGETS = "nginx-static flask flask-b"


def test_a_change_run_is_read_from_its_variables():
    cfg = from_env({"BENCH_TARGETS": TARGETS, "AB_A": "flask", "AB_B": "flask-b", "AB_BLOCKS": "10",
                    "AB_THRESHOLD": "3%", "AB_FILES": "1KB", "AB_CONCURRENCY": "5 100", "AB_CHANGE": "x",
                    "AB_WINDOW": "3", "AB_WARMUP": "0", "BENCH_DURATION": "9", "BENCH_WARMUP": "9"})
    assert (cfg.ab.a, cfg.ab.b, cfg.ab.blocks, cfg.ab.threshold, cfg.ab.files, cfg.ab.concurrency) == (
        "flask", "flask-b", 10, 0.03, ("1KB",), (5, 100))
    # the A/B's windows are its own, whatever the timed cases' are
    assert (cfg.ab.window, cfg.ab.warmup, cfg.duration, cfg.warmup) == (3, 0, 9, 9)
    defaults = from_env({"BENCH_TARGETS": TARGETS, "AB_A": "flask", "AB_B": "flask-b"}).ab
    assert (defaults.blocks, defaults.window, defaults.warmup) == (12, 3, 2)
    # plain compose: nobody restarts the twins unless make ab (tools/lab/change.py) is there to
    assert defaults.restart_twins is False
    assert from_env({"BENCH_TARGETS": TARGETS, "AB_A": "flask", "AB_B": "flask-b",
                     "AB_RESTART_TWINS": "every-block"}).ab.restart_twins is True
    assert from_env({"BENCH_TARGETS": TARGETS}).ab is None


@pytest.mark.parametrize("env, named", [
    ({"AB_A": "flask"}, "AB_A"),
    ({"AB_A": "flask", "AB_B": "node-b"}, "AB_B"),
    ({"AB_A": "flask", "AB_B": "flask"}, "AB_B"),
    ({"AB_B": "flask-b"}, "AB_B"),
    ({"AB_A": "flask", "AB_B": "flask-b", "AB_BLOCKS": "5"}, "AB_BLOCKS"),
    ({"AB_A": "flask", "AB_B": "flask-b", "AB_WINDOW": "0"}, "AB_WINDOW"),
    ({"AB_A": "flask", "AB_B": "flask-b", "AB_WARMUP": "-1"}, "AB_WARMUP"),
    ({"AB_A": "flask", "AB_B": "flask-b", "AB_THRESHOLD": "0"}, "AB_THRESHOLD"),
    ({"AB_A": "flask", "AB_B": "flask-b", "AB_KIND": "B/A"}, "AB_KIND"),
])
def test_a_bad_change_setting_is_named_before_anything_starts(env, named):
    full = {"BENCH_TARGETS": TARGETS, **env}
    with pytest.raises(SettingsError, match=named):
        from_env(full)
    assert list(change_errors(full)) == [named]


def rep(block: int, rps: float, own: float, db: float, flags=()) -> dict:
    return {"block": block, "rps": rps, "flags": list(flags),
            "cpu": {"flask": {"cpu_ms_per_request": own, "cores": 0.9}, "flask-b": {"cpu_ms_per_request": own,
                                                                                   "cores": 0.9},
                    "mongo": {"cpu_ms_per_request": db}, "postgres": {"cpu_ms_per_request": 0.001}}}


def case_of(a_rps: list[float], b_rps: list[float], file="1KB.bin", c=100) -> dict:
    a = [rep(i, r, 1.0 + i / 100, 0.5) for i, r in enumerate(a_rps, 1)]
    b = [rep(i, r, (1.0 + i / 100) * a_rps[i - 1] / r, 0.5) for i, r in enumerate(b_rps, 1)]
    for r in b:
        r["cpu"] = {"flask-b": r["cpu"]["flask"], "mongo": r["cpu"]["mongo"], "postgres": r["cpu"]["postgres"]}
    return {"file": file, "size_bytes": 1024, "concurrency": c, "error": "",
            "blocks": blocks(a, b, "flask", "flask-b", ["mongo", "postgres"])}


def test_window_metrics_add_the_database_and_upstream_to_the_total():
    m = window_metrics(rep(1, 100.0, 2.0, 0.5), "flask", ["mongo", "postgres", "nginx-gridfs"])
    assert m == {"rps": 100.0, "cpu_path": 2.0, "cpu_total": pytest.approx(2.501), "refused": 0, "failed": 0,
                 "shed": 0.0, "whole": 0, "answers": 0}
    assert window_metrics({"rps": 5.0, "cpu": None}, "flask", ["mongo"])["cpu_total"] is None
    # a window of flask at 1 MB, c=100 (wrk, 20261126T033216Z): 269 of 752 answers were the deadline's 503s,
    # which the Measurement's rate already leaves out
    served = served_rate(46.84, 752, 269)
    assert served == pytest.approx(46.84 * 483 / 752, abs=1e-3)
    # CPU per request comes per whole answer from usage (its one divisor): window_metrics divides no more
    shed = window_metrics({**rep(1, served, 2.8, 20.0), "requests": 752, "refused": 269}, "flask", ["mongo"])
    assert shed["rps"] == served and (shed["refused"], shed["failed"]) == (269, 0)
    assert shed["cpu_path"] == 2.8 and shed["cpu_total"] == pytest.approx(22.8)
    # 2xx answers cut short count against the rate as well
    cut = window_metrics({**rep(1, 10.0, 1.0, 1.0), "requests": 40, "failed": 10}, "flask", ["mongo"])
    assert cut["rps"] == pytest.approx(7.5) and cut["cpu_path"] == 1.0 and cut["failed"] == 10
    nothing = window_metrics({**rep(1, 10.0, 1.0, 1.0), "requests": 40, "failed": 40}, "flask", ["mongo"])
    assert nothing["rps"] == 0 and nothing["shed"] == 1.0
    assert upstream_of("nginx-cache", "nginx-gridfs:8080") == "nginx-gridfs"
    assert upstream_of("nginx-cache-b", "flask:8080") == "flask" and upstream_of("flask", "x:1") is None


class Sized:
    """A sizing run's figures, as a clients.timing.Measurement gives them."""
    def __init__(self, requests: int, seconds: float):
        self.requests, self.rps = requests, requests / seconds


def test_every_window_of_a_case_is_as_long_as_the_slower_side_needs():
    env = {"BENCH_TARGETS": TARGETS, "AB_A": "flask", "AB_B": "flask-b"}
    cfg = replace(from_env(env), duration=3)  # as time_change runs it: windows of AB_WINDOW
    fast, holds = Sized(6000, 3), Sized(cfg.min_requests, 3)
    assert case_window_seconds(cfg, [fast, fast], 100) == 3
    # five rounds of c=100 (usage.ROUNDS_WANTED) at 100/s: 5 s, for A too
    assert case_window_seconds(cfg, [fast, Sized(300, 3)], 100) == 5
    assert case_window_seconds(cfg, [Sized(300, 3), fast], 100) == 5
    # the stand-in's 1 MB: about 20 a second would need 25 s; at most WINDOW_STRETCH windows
    assert case_window_seconds(cfg, [Sized(61, 3), Sized(80, 3)], 100) == 3 * WINDOW_STRETCH == 9
    assert case_window_seconds(cfg, [Sized(0, 3), holds], 5) == 9  # nothing answered: slower than any rate
    assert case_window_seconds(replace(cfg, min_requests=0), [Sized(61, 3), None], 100) == 3


def test_a_throttled_b_is_slower_and_costlier_and_fails_the_gate_on_requests_per_second():
    rng = random.Random(1)
    a = [1000 * rng.uniform(0.97, 1.03) for _ in range(8)]
    rows = judge([case_of(a, [x * 0.8 * rng.uniform(0.99, 1.01) for x in a])], 0.05)
    by = {r["metric"]: r for r in rows}
    assert by["rps"]["verdict"] == "worse" and by["rps"]["gate_fails"]
    assert by["rps"]["headline"].startswith("B slower by ")
    assert by["rps"]["low"] <= 0.8 <= by["rps"]["high"]  # the interval holds the change made
    assert by["cpu_path"]["verdict"] == "worse" and by["cpu_path"]["headline"].startswith("B costlier by ")
    assert all(r["n"] == 8 and r["coverage"] >= 0.95 for r in rows)


def test_an_unchanged_b_is_no_change_or_inconclusive_never_a_verdict():
    rng = random.Random(2)
    a = [1000 * rng.uniform(0.99, 1.01) for _ in range(8)]
    rows = judge([case_of(a, [x * rng.uniform(0.995, 1.005) for x in a])], 0.05)
    assert {r["verdict"] for r in rows} <= {"no change", "inconclusive"}
    assert any(r["headline"].startswith("no change beyond ±5%") for r in rows)


def test_a_case_that_sheds_most_of_its_answers_says_so_beside_its_verdicts():
    # the stand-in's 1 MB at c=100: 160 of 400 answers served, the rest 503s at the deadline
    def shedding(block, refused):
        return {**rep(block, 20.0, 15.0, 100.0), "requests": 400, "refused": refused, "failed": 0}
    rng = random.Random(4)
    counts = [rng.randint(230, 250) for _ in range(8)]
    case = {"file": "1MB.bin", "size_bytes": 1 << 20, "concurrency": 100, "error": "",
            "blocks": blocks([shedding(i, n) for i, n in enumerate(counts, 1)],
                             [{**shedding(i, n), "cpu": {"flask-b": {"cpu_ms_per_request": 15.0}}}
                              for i, n in enumerate(counts[::-1], 1)], "flask", "flask-b", ["mongo"])}
    rows = judge([case, case_of([1000.0] * 8, [1000.0] * 8)], 0.05)
    assert sorted(counts)[4] / 400 == max(r["shed"] for r in rows[:3]) > SHEDDING
    assert all(r["shed"] == 0 for r in rows[3:])
    results = change_results("20261125T130000Z", "A/B", rows, {"cpu_model": "cpu X", "host_cores": 2, "kernel": "6.1"})
    lines = [line for line in render_change(results).splitlines() if line.startswith("- **1MB c=100")]
    assert len(lines) == 3 and all("its answers, so a verdict here may be this run's twins" in x for x in lines)
    assert "sheds" not in "\n".join(x for x in render_change(results).splitlines() if x.startswith("- **1KB"))
    assert "**Twins kept for the whole run** (AB_RESTART_TWINS=off)" in render_change(results)
    # twins restarted before each block: what they keep is drawn anew, the note says only what is shed
    results.ab.update(restart_twins=True, cases=[{**case, "restarts": [{"block": 1, "seconds": 1.2},
                                                                       {"block": 2, "seconds": 2.31}]}])
    page = render_change(results)
    assert "**Both twins restarted before each block** (2 restarts, 1.2-2.3 s each)" in page
    lines = [line for line in page.splitlines() if line.startswith("- **1MB c=100")]
    assert all(x.endswith("its answers: read it beside the blocks' failures") for x in lines)


def test_too_few_blocks_say_why_there_is_no_interval():
    rows = judge([case_of([100.0] * 4, [90.0, 91.0, 89.0, 90.0])], 0.05)
    assert all(r["verdict"] == "inconclusive" and "at least 6 needed" in r["headline"] for r in rows)


def change_results(run_id: str, kind: str, rows: list[dict], machine: dict) -> Results:
    env = {"cpu_model": machine["cpu_model"], "host_cores": machine["host_cores"], "kernel": machine["kernel"],
           "server": {"product": "FerretDB", "version": "1.24.2"}}
    return Results(run_id=run_id, started_at="s", environment=env,
                   ab={"a": "flask", "b": "flask-b", "kind": kind, "change": "", "blocks": 8, "threshold": 0.05,
                       "machine": machine, "cases": [], "rows": rows})


def test_a_change_report_quotes_the_last_aa_of_the_same_machine(tmp_path):
    here = {"cpu_model": "cpu X", "host_cores": 2, "kernel": "6.1"}
    elsewhere = {**here, "cpu_model": "cpu Y"}
    rng = random.Random(3)
    a = [1000 * rng.uniform(0.97, 1.03) for _ in range(8)]
    rows = judge([case_of(a, a[::-1])], 0.05)
    for run_id, machine in (("20261125T100000Z", here), ("20261125T110000Z", elsewhere)):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "ab.json").write_text(json.dumps(
            {"run_id": run_id, **change_results(run_id, "A/A", rows, machine).ab}))
    results = change_results("20261125T120000Z", "A/B", rows, here)
    found = last_calibration(tmp_path, results)
    assert found == {"run_id": "20261125T100000Z", "alarms": 0, "rows": 3, "rate": 0.0}
    results.ab["calibration"] = found
    page = render_change(results)
    assert "the last A/A (run 20261125T100000Z) gave a verdict to 0 of 3 case-metrics" in page
    assert "FerretDB" in page and "| 1KB c=100 | requests per second |" in page
    assert last_calibration(tmp_path, change_results("20261125T090000Z", "A/B", rows, here)) is None
    aa = render_change(change_results("20261125T130000Z", "A/A", rows, here))
    assert "every \"better\" or \"worse\" verdict below is a false alarm: **0 of 3**" in aa
    none = render_change(change_results("20261125T130000Z", "A/B", rows, elsewhere))
    assert "False alarms on this machine: not measured." in none
    sized = change_results("20261125T130000Z", "A/B", rows, here)
    sized.ab["cases"] = [{**case_of(a, a), "window_s": 9.0,
                          "sizing": {"flask": {"requests": 61, "rps": 20.3}, "flask-b": {"requests": 80, "rps": 26.7}}}]
    assert ("Every window 9 s, A's and B's alike (sized on the slower side: flask 20.3 req/s; flask-b 26.7 req/s)."
            in render_change(sized))


def compose_config(override: Path) -> dict:
    env = {**os.environ, "RESULTS_OWNER": "1000:1000"}
    done = subprocess.run(["docker", "compose", "--env-file", str(REPO / "local.env"), "-f", str(REPO / "compose.yaml"),
                           "-f", str(override), "config", "--format", "json"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["services"]


@pytest.mark.lab  # docker compose config, on local.env
@pytest.mark.parametrize("service, change, check", [
    ("flask", {"B_IMAGE": "python:3.13-slim"}, lambda b: b["build"]["args"]["PYTHON_IMAGE"] == "python:3.13-slim"),
    ("node", {"B_CPUS": "0.8"}, lambda b: b["cpus"] == 0.8),
    ("flask", {"B_ENV": "GUNICORN_WORKERS=2"}, lambda b: b["environment"]["GUNICORN_WORKERS"] == "2"
     and b["environment"]["MONGO_URI"] == "mongodb://mongo:27017"),
    ("nginx-cache", {}, lambda b: True),
])
def test_the_twin_is_its_service_with_one_change_as_compose_reads_it(tmp_path, service, change, check):
    """Same core, memory limit, database, volumes and hardening as A; only
    the change differs; bench waits for it."""
    base = ["docker", "compose", "--env-file", str(REPO / "local.env")]
    services = change_tool.compose_services(base, {**os.environ, "RESULTS_OWNER": "1000:1000"})
    definition, changed = change_tool.twin(service, services[service], change)
    (tmp_path / "ab.yaml").write_text(change_tool.override(service, definition))
    config = compose_config(tmp_path / "ab.yaml")
    a, b = config[service], config[f"{service}-b"]
    assert check(b) and (changed != []) == bool(change)
    same = ("cpuset", "mem_limit", "read_only", "cap_drop", "security_opt", "volumes", "tmpfs", "depends_on", "labels")
    assert {k: a.get(k) for k in same} == {k: b.get(k) for k in same}
    assert f"{service}-b" in config["bench"]["depends_on"]
    if not change:
        assert a["build"] == b["build"] and a.get("cpus") == b.get("cpus") and a["environment"] == b["environment"]


@pytest.mark.lab
def test_a_path_with_several_build_arguments_asks_which_one(tmp_path):
    base = ["docker", "compose", "--env-file", str(REPO / "local.env")]
    services = change_tool.compose_services(base, {**os.environ, "RESULTS_OWNER": "1000:1000"})
    with pytest.raises(change_tool.LabError, match="B_ARG=NAME"):
        change_tool.twin("gridfs-fuse", services["gridfs-fuse"], {"B_IMAGE": "x"})
    definition, _ = change_tool.twin("gridfs-fuse", services["gridfs-fuse"], {"B_IMAGE": "x", "B_ARG": "GO_IMAGE"})
    assert definition["build"]["args"] == {"GO_IMAGE": "x"}
    assert change_tool.targets_for("nginx-cache", {"CACHE_UPSTREAM": "nginx-gridfs:8080"}, services) == [
        "nginx-static", "nginx-cache", "nginx-cache-b", "nginx-gridfs"]


PATHS = ["nginx-static", "httpd-static", "nginx-gridfs", "flask", "node", "gridfs-fuse", "nginx-cache",
         "flask-postgres"]


@pytest.mark.parametrize("changed, gated", [
    (["services/node/server.js"], ["node"]),
    (["services/python-common/lab_http/ranges.py"], ["flask", "flask-postgres"]),
    (["services/nginx-gridfs/module/ngx_http_gridfs_module.c", "README.md"], ["nginx-gridfs"]),
    (["loadgen/bench/run.py"], ["nginx-gridfs", "flask"]),
    (["README.md", "results/example/index.png"], []),
])
def test_the_gate_measures_the_paths_a_change_touches(changed, gated):
    assert change_gate.touched_paths(changed, PATHS, ["nginx-gridfs", "flask"]) == gated


def gated(cases: list[dict], blocks_planned: int = 8, **ab) -> dict:
    """An ab.json as bench writes it (run.finish) from judged cases."""
    return {"run_id": "r", "status": "complete", "a": "flask", "b": "flask-b", "blocks": blocks_planned,
            "threshold": 0.05, "cases": cases, "rows": judge(cases, 0.05), **ab}


def test_the_run_just_made_is_found_by_its_own_folder_not_through_latest(tmp_path):
    """results/latest links to the newest run and sorts after every run id:
    a calibration once recorded its first run as "latest"."""
    (tmp_path / "20261129T000000Z").mkdir()
    (tmp_path / "20261129T000000Z" / "ab.json").write_text("{}")
    before = {p.name for p in tmp_path.iterdir()}
    (tmp_path / "20261129T010000Z").mkdir()
    (tmp_path / "20261129T010000Z" / "ab.json").write_text("{}")
    (tmp_path / "latest").symlink_to("20261129T010000Z")
    assert newest_result(tmp_path, before) == tmp_path / "20261129T010000Z" / "ab.json"
    assert newest_result(tmp_path, before | {"20261129T010000Z"}) is None


def test_the_gate_fails_only_on_the_chosen_metric_beyond_the_threshold():
    rng = random.Random(4)
    a = [1000 * rng.uniform(0.98, 1.02) for _ in range(8)]
    code, why = gate_rule.judge_gate(gated([case_of(a, [x * 0.7 for x in a])]), ["rps"])
    assert code == gate_rule.SLOWER == 1 and len(why) == 1 and "B slower by" in why[0]
    # shown within the threshold on every gated metric: passes
    assert gate_rule.judge_gate(gated([case_of(a, a[1:] + a[:1])]), ["rps", "cpu_path"]) == (0, [])
    # B faster: shown no worse, passes too
    assert gate_rule.judge_gate(gated([case_of(a, [x * 1.3 for x in a])]), ["rps"])[0] == 0
    # an interval that reaches past the threshold on the worse side, not all of it: not shown safe
    wide = [x * f for x, f in zip(a, (0.88, 1.06, 0.9, 1.08, 0.93, 1.02, 0.87, 1.05))]
    code, why = gate_rule.judge_gate(gated([case_of(a, wide)]), ["rps"])
    assert code == gate_rule.INCONCLUSIVE == 3 and "inconclusive" in why[0]
    assert gate_rule.overall([0, 3, 1, 0]) == 1 and gate_rule.overall([3, 2, 1]) == 2
    assert gate_rule.overall([]) == 0


WRK = REPO / "tests" / "fixtures" / "wrk"


def wrk_rep(fixture: str, block: int, cpu: dict) -> dict:
    """A window as Timer.measured gives it: a captured wrk report, its cpu."""
    from bench.clients.timing import wrk_measurement
    m = wrk_measurement((WRK / fixture).read_text(), threads=1)
    return {**asdict(m), "block": block, "flags": [], "cpu": cpu}


def test_a_b_that_was_not_measured_never_passes_the_gate(tmp_path):
    """Exit 2 from the real code that writes what the gate reads: B not
    timed (ChangeRun.run with B unverified), a case error, B dying mid-run (a
    captured wrk window whose server stopped: socket errors), blocks lost."""
    from bench.benchmark.change import ChangeRun
    cfg = from_env({"BENCH_TARGETS": TARGETS, "AB_A": "flask", "AB_B": "flask-b", "AB_BLOCKS": "8"})
    results = Results(run_id="r", started_at="s", environment={},
                      targets=[TargetResult("flask", "http://flask:8080", True),
                               TargetResult("flask-b", "http://flask-b:8080", False, "connection refused")])
    ChangeRun(cfg, SimpleNamespace(run_dir=tmp_path), results).run([{"name": "1KB.bin", "size": 1024}])
    code, why = gate_rule.judge_gate({"status": "complete", **results.ab}, ["rps"])
    assert code == gate_rule.NOT_MEASURED == 2 and why == ["not timed: flask-b: connection refused"]

    a = [1000.0 + i for i in range(8)]
    broken = case_of(a, a)
    broken["error"] = "block 5: wrk exited with 1: connection refused"
    assert gate_rule.judge_gate(gated([broken]), ["rps"])[0] == 2
    # B stopped answering in block 4: a window of socket errors, whatever its rate reads
    cpu = {"flask": {"cpu_ms_per_request": 0.1}, "flask-b": {"cpu_ms_per_request": 0.1}}
    died = case_of(a, a)
    died["blocks"] = blocks([wrk_rep("nginx-1KB-c5.txt", i, cpu) for i in range(1, 9)],
                            [wrk_rep("nginx-stopped-midway.txt" if i == 4 else "nginx-1KB-c5.txt", i, cpu)
                             for i in range(1, 9)], "flask", "flask-b", [])
    code, why = gate_rule.judge_gate(gated([died]), ["rps"])
    assert code == 2 and why == ["1KB c=100: flask-b failed 70802 requests (no answer, or one cut short)"]
    # two of 8 blocks disturbed and not run again: 6 counted, an interval, but not the run planned
    short = case_of(a, a)
    for blk in short["blocks"][:2]:
        blk["counted"] = False
    code, why = gate_rule.judge_gate(gated([short]), ["rps"])
    assert code == 2 and why == ["1KB c=100: 6 blocks counted of 8 planned"]
    assert gate_rule.judge_gate(gated([case_of(a, a)], status="interrupted"), ["rps"])[0] == 2


def test_cpu_per_request_is_divided_by_the_whole_answers_once():
    """The real chain: a captured wrk window of flask at 1 MB that shed 300
    of 695 answers, cAdvisor's captured counters, usage (the one divisor),
    then the A/B's metrics: the path's CPU over its 395 whole answers,
    never over them twice (which read 1.76x the truth here)."""
    from bench.clients.timing import wrk_measurement
    from bench.measure.usage import PER_REQUEST_RUN, PER_REQUEST_RATE, WindowInput, window
    from test_cpu_report import TARGET, compose
    m = wrk_measurement((WRK / "flask-1MB-c100-shed.txt").read_text(), threads=1)
    assert (m.requests, m.refused, m.failed, m.whole) == (695, 300, 0, 395)
    assert m.whole_rps == pytest.approx(43.24 * 395 / 695, rel=1e-3)
    roles, _ = compose()
    series = {r: list(c.stats) for r, c in roles.items()}
    stamps = [c.timestamp_ns for c in series[TARGET]]
    for start, end, divided_by in ((stamps[1] - 1, stamps[-1] + 1, PER_REQUEST_RATE),
                                   (stamps[1] + 1, stamps[2] - 1, PER_REQUEST_RUN)):
        run = WindowInput(start, end, m.whole, m.whole_rps, 0.1, 1, whole_share=m.whole / m.requests)
        cpu, _, _ = window(series, {}, {}, TARGET, run, 1.0)
        used = cpu[TARGET]
        expected = (used["cores"] * 1000 / m.whole_rps if divided_by == PER_REQUEST_RATE
                    else used["cpu_seconds"] * 1000 / m.whole)
        assert used["cpu_ms_per_request_from"] == divided_by
        assert used["cpu_ms_per_request"] == pytest.approx(expected, rel=1e-3)
        metrics = window_metrics({**asdict(m), "cpu": cpu}, TARGET, [])
        assert metrics["cpu_path"] == used["cpu_ms_per_request"]
        assert metrics["rps"] == pytest.approx(m.whole_rps) and metrics["shed"] == pytest.approx(300 / 695, abs=1e-4)


def test_a_change_page_charts_every_case_and_metric_with_its_interval():
    from bench.report.html import render_change_page
    here = {"cpu_model": "cpu X", "host_cores": 2, "kernel": "6.1"}
    rng = random.Random(6)
    a = [1000 * rng.uniform(0.97, 1.03) for _ in range(8)]
    cases = [case_of(a, [x * 0.8 for x in a])]
    results = change_results("20261125T120000Z", "A/B", judge(cases, 0.05), here)
    results.ab["cases"] = cases
    page = render_change_page(results, all_runs=False)
    assert page.count('<svg class="chart"') == 1 and page.count("<circle") == 3 * 8
    assert "B slower by 20.0%" in page and "Paired changes per block" in page and "<script" not in page


def test_a_disturbed_block_is_kept_on_record_but_judged_on_by_nothing():
    """A window that shared the machine with work outside the lab (a test
    suite, a build) is not a paired sample: here block 3's A window ran at
    half speed beside it, which alone would make an unchanged B 'faster'."""
    rng = random.Random(3)
    a = [1000 * rng.uniform(0.99, 1.01) for _ in range(8)]
    b = [x * rng.uniform(0.995, 1.005) for x in a]
    case = case_of(a, b)
    clean = judge([case], 0.05)
    a[2] *= 0.5
    spoiled = case_of(a, b)
    spoiled["blocks"] = blocks([rep(i, r, 1.0, 0.5, ["disturbed"] if i == 3 else []) for i, r in enumerate(a, 1)],
                               [rep(i, r, 1.0, 0.5) for i, r in enumerate(b, 1)], "flask", "flask-b", ["mongo"])
    assert [blk["counted"] for blk in spoiled["blocks"]] == [True, True, False, True, True, True, True, True]
    rows = {r["metric"]: r for r in judge([spoiled], 0.05)}
    assert rows["rps"]["n"] == 7
    assert rows["rps"]["verdict"] == {r["metric"]: r for r in clean}["rps"]["verdict"] != "better"


@pytest.mark.lab
def test_a_b_image_that_cannot_be_had_fails_at_once_naming_it():
    """make ab SERVICE=flask B_IMAGE=<nothing>: named before any build, within
    30 s (on this machine docker pull finds no registry; elsewhere, no such
    repository)."""
    began = time.monotonic()
    with pytest.raises(change_tool.LabError, match=r"B_IMAGE=gridfs-lab-local/no-such-image:0: not on this engine"):
        change_tool.image_to_be_had("gridfs-lab-local/no-such-image:0")
    assert time.monotonic() - began < 30
    change_tool.image_to_be_had("gridfs-lab-local/debian:bookworm")  # a local image is there already


# tools/lab/change.py's run, as main runs it, with stand-ins for compose up and down: real processes, a real SIGTERM
SIGTERMED = """
import sys
import change
change.stop_on_sigterm()
up = [sys.executable, "-c", "import os, pathlib, sys, time; "
      "pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(60)", sys.argv[1]]
down = [sys.executable, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).write_text('down')", sys.argv[2]]
try:
    change.up_then_down(up, down, {}, 120)
except KeyboardInterrupt:
    print("interrupted, as by Ctrl-C", flush=True)
    sys.exit(130)
"""


def test_sigterm_takes_the_project_down_as_ctrl_c_does(tmp_path):
    """make ab stopped by SIGTERM (a CI job cancelled, timeout(1)) takes
    Ctrl-C's path: the attached `up` is ended and `down` runs, so no
    compose project is left running."""
    started, down, out, err = (tmp_path / name for name in ("up-started", "down-ran", "out", "err"))
    # files, not pipes: an `up` left running would hold a pipe open past its parent's end
    with out.open("w") as stdout, err.open("w") as stderr:
        path = os.pathsep.join([str(REPO / "tools" / "lab"), str(REPO / "loadgen")])  # change.py, this checkout's bench
        run = subprocess.Popen([sys.executable, "-c", SIGTERMED, str(started), str(down)], cwd=REPO,
                               env={**os.environ, "PYTHONPATH": path}, stdout=stdout, stderr=stderr)
    up = None
    try:
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text()) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists() and started.read_text(), err.read_text()
        up = int(started.read_text())
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=30)
        assert (run.returncode, out.read_text()) == (130, "interrupted, as by Ctrl-C\n"), err.read_text()
        assert down.read_text() == "down"
        with pytest.raises(ProcessLookupError):  # `up` ended (and reaped) before its parent's end
            os.kill(up, 0)
        up = None
    finally:
        run.kill()
        if up is not None:  # left running when the test failed: not past this test
            with contextlib.suppress(ProcessLookupError):
                os.kill(up, signal.SIGKILL)


# The gate's and the calibration's bound on tools/lab/change.py (run_stopped_at), on real processes: the child
# holds SIGTERM for a teardown, or ignores it. -S: a python that starts at once, so its handler is set in time.
TEARS_DOWN = """
import pathlib, signal, sys, time
def down(*_):
    time.sleep(0.3)  # its compose down
    pathlib.Path(sys.argv[1]).write_text("down")
    sys.exit(3)
signal.signal(signal.SIGTERM, down)
time.sleep(60)
"""
IGNORES = ("import os, pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(60)")


def test_a_run_past_its_time_gets_sigterm_and_its_teardown_runs(tmp_path):
    began = time.monotonic()
    exited = run_stopped_at([sys.executable, "-S", "-c", TEARS_DOWN, str(tmp_path / "down")], 1.5, grace=20)
    assert exited == "no end within 1.5 s: SIGTERM, then exit 3"
    assert (tmp_path / "down").read_text() == "down" and time.monotonic() - began < 20


def test_a_run_that_sigterm_ends_is_said_to_be_ended_by_it(tmp_path):
    # Python's default for SIGTERM: the process ends by the signal, which Popen gives as -15, not an exit code.
    exited = run_stopped_at([sys.executable, "-S", "-c", "import time; time.sleep(60)"], 1.5, grace=20)
    assert exited == "no end within 1.5 s: SIGTERM, then ended by SIGTERM"


def test_a_run_that_ignores_sigterm_gets_sigkill_after_the_grace(tmp_path):
    began = time.monotonic()
    exited = run_stopped_at([sys.executable, "-S", "-c", IGNORES, str(tmp_path / "pid")], 1.5, grace=1)
    assert exited == "no end within 1.5 s: SIGTERM, then SIGKILL 1 s later"
    assert 2.5 <= time.monotonic() - began < 30
    with pytest.raises(ProcessLookupError):  # ended and reaped
        os.kill(int((tmp_path / "pid").read_text()), 0)


def test_a_run_within_its_time_gives_its_exit_code():
    assert run_stopped_at([sys.executable, "-S", "-c", "raise SystemExit(4)"], 30) == 4


# The gate stopped (a cancelled CI job, Ctrl-C) while a tools/lab/change.py it started runs: a stand-in for
# change.py (no Docker here) that records the signal it gets and takes a moment for its compose down.
RECORDS = """
import os, pathlib, signal, sys, time
record = pathlib.Path(sys.argv[1])
def down(signum, _frame):
    with record.open("a") as f:
        f.write(f"{signal.Signals(signum).name}\\n")
    time.sleep(0.5)  # its compose down
    with record.open("a") as f:
        f.write("down\\n")
    sys.exit(130)
signal.signal(signal.SIGTERM, down)
with record.open("a") as f:
    f.write(f"started {os.getpid()}\\n")
time.sleep(60)
"""
GATE = """
import sys
import change_calibrate, change_gate
change_calibrate.CHANGE = [sys.executable, "-S", "-c", sys.argv[1], sys.argv[2]]
sys.exit(change_gate.main(["HEAD", "flask", "nginx-gridfs"]))
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_gate_reaches_its_change_py_and_the_gate_ends_not_measured(tmp_path, signum):
    """SIGTERM or SIGINT to the gate alone (not its process group) is passed
    on to the change.py it runs, here its first A/A on this runner: that
    teardown is awaited, the calibration keeps the attempt (incomplete), and
    the gate ends not measured (2), saying so and naming the path it left."""
    record, results, out = tmp_path / "record", tmp_path / "results", tmp_path / "out"
    path = os.pathsep.join([str(REPO / "tools" / "lab"), str(REPO / "tools" / "ci"), str(REPO / "loadgen")])
    env = {**os.environ, "PYTHONPATH": path, "AB_ENV_FILE": ".env", "RESULTS_DIR": str(results),
           "AB_GATE_CALIBRATION_RUNS": "1"}
    with out.open("w") as stdout:  # a file, not a pipe: a child left running would hold a pipe open
        gate = subprocess.Popen([sys.executable, "-c", GATE, RECORDS, str(record)], cwd=REPO, env=env,
                                stdout=stdout, stderr=subprocess.STDOUT)
    child = None
    try:
        deadline = time.monotonic() + 30
        while not (record.exists() and "started" in record.read_text()) and gate.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert record.exists(), out.read_text()
        child = int(record.read_text().split()[1])
        gate.send_signal(signum)
        assert gate.wait(timeout=30) == gate_rule.NOT_MEASURED, out.read_text()
        assert record.read_text().splitlines()[1:] == ["SIGTERM", "down"]  # passed on as SIGTERM, torn down
        with pytest.raises(ProcessLookupError):  # ended and reaped before the gate's end
            os.kill(child, 0)
        child = None
        printed = out.read_text()
        name = signal.Signals(signum).name
        assert f"**flask: not measured** (exit 2): stopped, {name} to this tool: SIGTERM, then exit 130." in printed
        assert "**nginx-gridfs: not gated** (stopped before it)." in printed
        assert "**Gate: not measured** (exit 2)." in printed
        stored = json.loads(next(results.glob("calibration-flask-*/calibration.json")).read_text())
        assert stored["status"] == "incomplete" and stored["attempts"][0]["exit"] == f"{name} to this tool: " \
            "SIGTERM, then exit 130"
    finally:
        gate.kill()
        if child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


# A second signal while change.py's project goes down: Ctrl-C reaches the whole process group, and the gate
# passes it on as SIGTERM too
TWICE = """
import sys
import change
change.stop_on_sigterm()
up = [sys.executable, "-c", "import os, pathlib, sys, time; "
      "pathlib.Path(sys.argv[1]).write_text(str(os.getpid())); time.sleep(60)", sys.argv[1]]
down = [sys.executable, "-c", "import pathlib, sys, time; pathlib.Path(sys.argv[1]).write_text('going'); "
        "time.sleep(1); pathlib.Path(sys.argv[1]).write_text('down')", sys.argv[2]]
try:
    change.up_then_down(up, down, {}, 120)
except KeyboardInterrupt:
    print("interrupted, as by Ctrl-C", flush=True)
    sys.exit(130)
"""


def test_a_second_signal_does_not_cut_change_pys_teardown_short(tmp_path):
    started, down, out = tmp_path / "up-started", tmp_path / "down", tmp_path / "out"
    path = os.pathsep.join([str(REPO / "tools" / "lab"), str(REPO / "loadgen")])
    with out.open("w") as stdout:
        run = subprocess.Popen([sys.executable, "-c", TWICE, str(started), str(down)], cwd=REPO,
                               env={**os.environ, "PYTHONPATH": path}, stdout=stdout, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while not (started.exists() and started.read_text()) and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists() and started.read_text(), out.read_text()
        run.send_signal(signal.SIGINT)
        while not down.exists() and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert down.exists() and down.read_text() == "going", out.read_text()
        run.send_signal(signal.SIGTERM)  # while `down` runs
        assert run.wait(timeout=30) == 130, out.read_text()
        assert down.read_text() == "down" and out.read_text() == "interrupted, as by Ctrl-C\n"
    finally:
        run.kill()
