"""An A/B case whose sizing shed is timed at the concurrency both twins
admitted (bench.benchmark.change.admitted_concurrency), on captured wrk
windows of nginx-gridfs at 1 MB on the FerretDB stand-in: c=100, where its
admission refused 97.5-97.6% of each twin's answers (run 20261129T180028Z,
block 1), and c=8, where it refused none (run 20261129T182359Z, block 1).
The case keeps its label, so the gate and a calibration still compare it."""
import math
from pathlib import Path

import pytest

from bench.benchmark.change import ADMITTED_SHED, admitted_concurrency, blocks, judge, sizing_figures
from bench.clients.timing import wrk_measurement
from bench.report.change import render_change
from bench.results import Results
from bench.settings import SettingsError, from_env

import gate_rule

WRK = Path(__file__).resolve().parent / "fixtures" / "wrk"


def sized(fixture: str) -> dict:
    """A twin's sizing as ab.json keeps it, from a captured wrk window."""
    return sizing_figures(wrk_measurement((WRK / fixture).read_text(), threads=1))


def test_a_case_past_what_its_paths_admit_is_timed_at_what_both_admitted():
    sizing = {"nginx-gridfs": sized("nginx-gridfs-1MB-c100-admitting.txt"),
              "nginx-gridfs-b": sized("nginx-gridfs-b-1MB-c100-admitting.txt")}
    assert (sizing["nginx-gridfs"]["requests"], sizing["nginx-gridfs"]["refused"]) == (6064, 5917)
    assert sizing["nginx-gridfs"]["latency_mean_ms"] == pytest.approx(574.31)
    admitted = admitted_concurrency(sizing, 100)
    # A: 147 whole answers in 9.04 s x 0.574 s = 9.3; B: 150 in 9.03 s x 0.595 s = 9.9
    assert admitted["timed"] == 9 and admitted["by"] == "nginx-gridfs"
    assert admitted["shed"] == {"nginx-gridfs": 0.9758, "nginx-gridfs-b": 0.9746}
    assert admitted["said"] == ("both twins shed 97% and 98% in sizing; timed at c=9 (what they admitted: "
                                "16 whole answers/s x 0.57 s)")
    # the level below it, as c=8 was timed: nothing shed, timed as set
    assert admitted_concurrency({"nginx-gridfs": sized("nginx-gridfs-1MB-c8.txt"),
                                 "nginx-gridfs-b": sized("nginx-gridfs-b-1MB-c8.txt")}, 8) is None


def test_the_timed_level_is_at_least_one_and_at_most_the_level_as_set():
    shedding = sized("nginx-gridfs-1MB-c100-admitting.txt")
    calm = sized("nginx-gridfs-1MB-c8.txt")
    # one twin shedding is enough; the smaller of the two admitted sets the level
    one = admitted_concurrency({"a": calm, "b": shedding}, 100)
    # a's 219 whole answers in 9.01 s x 0.325 s: 7.9 of its 8 clients (Little's law), rounded down
    assert one["timed"] == 7 and one["by"] == "a" and one["said"].startswith("b shed 98% in sizing; timed at c=7")
    # the figures admit more than the level as set: timed as set, and said so
    assert admitted_concurrency({"a": shedding, "b": shedding}, 5)["timed"] == 5
    assert "timed at c=5 as set (they admitted as many" in admitted_concurrency({"a": shedding, "b": shedding}, 5)[
        "said"]
    # nothing whole at all: still timed, at one client
    nothing = {**shedding, "refused": shedding["requests"]}
    assert admitted_concurrency({"a": nothing, "b": shedding}, 100)["timed"] == 1
    # no latency (a sizing recorded before it was kept): no decision
    assert admitted_concurrency({"a": {**shedding, "latency_mean_ms": None}, "b": shedding}, 100) is None


def test_a_share_shed_up_to_the_constant_leaves_the_level_as_set():
    calm = sized("nginx-gridfs-1MB-c8.txt")  # 219 answers, none refused
    at = math.floor(calm["requests"] * ADMITTED_SHED)  # 10 of 219: 4.6%; 11 would be 5.02%
    assert admitted_concurrency({"a": {**calm, "refused": at}, "b": calm}, 8) is None
    assert admitted_concurrency({"a": {**calm, "refused": at + 1}, "b": calm}, 8)["timed"] == 7
    # lost answers (no answer, or one cut short) count as shed too
    assert admitted_concurrency({"a": {**calm, "failed": at + 1}, "b": calm}, 8)["timed"] == 7


def admitted_case() -> dict:
    """A case as ChangeRun.case records it when timed at what was admitted:
    its blocks the captured c=8 windows, its sizing the c=100 ones."""
    sizing = {"nginx-gridfs": sized("nginx-gridfs-1MB-c100-admitting.txt"),
              "nginx-gridfs-b": sized("nginx-gridfs-b-1MB-c100-admitting.txt")}
    cpu = {"nginx-gridfs": {"cpu_ms_per_request": 1.5}, "nginx-gridfs-b": {"cpu_ms_per_request": 1.5}}

    def rep(fixture: str, block: int, scale: float) -> dict:
        m = wrk_measurement((WRK / fixture).read_text(), threads=1)
        return {"requests": m.requests, "failed": m.failed, "refused": m.refused, "rps": m.rps * scale,
                "cpu": cpu, "block": block, "flags": []}
    a = [rep("nginx-gridfs-1MB-c8.txt", i, 1 + i / 1000) for i in range(1, 13)]
    b = [rep("nginx-gridfs-b-1MB-c8.txt", i, 1 + i / 1000) for i in range(1, 13)]
    return {"file": "1MB.bin", "size_bytes": 1 << 20, "concurrency": 100, "timed_concurrency": 9,
            "admitted": admitted_concurrency(sizing, 100), "error": "", "window_s": 9, "restarts": [],
            "sizing": sizing, "blocks": blocks(a, b, "nginx-gridfs", "nginx-gridfs-b", ["mongo"])}


def test_ab_json_and_the_page_keep_the_label_and_say_what_the_case_was_timed_at():
    case = admitted_case()
    rows = judge([case], 0.05)
    assert {r["case"] for r in rows} == {"1MB c=100"} and {r["concurrency"] for r in rows} == {100}
    assert {r["timed_concurrency"] for r in rows} == {9}
    ab = {"a": "nginx-gridfs", "b": "nginx-gridfs-b", "kind": "A/A", "change": "", "blocks": 12,
          "threshold": 0.05, "design": "duet", "machine": {}, "cases": [case], "rows": rows}
    page = render_change(Results(run_id="r", started_at="s", environment={}, ab=ab))
    assert "## Blocks: 1MB c=100, timed at c=9 (what both twins admitted)" in page
    assert ("**1MB c=100: both twins shed 97% and 98% in sizing; timed at c=9 (what they admitted: 16 whole "
            "answers/s x 0.57 s).**") in page
    assert "(12 blocks, timed at c=9)" in page
    # still measured: the gate judges it (never "not measured", 2), by its label
    code, why = gate_rule.judge_gate({"status": "complete", **ab}, ["rps"])
    assert code != gate_rule.NOT_MEASURED and all("c=9" not in w for w in why)
    # a case timed as set says nothing of it
    plain = {**case, "timed_concurrency": 100, "admitted": None}
    page = render_change(Results(run_id="r", started_at="s", environment={},
                                 ab={**ab, "cases": [plain], "rows": judge([plain], 0.05)}))
    assert "## Blocks: 1MB c=100\n" in page and "timed at" not in page


def test_ab_admitted_is_on_unless_set_off():
    env = {"BENCH_TARGETS": "flask flask-b", "AB_A": "flask", "AB_B": "flask-b"}
    assert from_env(env).ab.admitted is True
    assert from_env({**env, "AB_ADMITTED": "off"}).ab.admitted is False
    with pytest.raises(SettingsError, match="AB_ADMITTED='always': expected 'on' "):
        from_env({**env, "AB_ADMITTED": "always"})


def test_ab_json_records_whether_cases_may_be_timed_at_what_was_admitted(tmp_path):
    from types import SimpleNamespace

    from bench.benchmark.change import ChangeRun
    from bench.results import TargetResult
    env = {"BENCH_TARGETS": "flask flask-b", "AB_A": "flask", "AB_B": "flask-b"}
    for setting, recorded in (("on", True), ("off", False)):
        results = Results(run_id="r", started_at="s", environment={},
                          targets=[TargetResult("flask", "http://flask:8080", True),
                                   TargetResult("flask-b", "http://flask-b:8080", False, "connection refused")])
        ChangeRun(from_env({**env, "AB_ADMITTED": setting}), SimpleNamespace(run_dir=tmp_path), results).run(
            [{"name": "1KB.bin", "size": 1024}])
        assert results.ab["admitted"] is recorded and results.ab["concurrency"] == [100]
