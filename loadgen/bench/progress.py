"""bench's progress lines, on stdout as it goes, and the time a run is
expected to take from its settings, with the time left as it goes."""
import time

from .benchmark.quiet import QUIET_SAMPLE_S
from .benchmark.schedule import WINDOW_S as WARM_UP_WINDOW_S


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


def planned_seconds(cfg, targets: int, files: int, working_set: bool = False) -> float:
    """What the timed HTTP phases should take with these settings: every tool
    run's seconds plus a little overhead each. Slow cases (fewer than
    BENCH_MIN_REQUESTS requests in BENCH_DURATION) stretch past it. The store
    benchmark's time depends on the stores' speed: it says its own as it goes."""
    levels = len(cfg.concurrency)
    warmup = warm_up_seconds(cfg)
    per_case = warmup + cfg.repetitions * (cfg.duration + MEASURED_OVERHEAD_S)
    compared = (cfg.repetitions * (2 * (cfg.duration + MEASURED_OVERHEAD_S) + warmup)
                if "wrk" in cfg.tools else 0.0)
    # at most; fast paths end sooner
    open_loop = (cfg.open_loop_max_s + OVERHEAD_S) * max(len(cfg.open_loop_curve), 1) if cfg.open_loop else 0.0
    sweep = len(cfg.sweep) * len(cfg.tools) * (cfg.sweep_duration + OVERHEAD_S)
    return targets * (files * (levels * per_case + compared + open_loop + sweep) + (per_case if working_set else 0.0))


class Progress:
    """Counts seconds of planned work done; says how long is left."""

    def __init__(self, planned: float):
        self.planned = planned
        self.done = 0.0
        self.began = time.monotonic()
        self._last_said = 0.0

    def advance(self, planned_seconds: float) -> None:
        self.done += planned_seconds

    def left(self) -> float:
        """Time left at the pace so far (slow cases stretch the plan)."""
        elapsed = time.monotonic() - self.began
        if self.done <= 0:
            return self.planned
        return max(0.0, (self.planned - self.done) * elapsed / self.done)

    def report(self, what: str, every: float = 15.0) -> None:
        """A line at most every `every` seconds: what just ran, how far, what is left."""
        now = time.monotonic()
        if now - self._last_said < every:
            return
        self._last_said = now
        share = min(1.0, self.done / self.planned) if self.planned else 1.0
        say(f"{what}: {share:.0%} done, {clock(now - self.began)} elapsed, about {clock(self.left())} left")
