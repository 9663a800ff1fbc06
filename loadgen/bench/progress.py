"""bench's progress lines, on stdout as it goes, and the time left of a
run's plan as it goes (the plan itself: each phase's planned_seconds,
bench.benchmark.phases)."""
import time


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def clock(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


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
