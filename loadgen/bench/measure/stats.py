"""Summary statistics for repeated measurements of one case."""
import math
from dataclasses import dataclass
from statistics import median, stdev

from .paired import t_quantile

# A case is noisy when its repetitions do not pin its figure to within this
# (x/÷) at 95%: the t interval of their geometric mean, on log rates, is
# wider. It says what a reader may take from the figure, and, unlike the
# range (which widens with every repetition added) or a spread over the
# median (a coin toss at three repetitions at this machine's 9% swing), it
# fires less as repetitions grow, for any steadiness. The default run's
# target width (settings BENCH_TARGET_WIDTH) is the same x/÷1.10.
NOISY_WIDTH = 1.10
NOISY_LEVEL = 0.95
# What report/compare.py takes as the smallest change worth a verdict (half
# the range over the median).
NOISY_HALF_RANGE = 0.05


@dataclass(frozen=True)
class Spread:
    median: float
    min: float
    max: float
    half_range: float    # (max - min) / 2 / median: the figure is median ± this
    mad: float           # the median absolute deviation from the median, over the median
    # x/÷ half-width of the 95% t interval of the values' geometric mean;
    # None under two values, or where one is 0 (a rate of 0 has no ratio)
    width: float | None = None
    count: int = 1

    @property
    def noisy(self) -> bool:
        if self.count < 2:
            return False
        if self.width is None:  # a repetition at 0 beside others that were not
            return self.max > self.min
        return self.width > NOISY_WIDTH


def interval_width(values: list[float], level: float = NOISY_LEVEL) -> float | None:
    """x/÷ half-width of the t interval of the values' geometric mean."""
    if len(values) < 2 or min(values) <= 0:
        return None
    logs = [math.log(v) for v in values]
    return math.exp(t_quantile(1 - (1 - level) / 2, len(logs) - 1) * stdev(logs) / math.sqrt(len(logs)))


def summarize(values: list[float]) -> Spread:
    if not values:
        raise ValueError("no measurements to summarize")
    mid = median(values)
    if not mid:
        return Spread(mid, min(values), max(values), 0.0, 0.0, None, len(values))
    return Spread(mid, min(values), max(values), (max(values) - min(values)) / 2 / mid,
                  median(abs(v - mid) for v in values) / mid, interval_width(values), len(values))


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to their mean: symmetric, for comparing two tools."""
    mean = (a + b) / 2
    return abs(a - b) / mean if mean else 0.0


TOOLS_DISAGREE = 0.10  # ab -k and wrk differing by more than this on a case are flagged


def spread_of(values: list[float]) -> dict:
    """summarize() as results.json keeps it: median, min, max, half_range,
    mad, width, noisy."""
    s = summarize(values)
    return {"median": s.median, "min": s.min, "max": s.max, "half_range": round(s.half_range, 4),
            "mad": round(s.mad, 4), "width": round(s.width, 4) if s.width is not None else None,
            "noisy": s.noisy}
