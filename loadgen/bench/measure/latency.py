"""Latency percentiles of one open-loop run from its per-request latencies:
exact order statistics (vegeta's own percentiles come from a t-digest, an
approximation), a distribution-free confidence interval for a quantile, and
a histogram bounded in size for charts. Pure: no I/O."""
import math
from bisect import bisect_left

CONFIDENCE = 0.95
# Histogram buckets: BUCKETS_PER_DECADE log-spaced upper edges from
# HISTOGRAM_FLOOR_MS up (about 4.7% apart), so a run of any length keeps at
# most a few hundred (edge, count) pairs: 10 us to 30 s is 324 buckets.
BUCKETS_PER_DECADE = 50
HISTOGRAM_FLOOR_MS = 0.01


def order_statistic(ordered: list[float], q: float) -> float:
    """The q-quantile of a sorted sample as the ceil(q n)-th smallest value
    (the inverse of the empirical distribution: no interpolation)."""
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def _binomial_cdf(n: int, q: float) -> list[float]:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, q), summed in log space so
    n = 10,000 at q = 0.999 neither underflows nor overflows."""
    log_q, log_p = math.log(q), math.log1p(-q)
    cdf, total = [], 0.0
    for k in range(n + 1):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q
                          + (n - k) * log_p)
        cdf.append(min(total, 1.0))
    return cdf


def quantile_interval(ordered: list[float], q: float,
                      confidence: float = CONFIDENCE) -> tuple[float | None, float | None]:
    """A distribution-free confidence interval for the q-quantile: the
    order statistics x(l) and x(u) with P(l <= B < u) >= confidence, B the
    number of samples below the true quantile, B ~ Binomial(n, q), each
    tail at most (1 - confidence) / 2. No assumption about the shape of the
    latencies. None for a bound the sample is too small to give (fewer than
    about 300 answers for p99's upper bound): then the quantile could be
    beyond the slowest answer seen."""
    n, tail = len(ordered), (1 - confidence) / 2
    if n == 0:
        return None, None
    cdf = _binomial_cdf(n, q)
    # lo: the largest with P(B < lo) = cdf[lo - 1] <= tail; u: the smallest with P(B >= u) <= tail
    lower = max((lo for lo in range(1, n + 1) if cdf[lo - 1] <= tail), default=None)
    upper = next((u for u in range(1, n + 1) if 1 - cdf[u - 1] <= tail), None)
    return (ordered[lower - 1] if lower else None), (ordered[upper - 1] if upper else None)


def histogram(latencies_ms: list[float]) -> list[list[float]]:
    """[[upper edge ms, count], ...] for the non-empty log-spaced buckets,
    in order: each latency counted in the first bucket whose edge is at or
    above it (below HISTOGRAM_FLOOR_MS: the first bucket)."""
    if not latencies_ms:
        return []
    top = max(max(latencies_ms), HISTOGRAM_FLOOR_MS)
    count = math.ceil(math.log10(top / HISTOGRAM_FLOOR_MS) * BUCKETS_PER_DECADE) + 1
    edges = [HISTOGRAM_FLOOR_MS * 10 ** (i / BUCKETS_PER_DECADE) for i in range(count)]
    edges[-1] = max(edges[-1], top)  # rounding must not leave the slowest answer outside
    counts = [0] * count
    for v in latencies_ms:
        counts[bisect_left(edges, v)] += 1
    return [[float(f"{edge:.4g}"), n] for edge, n in zip(edges, counts) if n]


def summary(latencies_ms: list[float]) -> dict:
    """What results.json keeps of one run's latencies: the sample count,
    p50/p90/p99/p99.9/max, p99's confidence interval and the histogram."""
    ordered = sorted(round(v, 6) for v in latencies_ms)  # whole nanoseconds, as measured
    if not ordered:
        return {"samples": 0}
    low, high = quantile_interval(ordered, 0.99)
    return {"samples": len(ordered), "p50_ms": order_statistic(ordered, 0.5),
            "p90_ms": order_statistic(ordered, 0.9), "p99_ms": order_statistic(ordered, 0.99),
            "p999_ms": order_statistic(ordered, 0.999), "max_ms": ordered[-1],
            "p99_interval_ms": [low, high], "confidence": CONFIDENCE, "histogram": histogram(ordered)}


def nines(fraction: float) -> float:
    """A quantile on the axis HdrHistogram plots percentiles on: 0.9 -> 1,
    0.99 -> 2, 0.999 -> 3, so the tail gets the room it needs."""
    return -math.log10(1 - fraction)


def percentile_curve(histogram: list[list[float]]) -> list[tuple[float, float]]:
    """[(nines of the share of answers at or below, that bucket's upper edge
    ms)] from a histogram: the latency distribution as a percentile curve.
    The slowest bucket holds the maximum, whose share is 1 (infinitely many
    nines): it is placed at rank n - 1/2 of n, as the last sample's own
    plotting position."""
    total = sum(n for _, n in histogram)
    points, below = [], 0
    for edge, n in histogram:
        below += n
        share = below / total if below < total else 1 - 0.5 / total
        points.append((nines(share), edge))
    return points
