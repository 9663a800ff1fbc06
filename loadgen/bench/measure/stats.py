"""Summary statistics for repeated measurements of one case."""
from dataclasses import dataclass
from statistics import median

# A case whose repetitions lie more than this far from their median (half
# their range, relative to it) is marked noisy: read its figure as a range.
NOISY_HALF_RANGE = 0.05


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    half_range: float    # (max - min) / 2 / median: the figure is median ± this

    @property
    def noisy(self) -> bool:
        return self.half_range > NOISY_HALF_RANGE


def summarize(values: list[float]) -> Spread:
    if not values:
        raise ValueError("no measurements to summarize")
    mid = median(values)
    return Spread(mid, min(values), max(values), (max(values) - min(values)) / 2 / mid if mid else 0.0)


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to their mean: symmetric, for comparing two tools."""
    mean = (a + b) / 2
    return abs(a - b) / mean if mean else 0.0


TOOLS_DISAGREE = 0.10  # ab -k and wrk differing by more than this on a case are flagged


def spread_of(values: list[float]) -> dict:
    """summarize() as results.json keeps it: median, min, max, half_range, noisy."""
    s = summarize(values)
    return {"median": s.median, "min": s.min, "max": s.max, "half_range": round(s.half_range, 4),
            "noisy": s.noisy and len(values) > 1}
