"""What a phase of a timed run is (as TechEmpower's test types are): a name
(its key in results.phases), whether a run's settings hold it, what it
should take, and how it runs. bench.benchmark.phases lists them in order;
bench.run walks that one list to time a run, and the plan (the "expected
about" line, the budget's arithmetic, results.timing's planned_seconds,
the Progress) is made from the same list."""
from dataclasses import dataclass

from ..results import Results, TargetResult
from .cases import Timer


@dataclass(frozen=True)
class Scope:
    """What a run times, known once its targets are verified: every phase
    plans and runs from it."""
    targets: list[TargetResult]  # the verified ones
    files: list[dict]            # the seed's files (manifest.json)
    file_set: dict | None        # the seed's FILE_SET, None without one
    seed: str                    # the run's id: the deals and orders are drawn from it


@dataclass(frozen=True)
class PhaseRun:
    """What a phase runs with: the Timer (settings, results, run directory,
    the run's Progress) and where it stands in the run's plan."""
    timer: Timer
    scope: Scope
    planned: float               # the run's plan, every phase's seconds (a budgeted run's: its budget)
    later_seconds: float         # the planned seconds of the phases after this one
    deadline: float | None       # monotonic: the budget's end less later_seconds; None without a budget
    budgeted: bool               # the run's plan is its budget (a phase goes on until it ends)

    @property
    def cfg(self):
        return self.timer.cfg

    @property
    def results(self) -> Results:
        return self.timer.results


class Phase:
    """One phase of a timed run; a new measurement is one subclass, one line
    in bench.benchmark.phases.PHASES and one section of the report."""
    name = ""          # its key in results.phases, and its name in the lines said
    # Its seconds are in the run's plan and its pace in the run's Progress;
    # a phase that plans itself as it goes (the store benchmark) is not, and
    # runs after those that are.
    in_plan = True

    def enabled(self, cfg, scope: Scope) -> bool:
        raise NotImplementedError

    def planned_seconds(self, cfg, scope: Scope) -> float:
        raise NotImplementedError

    def stretches(self, cfg) -> bool:
        """It goes on until the budget ends (unless done sooner): a budgeted
        run then plans its budget, not the phases' seconds."""
        return False

    def run(self, run: PhaseRun) -> None:
        raise NotImplementedError
