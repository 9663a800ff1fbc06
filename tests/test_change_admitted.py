"""An A/B case whose sizing shed is timed at the concurrency both twins
admitted (bench.benchmark.change: whole_in_flight, next_level), on captured
windows of nginx-gridfs at 1 MB on the FerretDB stand-in: wrk's sizing at
c=100, where its admission refused 97.5-97.6% of each twin's answers (run
20261129T180028Z, block 1), and at c=8, where it refused none (run
20261129T182359Z, block 1); vegeta's closed loop at c=100 and c=8, with
nginx's access log of the same seconds (tests/fixtures/nginx-access/README.md).
The case keeps its label, so the gate and a calibration still compare it."""
import functools
import gzip
import json
import os
import sys
import time
from pathlib import Path

import pytest

from bench.benchmark.change import (ADMITTED_SHED, ADMITTED_STEPS, admitted_level, admitted_record, blocks, judge,
                                    next_level, sheds, sizing_figures, sizing_step, whole_in_flight)
from bench.clients.timing import run_vegeta_closed, wrk_measurement
from bench.clients.vegeta_output import parse_results
from bench.report.change import render_change
from bench.results import Results
from bench.settings import SettingsError, from_env

import gate_rule
from test_timing_rounds import two_nginx, vegeta  # noqa: F401 (fixtures)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WRK, VEGETA, NGINX = FIXTURES / "wrk", FIXTURES / "vegeta", FIXTURES / "nginx-access"
WINDOW_S = 9  # every captured window: -d9s, -duration=9s


def sized(fixture: str) -> dict:
    """A twin's sizing as ab.json keeps it, from a captured wrk window."""
    return sizing_figures(wrk_measurement((WRK / fixture).read_text(), threads=1))


@functools.cache
def closed_loop(clients: int) -> dict:
    """whole_in_flight of the captured closed-loop window at `clients`."""
    text = gzip.decompress((VEGETA / f"nginx-gridfs-1MB-closed-c{clients}.jsonl.gz").read_bytes()).decode()
    return whole_in_flight(parse_results(text), WINDOW_S)


def nginx_in_flight(log: str) -> float:
    """Whole answers in flight by nginx's own clock: its 200s' request_time
    summed over the window (log_format "$status $bytes_sent $request_time ...")."""
    lines = gzip.decompress((NGINX / log).read_bytes()).decode().splitlines()
    return sum(float(line.split()[2]) for line in lines if line.split()[0] == "200") / WINDOW_S


@pytest.mark.parametrize("clients", [100, 8])
def test_what_a_twin_admitted_is_its_whole_answers_in_flight_as_nginx_logged_them(clients):
    found = closed_loop(clients)
    logged = nginx_in_flight(f"nginx-gridfs-1MB-closed-c{clients}-vegeta.log.gz")
    assert found["in_flight"] == pytest.approx(logged, rel=0.02)
    # c=100: 397 whole of 12,485 (the rest refused), 29.8 in flight; c=8: every answer whole, its 8 clients
    assert (found["answers"], found["whole"]) == {100: (12485, 397), 8: (405, 405)}[clients]
    assert found["in_flight"] == pytest.approx({100: 29.8, 8: 8.0}[clients], abs=0.1)


def test_the_level_estimated_is_the_smaller_twins_rounded_down_at_least_one_at_most_as_set():
    at_100, at_8 = closed_loop(100)["in_flight"], closed_loop(8)["in_flight"]
    assert admitted_level({"a": at_100, "b": at_100}, 100) == 29
    # c=8 shed nothing and held its 8 clients: the level as set, no fewer
    assert admitted_level({"a": at_8, "b": at_8}, 8) == 8
    assert admitted_level({"a": at_100, "b": at_8}, 100) == 8
    assert admitted_level({"a": at_100, "b": at_100}, 5) == 5
    assert admitted_level({"a": 0.4, "b": at_100}, 100) == 1


def test_a_share_shed_up_to_the_constant_is_not_past_what_a_path_admits():
    calm = sized("nginx-gridfs-1MB-c8.txt")  # 219 answers, none refused
    at = int(calm["requests"] * ADMITTED_SHED)  # 10 of 219: 4.6%; 11 would be 5.02%
    assert not sheds(sizing_step(8, {"a": {**calm, "refused": at}, "b": calm}))
    assert sheds(sizing_step(8, {"a": {**calm, "refused": at + 1}, "b": calm}))
    # lost answers (no answer, or one cut short) count as shed too
    assert sheds(sizing_step(8, {"a": calm, "b": {**calm, "failed": at + 1}}))
    shedding = sizing_step(100, {"nginx-gridfs": sized("nginx-gridfs-1MB-c100-admitting.txt"),
                                 "nginx-gridfs-b": sized("nginx-gridfs-b-1MB-c100-admitting.txt")})
    assert shedding == {"c": 100, "shed": {"nginx-gridfs": 0.9758, "nginx-gridfs-b": 0.9746}}


SHEDDING = {"a": "nginx-gridfs-1MB-c100-admitting.txt", "b": "nginx-gridfs-b-1MB-c100-admitting.txt"}
CALM = {"a": "nginx-gridfs-1MB-c8.txt", "b": "nginx-gridfs-b-1MB-c8.txt"}


def settle(configured: int, estimate: int, calm_from: int) -> list[dict]:
    """The sizings ChangeRun.admit runs, as next_level asks for them: each
    level's figures the captured shedding windows above `calm_from`, the
    captured calm ones at it and below (captured windows stand in for
    levels not captured)."""
    steps = [sizing_step(configured, {n: sized(SHEDDING[n]) for n in "ab"})]
    while (level := next_level(steps, estimate)) is not None:
        steps.append(sizing_step(level, {n: sized((SHEDDING if level > calm_from else CALM)[n]) for n in "ab"}))
    return steps


def test_the_estimate_is_sized_again_and_halved_while_a_twin_still_sheds():
    # what both admitted sheds nothing: timed there, after one sizing
    assert [s["c"] for s in settle(100, 29, calm_from=29)] == [100, 29]
    # it still sheds: halved, at least 1, until neither sheds
    assert [s["c"] for s in settle(100, 29, calm_from=8)] == [100, 29, 14, 7]
    assert [s["c"] for s in settle(100, 3, calm_from=1)] == [100, 3, 1]
    # at most ADMITTED_STEPS halvings; then the last level, still shedding
    assert ADMITTED_STEPS == 3 and [s["c"] for s in settle(100, 40, calm_from=0)] == [100, 40, 20, 10, 5]
    assert [s["c"] for s in settle(100, 9, calm_from=0)] == [100, 9, 4, 2, 1]
    # the estimate is the level as set: its own sizing shed there, so it is halved at once
    assert [s["c"] for s in settle(5, 5, calm_from=2)] == [5, 2]
    assert [s["c"] for s in settle(1, 1, calm_from=0)] == [1]


def test_ab_json_records_every_step_and_says_it_in_one_line():
    held = {"nginx-gridfs": closed_loop(100), "nginx-gridfs-b": {**closed_loop(100), "in_flight": 31.04}}
    record = admitted_record(100, held, 29, settle(100, 29, calm_from=8))
    assert (record["timed"], record["still_shed"], record["estimate"]) == (7, False, 29)
    assert [s["c"] for s in record["steps"]] == [100, 29, 14, 7] and record["in_flight"] == held
    assert record["said"] == ("both twins shed 97% and 98% in sizing at c=100; vegeta's closed loop held 29.8 and 31.0 "
                              "whole answers in flight; c=29 shed 97% and 98%; c=14 shed 97% and 98%; "
                              "timed at c=7, shedding 0% there")
    stuck = admitted_record(100, held, 9, settle(100, 9, calm_from=0))
    assert (stuck["timed"], stuck["still_shed"]) == (1, True)
    assert stuck["said"].endswith("; c=2 shed 97% and 98%; c=1 still shed 97% and 98%: timed there")
    one = sizing_step(100, {"a": sized(CALM["a"]), "b": sized(SHEDDING["b"])})
    assert admitted_record(100, held, 29, [one, sizing_step(29, {n: sized(CALM[n]) for n in "ab"})])[
        "said"].startswith("b shed 97% in sizing at c=100;")


FAKE_VEGETA = '''#!{python}
"""vegeta's attack and encode as run_vegeta_closed calls them: attack
notes its arguments, its target and when it started; encode prints the
captured closed-loop window at c=8."""
import gzip, json, sys, time
from pathlib import Path
command, args = sys.argv[1], dict(a.lstrip("-").split("=", 1) for a in sys.argv[2:] if "=" in a)
if command == "attack":
    with open({notes!r}, "a") as notes:
        notes.write(json.dumps({{"args": sys.argv[2:], "target": Path(args["targets"]).read_text(),
                                "started": time.time()}}) + "\\n")
    Path(args["output"]).write_text("")
    time.sleep(0.2)
else:
    sys.stdout.write(gzip.decompress(Path({fixture!r}).read_bytes()).decode())
'''


def test_the_closed_loop_loads_both_twins_at_once_at_the_level_and_reads_every_answer(tmp_path, monkeypatch):
    fake, notes = tmp_path / "vegeta", tmp_path / "attacks.jsonl"
    fake.write_text(FAKE_VEGETA.format(python=sys.executable, notes=str(notes),
                                       fixture=str(VEGETA / "nginx-gridfs-1MB-closed-c8.jsonl.gz")))
    fake.chmod(0o755)
    monkeypatch.setenv("VEGETA", str(fake))
    urls = ["http://nginx-gridfs:8080/files/1MB.bin", "http://nginx-gridfs-b:8080/files/1MB.bin"]
    found = run_vegeta_closed(urls, 8, WINDOW_S, lambda answers: whole_in_flight(answers, WINDOW_S))
    assert found == [closed_loop(8), closed_loop(8)]
    attacks = [json.loads(line) for line in notes.read_text().splitlines()]
    assert sorted(a["target"] for a in attacks) == sorted(f"GET {u}\n" for u in urls)
    for attack in attacks:  # each twin's 8 clients asking again as soon as answered, as make overload's step
        assert {"-rate=0", "-workers=8", "-max-workers=8", "-duration=9.000s", "-max-body=0"} <= set(attack["args"])
    assert abs(attacks[0]["started"] - attacks[1]["started"]) < 0.15  # at once, not one after the other


FAKE_WRK = '''#!{python}
"""wrk as the A/B's sizing calls it: the captured window of the twin its URL
names, nginx-gridfs's shedding one past {calm} clients, its calm one at or
below; each call noted (its level, when)."""
import json, sys, time
from pathlib import Path
clients, url = int(sys.argv[sys.argv.index("-c") + 1]), sys.argv[-1]
with open({notes!r}, "a") as notes:
    notes.write(json.dumps({{"wrk": clients, "at": time.time()}}) + "\\n")
twin = "nginx-gridfs-b" if "nginx-gridfs-b" in url else "nginx-gridfs"
print(Path({wrk!r}, f"{{twin}}-1MB-c100-admitting.txt" if clients > {calm} else f"{{twin}}-1MB-c8.txt").read_text())
'''


def admitting_run(tmp_path, monkeypatch, targets: dict[str, str], env: dict):
    """A ChangeRun of nginx-gridfs's A/A at 1 MB with wrk and vegeta standing
    in (FAKE_WRK, FAKE_VEGETA), its twins at `targets` (name: URL), and its
    first sizing at c=100 done, as ChangeRun.case runs it: (run, url, sizing)."""
    from types import SimpleNamespace

    from bench.benchmark.cases import Timer
    from bench.benchmark.change import ChangeRun
    from bench.progress import Progress
    from bench.results import TargetResult
    for name, text in (("wrk", FAKE_WRK.format(python=sys.executable, wrk=str(WRK), calm=4,
                                               notes=str(tmp_path / "calls.jsonl"))),
                       ("vegeta", FAKE_VEGETA.format(python=sys.executable, notes=str(tmp_path / "attacks.jsonl"),
                                                     fixture=str(VEGETA / "nginx-gridfs-1MB-closed-c8.jsonl.gz")))):
        (tmp_path / name).write_text(text)
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setenv("VEGETA", str(tmp_path / "vegeta"))
    cfg = from_env({"BENCH_TARGETS": "nginx-gridfs nginx-gridfs-b", "AB_A": "nginx-gridfs", "AB_B": "nginx-gridfs-b",
                    "AB_WINDOW": str(WINDOW_S), "AB_WARMUP": "1", "CADVISOR_URL": "", **env})
    cfg = SimpleNamespace(**{**vars(cfg), "duration": cfg.ab.window, "warmup": cfg.ab.warmup})
    results = Results(run_id="r", started_at="s", environment={},
                      targets=[TargetResult(n, u, True) for n, u in targets.items()])
    timer = Timer(cfg, tmp_path, results, None, 1.0, Progress(0.0))
    run = ChangeRun(cfg, timer, results)
    url = {n: f"http://{n}:8080/files/1MB.bin" for n in ("nginx-gridfs", "nginx-gridfs-b")}
    sizing = run.sizing("A/B 1MB.bin c=100", {t.name: t for t in results.targets}, url, 100, {})
    timer.progress.planned = timer.progress.done  # the plan counted the first sizing (run.time_change)
    return run, url, sizing


def test_a_case_past_what_its_twins_admit_is_estimated_by_the_closed_loop_and_verified_in_sizing(tmp_path,
                                                                                                monkeypatch):
    """ChangeRun.admit, wrk and vegeta standing in: the closed loop at the
    level as set (c=8's window: 8.08 in flight) gives c=8; wrk there sheds
    past 4 clients, so 8 is halved to 4; every window is counted in the
    plan as it is added to it."""
    run, url, sizing = admitting_run(tmp_path, monkeypatch,
                                     {n: f"http://{n}:8080" for n in ("nginx-gridfs", "nginx-gridfs-b")}, {})
    timer, results, errors = run.timer, run.results, {}
    sides = {t.name: t for t in results.targets}
    record, sizing = run.admit("A/B 1MB.bin c=100", sides, url, 100, sizing, errors)
    assert not errors and [s["c"] for s in record["steps"]] == [100, 8, 4] and record["timed"] == 4
    assert record["estimate"] == 8 and {f["in_flight"] for f in record["in_flight"].values()} == {8.075}
    assert not record["still_shed"] and [m.requests for m in sizing.values()] == [219, 209]  # the calm windows
    attacks = [json.loads(line) for line in (tmp_path / "attacks.jsonl").read_text().splitlines()]
    assert len(attacks) == 2 and all({"-rate=0", "-workers=100", "-max-workers=100"} <= set(a["args"])
                                     for a in attacks)
    assert timer.progress.done == pytest.approx(timer.progress.planned) and timer.progress.done > 0
    assert set(results.schedule["warm_ups"]) >= {"nginx-gridfs+nginx-gridfs-b A/B 1MB.bin c=100 at c=8 sizing",
                                                 "nginx-gridfs+nginx-gridfs-b A/B 1MB.bin c=100 at c=4 sizing"}


def test_every_sizing_runs_on_twins_restarted_as_before_a_block(tmp_path, monkeypatch,
                                                               two_nginx):  # noqa: F811 (the fixture)
    """With AB_RESTART_TWINS=every-block each sizing (the case's first, and
    each that verifies a level) follows a restart of both twins, as a
    block's window does: warmed but not restarted, nginx-gridfs at 1 MB
    after 1 KB held 43-80 answers in flight where fresh twins held 12-16,
    and read c=21-48 shedding at most 5% where its blocks shed 78-96%.
    Restarts answered here as tools/lab/change.py answers them
    (twins.answer), the twins two real nginx answering /health."""
    import threading

    from bench.benchmark import twins
    restarts, stop = [], threading.Event()

    def host():  # the host's side: each restart asked for, noted and answered
        while not stop.is_set():
            for asked in sorted((tmp_path / twins.FOLDER).glob("*.restart")):
                if not asked.with_suffix(".done").exists():
                    restarts.append(time.time())
                    twins.answer(asked, lambda services: {"started_at": {s: time.time() for s in services}})
            stop.wait(0.05)
    answering = threading.Thread(target=host)
    answering.start()
    try:
        first, second = two_nginx
        run, url, sizing = admitting_run(tmp_path, monkeypatch,
                                         {"nginx-gridfs": first.url, "nginx-gridfs-b": second.url},
                                         {"AB_RESTART_TWINS": "every-block"})
        errors: dict = {}
        record, _ = run.admit("A/B 1MB.bin c=100", {t.name: t for t in run.results.targets}, url, 100, sizing,
                              errors)
    finally:
        stop.set()
        answering.join()
    assert not errors and [s["c"] for s in record["steps"]] == [100, 8, 4], errors
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    starts = [min(c["at"] for c in calls if c["wrk"] == level) for level in (100, 8, 4)]  # each sizing's warm-up
    ends = [0.0] + [max(c["at"] for c in calls if c["wrk"] == level) for level in (100, 8)]  # the sizing before
    assert len(restarts) == 3, restarts
    for restart, after, before in zip(restarts, ends, starts):
        assert after < restart < before, (restarts, calls)
    assert run.timer.progress.done == pytest.approx(run.timer.progress.planned)


def test_the_closed_loop_reads_what_real_nginx_held_in_flight(two_nginx, vegeta):  # noqa: F811 (the fixtures)
    first, second = two_nginx
    urls = [f"{first.url}/files/1KB.bin", f"{second.url}/files/1KB.bin"]
    found = run_vegeta_closed(urls, 4, 1.0, lambda answers: whole_in_flight(answers, 1.0))
    for held in found:
        # every answer whole; 4 clients never hold more than 4 in flight (the answers' latencies over 1 s)
        assert held["whole"] == held["answers"] > 0 and 0 < held["in_flight"] <= 4 * 1.05, held


def admitted_case() -> dict:
    """A case as ChangeRun.case records it when timed at what was admitted:
    its blocks the captured c=8 windows, its admitted record settled at 7
    (captured windows standing in, as in settle)."""
    cpu = {"nginx-gridfs": {"cpu_ms_per_request": 1.5}, "nginx-gridfs-b": {"cpu_ms_per_request": 1.5}}

    def rep(fixture: str, block: int, scale: float) -> dict:
        m = wrk_measurement((WRK / fixture).read_text(), threads=1)
        return {"requests": m.requests, "failed": m.failed, "refused": m.refused, "rps": m.rps * scale,
                "cpu": cpu, "block": block, "flags": []}
    a = [rep(CALM["a"], i, 1 + i / 1000) for i in range(1, 13)]
    b = [rep(CALM["b"], i, 1 + i / 1000) for i in range(1, 13)]
    held = {"nginx-gridfs": closed_loop(100), "nginx-gridfs-b": closed_loop(100)}
    admitted = admitted_record(100, held, 29, settle(100, 29, calm_from=8))
    return {"file": "1MB.bin", "size_bytes": 1 << 20, "concurrency": 100, "timed_concurrency": admitted["timed"],
            "admitted": admitted, "error": "", "window_s": 9, "restarts": [],
            "sizing": {"nginx-gridfs": sized(CALM["a"]), "nginx-gridfs-b": sized(CALM["b"])},
            "blocks": blocks(a, b, "nginx-gridfs", "nginx-gridfs-b", ["mongo"])}


def test_ab_json_and_the_page_keep_the_label_and_say_what_the_case_was_timed_at():
    case = admitted_case()
    rows = judge([case], 0.05)
    assert {r["case"] for r in rows} == {"1MB c=100"} and {r["concurrency"] for r in rows} == {100}
    assert {r["timed_concurrency"] for r in rows} == {7}
    ab = {"a": "nginx-gridfs", "b": "nginx-gridfs-b", "kind": "A/A", "change": "", "blocks": 12,
          "threshold": 0.05, "design": "duet", "machine": {}, "cases": [case], "rows": rows}
    page = render_change(Results(run_id="r", started_at="s", environment={}, ab=ab))
    assert "## Blocks: 1MB c=100, timed at c=7 (what both twins admitted)" in page
    assert (f"**1MB c=100: {case['admitted']['said']}.** Past what a path admits, which answers come whole is a "
            "lottery of the twins' limits; the blocks ran at c=7") in page
    assert "(12 blocks, timed at c=7)" in page
    # still measured: the gate judges it (never "not measured", 2), by its label
    code, why = gate_rule.judge_gate({"status": "complete", **ab}, ["rps"])
    assert code != gate_rule.NOT_MEASURED and all("c=7" not in w for w in why)
    # timed where a twin still shed: the heading says so
    stuck = {**case, "timed_concurrency": 1,
             "admitted": admitted_record(100, case["admitted"]["in_flight"], 9, settle(100, 9, calm_from=0))}
    page = render_change(Results(run_id="r", started_at="s", environment={},
                                 ab={**ab, "cases": [stuck], "rows": judge([stuck], 0.05)}))
    assert "## Blocks: 1MB c=100, timed at c=1 (still shedding there)" in page
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
