"""A timed run is one list of phases (bench.benchmark.phases.PHASES): run.py
walks it, and the plan (planned seconds, the budget's deadlines, the
Progress) comes from the same list."""
import json
import time

from bench.benchmark.phase import Phase, PhaseRun, Scope
from bench.benchmark.phases import PHASES, Plan
from bench.run import PhaseClock, time_everything
from bench.results import Results, TargetResult
from bench.settings import from_env


def scope(targets: int = 2, files: int = 3, file_set: dict | None = None) -> Scope:
    return Scope([TargetResult(f"t{i}", f"http://t{i}", True) for i in range(targets)],
                 [{"name": f"f{i}.bin", "size": 1} for i in range(files)], file_set, "20261129T000000Z")


def test_the_phases_keep_their_order_and_names():
    assert [p.name for p in PHASES] == ["timed cases", "ab -k vs wrk", "open loop", "sweep", "working set",
                                        "store writes and reads"]


def test_the_phases_a_runs_settings_hold():
    quick = from_env({"BENCH_TARGETS": "a", "BENCH_PROFILE": "quick", "BENCH_TOOLS": "ab"})
    assert [p.name for p in Plan.of(quick, scope()).phases] == ["timed cases"] + (
        ["open loop"] if quick.open_loop else [])
    full = from_env({"BENCH_TARGETS": "a", "BENCH_PROFILE": "full", "BENCH_TOOLS": "ab wrk", "BENCH_SWEEP": "5 10",
                     "BENCH_OPEN_LOOP": "0.5"})
    names = [p.name for p in Plan.of(full, scope(file_set={"spec": "s", "count": 1, "total_bytes": 1})).phases]
    assert names[:4] == ["timed cases", "ab -k vs wrk", "open loop", "sweep"]


def test_a_budget_ends_each_phase_before_the_later_phases_planned_seconds():
    cfg = from_env({"BENCH_TARGETS": "a", "BENCH_PROFILE": "full", "BENCH_TOOLS": "ab wrk", "BENCH_SWEEP": "5 10",
                    "BENCH_OPEN_LOOP": "0.5", "BENCH_BUDGET": "30m", "BENCH_TARGET_WIDTH": "1.10"})
    plan = Plan.of(cfg, scope(), budget_end=1000.0)
    rounds, check, open_loop, sweep = plan.phases[:4]
    later = plan.seconds[check.name] + plan.seconds[open_loop.name] + plan.seconds[sweep.name]
    assert plan.later_seconds(rounds) == later and plan.deadline(rounds) == 1000.0 - later
    assert plan.deadline(sweep) == 1000.0
    assert plan.budgeted(cfg) and plan.planned(cfg, now=400.0) == 600.0  # the rounds go on: the plan is the budget
    unbudgeted = Plan.of(cfg, scope())
    assert unbudgeted.deadline(rounds) is None and unbudgeted.planned(cfg, now=400.0) == unbudgeted.total()
    fixed = from_env({"BENCH_TARGETS": "a", "BENCH_PROFILE": "full", "BENCH_BUDGET": "30m",
                      "BENCH_TARGET_WIDTH": "off"})
    short = Plan.of(fixed, scope(), budget_end=410.0)
    assert not short.budgeted(fixed) and short.planned(fixed, now=400.0) == min(short.total(), 10.0)


class Recorded(Phase):
    """A phase that records what it ran with, and what results.json held then."""

    def __init__(self, name: str, seconds: float, enabled: bool = True, in_plan: bool = True):
        self.name, self.seconds, self.on, self.in_plan = name, seconds, enabled, in_plan
        self.runs: list[dict] = []

    def enabled(self, cfg, scope: Scope) -> bool:
        return self.on

    def planned_seconds(self, cfg, scope: Scope) -> float:
        return self.seconds

    def run(self, run: PhaseRun) -> None:
        path = run.timer.run_dir / "results.json"
        written = json.loads(path.read_text()) if path.exists() else {}
        self.runs.append({"later": run.later_seconds, "deadline": run.deadline, "planned": run.planned,
                          "written": written.get("warnings"),
                          "actual": "actual_seconds" in run.results.timing})
        run.results.warnings.append(self.name)


def test_a_run_walks_its_phases_in_order_writing_results_after_each(tmp_path):
    cfg = from_env({"BENCH_TARGETS": "a", "BENCH_PROFILE": "full", "BENCH_BUDGET": "off"})
    phases = (Recorded("first", 10.0), Recorded("off", 99.0, enabled=False), Recorded("second", 5.0),
              Recorded("own pace", 0.0, in_plan=False))
    results = Results("20261129T000000Z", "2026-11-29T00:00:00+00:00")
    time_everything(cfg, results, scope(), tmp_path, None, 1.0, PhaseClock(results.phases), time.monotonic(),
                    phases)
    first, off, second, own = phases
    assert results.warnings == ["first", "second", "own pace"] and not off.runs
    assert list(results.phases) == ["first", "second", "own pace"]
    assert results.timing["planned_seconds"] == 15.0
    # results.json as each phase began: every earlier phase's results in it
    assert [p.runs[0]["written"] for p in (first, second, own)] == [None, ["first"], ["first", "second"]]
    assert [(p.runs[0]["later"], p.runs[0]["deadline"], p.runs[0]["planned"]) for p in (first, second)] == [
        (5.0, None, 15.0), (0.0, None, 15.0)]
    # the plan's phases took actual_seconds; the store benchmark plans itself, after them
    assert [p.runs[0]["actual"] for p in (first, second, own)] == [False, False, True]
    assert json.loads((tmp_path / "results.json").read_text())["warnings"] == results.warnings
