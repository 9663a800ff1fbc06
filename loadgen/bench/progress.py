"""bench's progress lines, on stdout as it goes, and the time a run is
expected to take from its settings, with the time left as it goes."""
import time

from .benchmark.quiet import QUIET_SAMPLE_S
from .benchmark.schedule import PHASE_REPETITIONS, WINDOW_S as WARM_UP_WINDOW_S, WINDOW_WARM_UP_S
from .settings import EVERY_CASE


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


# Per tool run, besides its own seconds: starting the tool, reading cAdvisor;
# a measured run first waits for a quiet machine (at least one reading).
OVERHEAD_S = 0.5
MEASURED_OVERHEAD_S = OVERHEAD_S + QUIET_SAMPLE_S


def warm_up_seconds(cfg) -> float:
    """What a warm-up is planned at: two windows, the fewest that can agree
    (a slow case takes longer, up to BENCH_WARMUP, and the pace shows it)."""
    return min(cfg.warmup, 2 * WARM_UP_WINDOW_S) + 2 * OVERHEAD_S if cfg.warmup else 0.0


def rounds_seconds(cfg, targets: int, files: int) -> float:
    """One round of every case: each path's window, its short warm-up and
    the overhead, plus the idle reading before it (a case's first round
    also settles each path: see planned_seconds). Slow cases stretch their
    windows past BENCH_DURATION and the pace shows it."""
    window = cfg.duration + (WINDOW_WARM_UP_S if cfg.warmup else 0) + MEASURED_OVERHEAD_S
    return 2.5 + targets * files * len(cfg.concurrency) * window


def after_rounds_seconds(cfg, targets: int, files: int, tool_checked: int, working_set: bool = False) -> float:
    """The phases after the rounds: ab -k against wrk on `tool_checked`
    (path, file) cases, the open-loop points (at most), the sweep, the
    working set. The store benchmark says its own time as it goes."""
    warmup = warm_up_seconds(cfg)
    pairs = min(cfg.repetitions, PHASE_REPETITIONS) if cfg.tool_check == EVERY_CASE else 1
    compared = tool_checked * pairs * (2 * (cfg.duration + MEASURED_OVERHEAD_S) + warmup)
    open_loop = (cfg.open_loop_max_s + OVERHEAD_S) * max(len(cfg.open_loop_curve), 1) if cfg.open_loop else 0.0
    sweep = len(cfg.sweep) * len(cfg.tools) * (cfg.sweep_duration + OVERHEAD_S)
    per_case = warmup + min(cfg.repetitions, PHASE_REPETITIONS) * (cfg.duration + MEASURED_OVERHEAD_S)
    return compared + targets * (files * (open_loop + sweep) + (per_case if working_set else 0.0))


def planned_seconds(cfg, targets: int, files: int, working_set: bool = False) -> float:
    """What the timed HTTP phases should take with BENCH_REPETITIONS rounds
    (a budgeted run plans its budget instead)."""
    settle = targets * files * len(cfg.concurrency) * warm_up_seconds(cfg)
    checked = targets * (files if cfg.tool_check == EVERY_CASE else 1) if "wrk" in cfg.tools else 0
    return (settle + cfg.repetitions * rounds_seconds(cfg, targets, files)
            + after_rounds_seconds(cfg, targets, files, checked, working_set))


class Progress:
    """Counts seconds of planned work done; says how long is left."""

    def __init__(self, planned: float, ends_at: float | None = None):
        self.planned = planned
        self.ends_at = ends_at  # a budgeted run's end (monotonic): what is left is up to it
        self.done = 0.0
        self.began = time.monotonic()
        self._last_said = 0.0

    def advance(self, planned_seconds: float) -> None:
        self.done += planned_seconds

    def left(self) -> float:
        """Time left at the pace so far (slow cases stretch the plan)."""
        elapsed = time.monotonic() - self.began
        if self.ends_at is not None:
            return max(0.0, self.ends_at - time.monotonic())
        if self.done <= 0:
            return self.planned
        return max(0.0, (self.planned - self.done) * elapsed / self.done)

    def report(self, what: str, every: float = 15.0) -> None:
        """A line at most every `every` seconds: what just ran, how far, what is left."""
        now = time.monotonic()
        if now - self._last_said < every:
            return
        self._last_said = now
        elapsed = now - self.began
        share = (min(1.0, elapsed / (elapsed + self.left())) if self.ends_at is not None
                 else min(1.0, self.done / self.planned) if self.planned else 1.0)
        say(f"{what}: {share:.0%} done, {clock(now - self.began)} elapsed, about {clock(self.left())} left")
