"""Summary statistics for repeated measurements of one case."""
from dataclasses import dataclass
from statistics import median

NOISY_SPREAD = 0.10  # a case whose repetitions differ by more than this is marked noisy


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    spread: float        # (max - min) / median

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD


def summarize(values: list[float]) -> Spread:
    if not values:
        raise ValueError("no measurements to summarize")
    mid = median(values)
    return Spread(mid, min(values), max(values), (max(values) - min(values)) / mid if mid else 0.0)


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to their mean: symmetric, for comparing two tools."""
    mean = (a + b) / 2
    return abs(a - b) / mean if mean else 0.0


TOOLS_DISAGREE = 0.10  # ab -k and wrk differing by more than this on a case are flagged


def spread_of(values: list[float]) -> dict:
    """summarize() as results.json keeps it: median, min, max, spread, noisy."""
    s = summarize(values)
    return {"median": s.median, "min": s.min, "max": s.max, "spread": round(s.spread, 4), "noisy": s.noisy}
