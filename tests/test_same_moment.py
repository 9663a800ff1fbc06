"""BENCH_CPU_DESIGN=same-moment (bench.measure.same_moment,
bench.benchmark.same_moment): the window's rate and length rules, each
target's figures and why one has none, the per-round CPU log ratio from a
window shaped as bench records it (figures from results/example), the
rounds' choice of source, the plan's seconds, the record and the report's
label. No Docker, no tool runs: the timer is a stand-in."""
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from bench.benchmark import same_moment as same_moment_run
from bench.benchmark.closed_loop import CaseRounds, rounds_record, rounds_seconds
from bench.benchmark.costs import MEASURED_OVERHEAD_S
from bench.benchmark.phase import Scope
from bench.benchmark.phases import planned_seconds
from bench.benchmark.schedule import WINDOW_WARM_UP_S
from bench.clients import timing
from bench.measure import same_moment
from bench.measure.rounds import BASELINE, CPU, CPU_TOTAL, RPS, metric_logs, paired_logs, ratios
from bench.measure.usage import SENT_RATE_KEPT
from bench.report.headline import cpu_condition
from bench.report.markdown import render_markdown
from bench.results import Results, TargetResult
from bench.settings import from_env
from support.kept_runs import example_rounds

FILE = "1KB.bin"


@pytest.fixture(scope="module")
def example() -> dict:
    return example_rounds()


def first_rounds(example: dict, file: str = FILE) -> dict[str, list[dict]]:
    """Each path's closed-loop windows at `file` (c=100), as recorded."""
    return {r["target"]: r["repetitions"] for r in example["runs"] if r["file"] == file}


def vegeta_rep(target: str, rate: float, seconds: float, cpu_ms: float | None, sent_rate: float | None = None,
               refused: int = 0) -> dict:
    """A measured vegeta run as Timer.measured_together returns it (the
    fields the window reads), its target's CPU per request `cpu_ms`."""
    requests = round(rate * seconds)
    whole = requests - refused
    cpu = {} if cpu_ms is None else {target: {"cpu_seconds": round(cpu_ms * whole * 0.66 / 1000, 6),
                                              "requests_in_window": round(whole * 0.66, 1),
                                              "cpu_ms_per_request": cpu_ms}}
    return {"tool": "vegeta", "requests": requests, "failed": 0, "refused": refused, "rate": rate,
            "sent_rate": rate if sent_rate is None else sent_rate, "cpu": cpu, "flags": []}


def window_of(reps: dict[str, dict | None], rate: int, count: int = 1) -> dict:
    return {"round": count, "file": FILE, "rate": rate, "seconds": same_moment.window_seconds(rate),
            "targets": {n: same_moment_run.target_figures(rep, rate, n) for n, rep in reps.items()}}


# --- the rules ------------------------------------------------------------------
def test_the_rate_is_a_quarter_of_the_slowest_rounded_down_and_at_least_one():
    assert same_moment.window_rate([5223.93, 274.6, 302.31]) == 68  # 0.25 x 274.6 = 68.65
    assert same_moment.window_rate([80.0]) == 20
    assert same_moment.window_rate([9.2, 40.0]) == 2  # 1 MB's slowest: 2.3 -> 2
    assert same_moment.window_rate([2.0]) == 1 and same_moment.window_rate([0.3]) == 1
    assert same_moment.window_rate([0.0, 100.0]) == 25  # a path with no rate does not set it
    assert same_moment.window_rate([]) is None and same_moment.window_rate([0.0]) is None


def test_the_window_holds_five_cadvisor_readings_and_twenty_requests():
    assert same_moment.window_seconds(68) == same_moment.MIN_WINDOW_S == 6.0
    assert same_moment.window_seconds(5) == 6.0  # 20 / 5 -> 4 s, under the shortest
    assert same_moment.window_seconds(3) == 7.0  # 20 / 3 -> 6.7, whole seconds up
    assert same_moment.window_seconds(2) == 10.0  # 1 MB at 2/s
    assert same_moment.window_seconds(1) == 20.0
    for rate in (1, 2, 3, 7, 50):
        assert rate * same_moment.window_seconds(rate) >= same_moment.MIN_WINDOW_REQUESTS


def test_the_first_rounds_whole_answer_rate_sets_the_examples_rate(example):
    reps = first_rounds(example)
    rates = {name: same_moment_run.first_round_rate(r) for name, r in reps.items()}
    assert rates["node"] == pytest.approx(274.6)  # the slowest at 1 KB in round 1
    assert same_moment.window_rate(list(rates.values())) == same_moment_run.case_rate(reps) == 68
    # refused and failed answers are not served: 1000 of which 250 refused, 250 cut short
    assert same_moment_run.first_round_rate([{"round": 2, "rps": 1.0, "requests": 1, "failed": 0, "refused": 0},
                                         {"round": 1, "rps": 100.0, "requests": 1000, "failed": 250,
                                          "refused": 250}]) == pytest.approx(100.0 * 500 / 750)
    assert same_moment_run.first_round_rate([]) is None


# --- one window's figures -------------------------------------------------------
def test_a_target_without_a_figure_says_why():
    rate, figures = 50, same_moment_run.target_figures
    fine = figures(vegeta_rep("p", rate, 3, 0.5), rate, "p")
    assert fine["excluded"] is None and fine["whole"] == 150 and fine["cpu_ms_per_request"] == 0.5
    assert fine["cpu_seconds"] == pytest.approx(0.5 * 99 / 1000) and not fine["behind_schedule"]
    assert figures(None, rate, "p")["excluded"] == same_moment.NOT_RUN
    assert figures(vegeta_rep("p", rate, 3, 0.5, refused=150), rate, "p")["excluded"] == same_moment.NO_WHOLE
    assert figures(vegeta_rep("p", rate, 3, None), rate, "p")["excluded"] == same_moment.NO_CPU
    late = figures(vegeta_rep("p", rate, 3, 0.5, sent_rate=0.9 * SENT_RATE_KEPT * rate), rate, "p")
    assert late["behind_schedule"] and late["excluded"] == same_moment.BEHIND
    kept = figures(vegeta_rep("p", rate, 3, 0.5, sent_rate=SENT_RATE_KEPT * rate), rate, "p")
    assert not kept["behind_schedule"] and kept["excluded"] is None


def test_the_rounds_cpu_log_ratio_comes_from_one_window(example):
    """The example's round-1 CPU per request of each path at 1 KB, as if
    read in one window at the rate its first round gives."""
    rate = same_moment.window_rate([same_moment_run.first_round_rate(r) for r in first_rounds(example).values()])
    cpu = {name: reps[0]["cpu"][name]["cpu_ms_per_request"] for name, reps in first_rounds(example).items()}
    seconds = same_moment.window_seconds(rate)
    window = window_of({n: vegeta_rep(n, rate, seconds, ms) for n, ms in cpu.items()}, rate)
    assert same_moment.window_log_ratio(window, "flask", BASELINE) == pytest.approx(math.log(2.807129 / 0.098028))
    assert same_moment.window_log_ratio(window, BASELINE, BASELINE) == 0.0
    # nginx-static behind schedule: no path has a figure that round
    late = window_of({n: vegeta_rep(n, rate, seconds, ms, sent_rate=rate / 2 if n == BASELINE else None)
                      for n, ms in cpu.items()}, rate, 2)
    assert same_moment.window_log_ratio(late, "flask", BASELINE) is None
    # flask answered nothing whole: it alone has none
    shed = window_of({n: vegeta_rep(n, rate, seconds, ms, refused=round(rate * seconds) if n == "flask" else 0)
                      for n, ms in cpu.items()}, rate, 3)
    assert same_moment.window_log_ratio(shed, "flask", BASELINE) is None
    assert same_moment.window_log_ratio(shed, "node", BASELINE) == pytest.approx(math.log(3.59287 / 0.098028))
    assert same_moment.window_logs([shed, late, window], "node", BASELINE) == pytest.approx(
        [math.log(3.59287 / 0.098028)] * 2)
    assert same_moment.window_logs([shed, late, window], "flask", BASELINE) == pytest.approx(
        [math.log(2.807129 / 0.098028)])


# --- the rounds' source ---------------------------------------------------------
def closed(round_: int, rps: float, cpu_ms: float, target: str) -> dict:
    return {"round": round_, "rps": rps, "flags": [], "cpu": {target: {"cpu_ms_per_request": cpu_ms},
                                                              "mongo": {"cpu_ms_per_request": 1.0}}}


def test_the_cpu_ratio_takes_its_rounds_from_the_windows_when_given():
    reps = [closed(i, 100.0, 2.0 * (1 + i / 10), "p") for i in range(1, 7)]
    base = [closed(i, 1000.0, 1.0, BASELINE) for i in range(1, 7)]
    windows = [window_of({"p": vegeta_rep("p", 20, 3, 3.0), BASELINE: vegeta_rep(BASELINE, 20, 3, 1.0)}, 20, i)
               for i in range(1, 7)]
    assert metric_logs(reps, base, CPU, "p", BASELINE) == paired_logs(reps, base, CPU, "p", BASELINE)
    assert metric_logs(reps, base, CPU, "p", BASELINE, windows) == pytest.approx([math.log(3.0)] * 6)
    for metric in (RPS, CPU_TOTAL):  # the rest stays the closed loop's
        assert metric_logs(reps, base, metric, "p", BASELINE, windows) == paired_logs(reps, base, metric, "p",
                                                                                      BASELINE)
    found = ratios(reps, base, "p", BASELINE, cpu_windows=windows)
    assert found[CPU].ratio == pytest.approx(3.0) and found[CPU].rounds == 6 and found[CPU].sd == 0.0
    assert found[RPS].ratio == pytest.approx(0.1)
    assert ratios(reps, base, "p", BASELINE)[CPU].ratio != pytest.approx(3.0)
    assert CPU not in ratios(reps, base, "p", BASELINE, cpu_windows=[])  # no window: no CPU ratio, no stand-in


# --- the settings, the plan, the record -------------------------------------------
BASE_ENV = {"BENCH_TARGETS": "nginx-static flask"}


def test_the_setting_defaults_to_same_moment_and_reads_rounds():
    assert from_env(BASE_ENV).cpu_design == "same-moment"
    assert from_env({**BASE_ENV, "BENCH_CPU_DESIGN": " "}).cpu_design == "same-moment"
    assert from_env({**BASE_ENV, "BENCH_CPU_DESIGN": "rounds"}).cpu_design == "rounds"
    assert same_moment_run.in_use(from_env(BASE_ENV))
    assert not same_moment_run.in_use(from_env({**BASE_ENV, "BENCH_CPU_DESIGN": "rounds"}))


def test_the_plan_holds_a_window_per_file_and_round():
    rounds = from_env({**BASE_ENV, "BENCH_CPU_DESIGN": "rounds"})
    same = replace(rounds, cpu_design="same-moment")
    window = same_moment.MIN_WINDOW_S + MEASURED_OVERHEAD_S
    assert rounds_seconds(same, 8, 3) - rounds_seconds(rounds, 8, 3) == pytest.approx(3 * window)
    # the rounds' own seconds unchanged by the setting's default
    assert rounds_seconds(rounds, 8, 3) == pytest.approx(
        2.5 + 8 * 3 * (rounds.duration + WINDOW_WARM_UP_S + MEASURED_OVERHEAD_S))
    scope = Scope([TargetResult(n, f"http://{n}", True) for n in ("nginx-static", "flask")],
                  [{"name": f"{n}.bin", "size": 1} for n in ("1KB", "1MB")], None, "20261129T040000Z")
    assert planned_seconds(same, scope) - planned_seconds(rounds, scope) == pytest.approx(
        rounds.repetitions * 2 * window)


def test_the_record_adds_the_windows_only_for_same_moment():
    rounds = from_env({**BASE_ENV, "BENCH_CPU_DESIGN": "rounds"})
    same = replace(rounds, cpu_design="same-moment")
    case = CaseRounds({"name": FILE, "size": 1024}, 100, f"{FILE} c=100", True)
    case.cpu_rate = 50
    case.cpu_windows = [window_of({BASELINE: vegeta_rep(BASELINE, 50, 3, 0.1)}, 50)]
    lower = CaseRounds({"name": FILE, "size": 1024}, 5, f"{FILE} c=5", False)
    plain = rounds_record(rounds, [case, lower], 1, "fixed count", {})
    assert not {"cpu_design", "cpu_rates", "cpu_windows"} & set(plain)
    record = rounds_record(same, [case, lower], 1, "fixed count", {})
    assert record["cpu_design"] == "same-moment" and record["cpu_rates"] == {FILE: 50}
    assert record["cpu_windows"] == case.cpu_windows
    assert json.loads(json.dumps(record)) == record
    # the headline case's CPU from its windows; a lower concurrency's from its own
    assert case.cpu_source(same) is case.cpu_windows and case.cpu_source(rounds) is None
    assert lower.cpu_source(same) is None


class StandInTimer:
    """What a round's window asks of bench.benchmark.cases.Timer, the tool
    run's Measurements standing in as measured reps."""

    def __init__(self, cfg):
        self.cfg, self.down, self.monitor, self.run_dir = cfg, {}, object(), None
        self.progress = type("Progress", (), {"advance": lambda self, seconds: None})()

    def url(self, target, f):
        return f"{target.url}/files/{f['name']}"

    def measured_together(self, names, run):
        return run()


def test_a_round_runs_one_window_at_the_first_rounds_rate_and_judges_cpu_from_it(monkeypatch, example):
    same = replace(from_env(BASE_ENV), cpu_design="same-moment", repetitions=2, target_width=None)
    names = ["nginx-static", "flask", "node"]
    targets = [TargetResult(n, f"http://{n}:8080", True) for n in names]
    recorded = first_rounds(example)
    cpu = {"nginx-static": 0.1, "flask": 0.3, "node": 0.4}
    asked = []

    def vegeta_together(urls, rate, seconds, out_dir, runs):
        asked.append(([u.split("/")[2].split(":")[0] for u in urls], rate, seconds))
        return [vegeta_rep(n, rate, seconds, cpu[n], sent_rate=rate / 2 if n == "node" else None)
                for n in asked[-1][0]]
    monkeypatch.setattr(same_moment_run, "run_vegeta_together", vegeta_together)
    case = CaseRounds({"name": FILE, "size": 1024}, 100, f"{FILE} c=100", True)
    for n in names:
        case.reps[n] = [{**recorded[n][0], "round": 1}]
    case.same_moment_window(StandInTimer(same), targets, 1)
    assert asked == [(names, 68, 6.0)] and case.cpu_rate == 68  # node's 274.6/s in round 1, a quarter
    window = case.cpu_windows[0]
    assert (window["round"], window["rate"], window["seconds"]) == (1, 68, 6.0)
    assert window["targets"]["node"]["excluded"] == same_moment.BEHIND
    assert window["targets"]["flask"]["whole"] == 68 * 6 and window["targets"]["flask"]["excluded"] is None
    case.judge(same, 1)
    assert case.ratios["flask"]["cpu"]["ratio"] == pytest.approx(3.0)
    assert "cpu" not in case.ratios["node"]  # its only window fell behind
    assert case.ratios["flask"]["rps"]["ratio"] == pytest.approx(302.31 / 5223.93, rel=1e-3)
    # round 2 keeps the first round's rate whatever round 2's closed loop gave
    for n in names:
        case.reps[n].append({**recorded[n][0], "round": 2, "rps": 1.0})
    case.same_moment_window(StandInTimer(same), targets, 2)
    assert [rate for _, rate, _ in asked] == [68, 68]
    # the rounds design never runs a window
    plain = CaseRounds({"name": FILE, "size": 1024}, 100, f"{FILE} c=100", True)
    plain.reps = case.reps
    plain.same_moment_window(StandInTimer(replace(same, cpu_design="rounds")), targets, 1)
    assert plain.cpu_windows == [] and plain.cpu_rate is None and len(asked) == 2


# --- the report's label ---------------------------------------------------------
def test_the_cpu_column_says_its_rate_and_that_every_path_ran_at_once():
    results = Results.from_dict(example_rounds())
    assert cpu_condition(results) is None
    before = render_markdown(results)
    assert "all paths at once" not in before
    results.rounds = {**results.rounds, "cpu_design": "same-moment",
                      "cpu_rates": {"1MB.bin": 2, "1KB.bin": 68, "100KB.bin": 20}}
    # each size's rate, smallest size first, when they differ
    assert cpu_condition(results) == "at 68 req/s (1KB), 20 req/s (100KB), 2 req/s (1MB), all paths at once"
    assert "CPU/request ratio to nginx-static at 68 req/s (1KB), 20 req/s (100KB)" in render_markdown(results)
    results.rounds["cpu_rates"] = {f: 50 for f in ("1KB.bin", "100KB.bin", "1MB.bin")}
    assert cpu_condition(results) == "at 50 req/s, all paths at once"
    report = render_markdown(results)
    assert "CPU/request ratio to nginx-static at 50 req/s, all paths at once" in report
    assert "CPU/request ratio at 50 req/s, all paths at once" in report  # the rounds' table


# --- the tools started together ---------------------------------------------------
FAKE_VEGETA = '''#!{python}
"""vegeta's three commands as run_vegeta(_together) call them: attack
records its arguments, its target (-targets file or stdin) and when it
started; report and encode print captured outputs."""
import json, sys, time
from pathlib import Path
command, args = sys.argv[1], dict(a.lstrip("-").split("=", 1) for a in sys.argv[2:] if "=" in a)
fixtures = Path({fixtures!r})
if command == "attack":
    target = Path(args["targets"]).read_text() if "targets" in args else sys.stdin.read()
    Path(args["output"]).write_text(json.dumps({{"args": sys.argv[2:], "target": target, "started": time.time()}}))
    time.sleep(0.2)
elif command == "report":
    print((fixtures / "nginx-1KB-rate200.json").read_text())
else:
    print((fixtures / "slow-0.3s-rate200.jsonl").read_text())
'''


@pytest.fixture
def fake_vegeta(tmp_path, monkeypatch) -> Path:
    fake = tmp_path / "vegeta"
    fake.write_text(FAKE_VEGETA.format(python=sys.executable,
                                       fixtures=str(Path(__file__).parent / "fixtures" / "vegeta")))
    fake.chmod(0o755)
    monkeypatch.setenv("VEGETA", str(fake))
    return fake


def recording_reads(monkeypatch) -> list:
    """(the attack's record, its Process) of every attack read, in order."""
    seen = []
    real_read = timing.vegeta_read

    def read(binary, results, rate, attack, out_dir, name):
        seen.append((json.loads(Path(results).read_text()), attack))
        return real_read(binary, results, rate, attack, out_dir, name)
    monkeypatch.setattr(timing, "vegeta_read", read)
    return seen


def test_every_url_gets_its_own_vegeta_started_together(fake_vegeta, tmp_path, monkeypatch):
    seen = recording_reads(monkeypatch)
    urls = ["http://nginx-static:8080/files/1KB.bin", "http://flask:8080/files/1KB.bin"]
    found = timing.run_vegeta_together(urls, 200, 1.0, tmp_path, ["a-same-moment-r1", "b-same-moment-r1"])
    assert [s["target"] for s, _ in seen] == [f"GET {u}\n" for u in urls]
    assert all("-rate=200/1s" in s["args"] and "-duration=1.000s" in s["args"] for s, _ in seen)
    assert abs(seen[0][0]["started"] - seen[1][0]["started"]) < 0.15  # at once, not one after the other
    assert seen[0][1].started_ns == seen[1][1].started_ns  # one window's start for every target
    assert [m.rate for m in found] == [200, 200] and all(m.requests > 0 and m.completions for m in found)
    assert (tmp_path / "a-same-moment-r1.json").exists() and (tmp_path / "b-same-moment-r1.json").exists()


def test_the_browser_checks_own_cpu_ratio_agrees_with_the_headline(example):
    """tests/support/browser_check.py recomputes every headline cell from
    results.json without the renderer's code: for a same-moment run its CPU
    ratio comes from the windows too (here: the example's rounds, each
    path's CPU per request as if read in one window a round)."""
    from support.browser_check import expected_headline

    from bench.report.headline import headline_rows, ratio_words
    data = json.loads(json.dumps(example))
    windows = []
    for file in ("1KB.bin", "1MB.bin"):
        reps = first_rounds(data, file)
        for count in range(1, 7):
            cpu = {n: next((r["cpu"][n]["cpu_ms_per_request"] for r in rs if r["round"] == count), None)
                   for n, rs in reps.items()}
            window = window_of({n: vegeta_rep(n, 10, 3, ms) for n, ms in cpu.items()}, 10, count)
            windows.append({**window, "file": file})
    windows[0]["targets"]["flask"]["excluded"] = same_moment.BEHIND
    rows = data["rounds"]["rows"]
    for row in rows:
        if row["headline"] and row["file"] in ("1KB.bin", "1MB.bin"):
            mine = [w for w in windows if w["file"] == row["file"]]
            reps = first_rounds(data, row["file"])
            found = ratios(reps[row["target"]], reps[BASELINE], row["target"], BASELINE, cpu_windows=mine)
            row["cpu"] = found[CPU].to_dict() if CPU in found else None
    data["rounds"].update(cpu_design="same-moment", cpu_rates={"1KB.bin": 10, "1MB.bin": 10}, cpu_windows=windows)
    results = Results.from_dict(data)
    wanted = expected_headline(data)
    shown = {(h.target, h.run.file): ratio_words(h.cpu, h.cpu_ratio) for h in headline_rows(results)}
    for (target, file, _), cells in wanted.items():
        if file in ("1KB.bin", "1MB.bin"):
            assert shown[(target, file)].startswith(cells["cpu-ratio"]), (target, file)
    assert shown[("flask", "1KB.bin")] != ratio_words(
        next(r for r in example["rounds"]["rows"] if (r["target"], r["file"]) == ("flask", "1KB.bin"))["cpu"])


def test_one_vegeta_still_gets_its_url_on_stdin(fake_vegeta, tmp_path, monkeypatch):
    seen = recording_reads(monkeypatch)
    m = timing.run_vegeta("http://flask:8080/files/1KB.bin", 200, 2.5, tmp_path, "flask-1KB-rate")
    assert seen[0][0]["target"] == "GET http://flask:8080/files/1KB.bin\n"
    assert not any(a.startswith("-targets") for a in seen[0][0]["args"]) and "-duration=2.500s" in seen[0][0]["args"]
    assert m.rate == 200 and m.raw_output == "flask-1KB-rate.json" and (tmp_path / "flask-1KB-rate.json").exists()


def test_a_same_moment_cpu_ratio_carries_no_flagged_baseline_mark():
    """† says a ratio rests on a flagged nginx-static figure: the closed
    loop's, for req/s and for the rounds' CPU ratio; a same-moment CPU ratio
    rests on nginx-static in its own window, at a rate far below its
    capacity."""
    def marked(report: str) -> tuple[int, int]:
        head = report.split("## Headline", 1)[1].split("\n\n")[2]  # the sentences, then the table
        cells = [line.split("|")[5:7] for line in head.splitlines()[2:]]
        return sum(rps.strip().endswith("†") for rps, _ in cells), sum(cpu.strip().endswith("†") for _, cpu in cells)

    results = Results.from_dict(example_rounds())
    rps, cpu = marked(render_markdown(results))
    assert rps > 0 and cpu == rps
    results.rounds = {**results.rounds, "cpu_design": "same-moment", "cpu_rates": {"1KB.bin": 50, "1MB.bin": 50}}
    assert marked(render_markdown(results)) == (rps, 0)
