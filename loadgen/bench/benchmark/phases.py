"""The phases of a timed run, in the order they run, and the run's plan
made from them. bench.run walks PHASES; the "expected about" line, the
budget's arithmetic, results.timing's planned_seconds and the Progress all
come from the same list, so a phase is planned as it is run."""
from dataclasses import dataclass

from .closed_loop import TimedCases
from .open_loop import OpenLoopLatency
from .phase import Phase, Scope
from .sweep import Sweep
from .tool_check import ToolCheck
from .working_set import WorkingSetTiming
from .writes import StoreWritesAndReads

# The rounds first (every later phase reads their figures: the durations
# of slow cases, open loop's capacity); the store benchmark last: it fills
# the stores and the page cache.
PHASES: tuple[Phase, ...] = (TimedCases(), ToolCheck(), OpenLoopLatency(), Sweep(), WorkingSetTiming(),
                             StoreWritesAndReads())


@dataclass(frozen=True)
class Plan:
    """The phases a run's settings hold, each in-plan one's planned seconds,
    and the budget's end (monotonic; None without BENCH_BUDGET)."""
    phases: tuple[Phase, ...]
    seconds: dict[str, float]
    budget_end: float | None = None

    @classmethod
    def of(cls, cfg, scope: Scope, budget_end: float | None = None, phases: tuple[Phase, ...] = PHASES) -> "Plan":
        held = tuple(p for p in phases if p.enabled(cfg, scope))
        return cls(held, {p.name: p.planned_seconds(cfg, scope) for p in held if p.in_plan}, budget_end)

    @property
    def in_plan(self) -> tuple[Phase, ...]:
        return tuple(p for p in self.phases if p.in_plan)

    @property
    def own_pace(self) -> tuple[Phase, ...]:
        """The phases that plan themselves as they go, after the others."""
        return tuple(p for p in self.phases if not p.in_plan)

    def total(self) -> float:
        return sum(self.seconds.values())

    def later_seconds(self, phase: Phase) -> float:
        """The planned seconds of the in-plan phases after `phase`."""
        names = [p.name for p in self.in_plan]
        return sum(self.seconds[n] for n in names[names.index(phase.name) + 1:]) if phase.name in names else 0.0

    def deadline(self, phase: Phase) -> float | None:
        """When `phase` must end for the later phases to fit the budget."""
        return self.budget_end - self.later_seconds(phase) if self.budget_end is not None else None

    def budgeted(self, cfg) -> bool:
        """A phase goes on until the budget ends: the run plans its budget."""
        return self.budget_end is not None and any(p.stretches(cfg) for p in self.in_plan)

    def planned(self, cfg, now: float) -> float:
        """What the run should take from `now`: the budget when budgeted,
        else every phase's seconds, at most what the budget leaves."""
        if self.budgeted(cfg):
            return self.budget_end - now
        return min(self.total(), self.budget_end - now) if self.budget_end is not None else self.total()


def planned_seconds(cfg, scope: Scope) -> float:
    """What the timed phases should take with BENCH_REPETITIONS rounds."""
    return Plan.of(cfg, scope).total()
