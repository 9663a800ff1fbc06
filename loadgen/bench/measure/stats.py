"""Summary statistics for repeated measurements of one case."""
from dataclasses import dataclass
from statistics import median

# A case whose repetitions' median absolute deviation is more than this
# share of their median (at least half of them lie further than this from
# it) is marked noisy: read its figure as a range. Unlike the range, which
# widens with every repetition added, the MAD settles as repetitions grow,
# and one stray repetition in three does not make a case noisy.
NOISY_MAD = 0.05
# What report/compare.py takes as the smallest change worth a verdict (the
# rule noisy used before NOISY_MAD: half the range over the median).
NOISY_HALF_RANGE = 0.05


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    half_range: float    # (max - min) / 2 / median: the figure is median ± this
    mad: float           # the median absolute deviation from the median, over the median

    @property
    def noisy(self) -> bool:
        return self.mad > NOISY_MAD


def summarize(values: list[float]) -> Spread:
    if not values:
        raise ValueError("no measurements to summarize")
    mid = median(values)
    if not mid:
        return Spread(mid, min(values), max(values), 0.0, 0.0)
    return Spread(mid, min(values), max(values), (max(values) - min(values)) / 2 / mid,
                  median(abs(v - mid) for v in values) / mid)


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to their mean: symmetric, for comparing two tools."""
    mean = (a + b) / 2
    return abs(a - b) / mean if mean else 0.0


TOOLS_DISAGREE = 0.10  # ab -k and wrk differing by more than this on a case are flagged


def spread_of(values: list[float]) -> dict:
    """summarize() as results.json keeps it: median, min, max, half_range, mad, noisy."""
    s = summarize(values)
    return {"median": s.median, "min": s.min, "max": s.max, "half_range": round(s.half_range, 4),
            "mad": round(s.mad, 4), "noisy": s.noisy and len(values) > 1}
