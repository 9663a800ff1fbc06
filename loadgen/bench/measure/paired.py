"""Paired statistics for an A/B run: B against A block by block, on a log
scale, with an interval and a verdict in words. Pure.

Why Wilcoxon's signed-rank test and the Hodges-Lehmann estimate: a run has
6-12 blocks, each giving one paired log-ratio log(B/A). At that size a
bootstrap interval is too narrow (it cannot see past the few values it
resamples), and a t interval leans on normality that one disturbed block
breaks. The signed-rank test is distribution-free and exact at any n (every
assignment of signs is enumerated), and its interval (the Walsh averages
between the exact critical ranks) covers at least the level asked, whatever
the shape; one outlying block moves it little. The price is width at small
n: below 6 blocks no 95% interval exists (2/2^n > 0.05), and the verdict
says so. On a log scale B/A and A/B are mirror images: the verdicts are
symmetric.

Multiplicity: the p-values of every case and metric of one table are
adjusted together with Holm's method (no assumption about their
dependence); a "better" or "worse" verdict needs the adjusted p below
ALPHA as well as its own interval clear of zero. Holm multiplies the
smallest p by the number of case-metrics: at 8 blocks (smallest possible
p 2/256) a verdict needed every block to agree, at 16 (2/65536) one or two
stray blocks leave it standing. Benjamini-Hochberg, tried instead, called
all three metrics of one case of an A/A at once (nginx-gridfs at 1 MB:
adjusted p 0.0499 each, where Holm gave 0.079-0.107): one case's metrics
move together, and its step-up counts them as agreeing evidence."""
import math
from dataclasses import dataclass
from itertools import product
from statistics import NormalDist, median, stdev

ALPHA = 0.05
EXACT_MAX_N = 16   # up to 2^16 sign assignments enumerated; beyond, the normal approximation

BETTER, WORSE, SAME, INCONCLUSIVE = "better", "worse", "no change", "inconclusive"


def walsh_averages(d: list[float]) -> list[float]:
    """Every (d_i + d_j) / 2 with i <= j, sorted."""
    return sorted((d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d)))


def signed_rank_counts(n: int) -> list[int]:
    """How many of the 2^n sign assignments give each sum of positive ranks
    (index = T+, from 0 to n(n+1)/2): the exact null distribution, no ties."""
    counts = [1]
    for rank in range(1, n + 1):
        grown = counts + [0] * rank
        for t, c in enumerate(counts):
            grown[t + rank] += c
        counts = grown
    return counts


def mean_ranks(values: list[float]) -> list[float]:
    """Ranks from 1, ties given their mean rank."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def signed_rank_p(d: list[float]) -> float:
    """Two-sided p-value of Wilcoxon's signed-rank test that the median of
    d is 0. Zeros are dropped (Wilcoxon's rule); ties take mean ranks and
    the exact distribution is then enumerated over the actual ranks."""
    nonzero = [x for x in d if x != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0
    ranks = mean_ranks([abs(x) for x in nonzero])
    observed = sum(r for r, x in zip(ranks, nonzero) if x > 0)
    mean = sum(ranks) / 2
    distance = abs(observed - mean)
    if n <= EXACT_MAX_N:
        if len(set(ranks)) == n:  # no ties: the counting distribution
            counts = signed_rank_counts(n)
            extreme = sum(c for t, c in enumerate(counts) if abs(t - mean) >= distance - 1e-9)
        else:
            extreme = sum(1 for signs in product((0, 1), repeat=n)
                          if abs(sum(r for r, s in zip(ranks, signs) if s) - mean) >= distance - 1e-9)
        return min(1.0, extreme / 2 ** n)
    variance = sum(r * r for r in ranks) / 4
    z = max(0.0, distance - 0.5) / math.sqrt(variance)  # continuity-corrected
    return min(1.0, math.erfc(z / math.sqrt(2)))


@dataclass(frozen=True)
class Interval:
    estimate: float       # Hodges-Lehmann: the median of the Walsh averages (log scale)
    low: float | None     # None: too few blocks for an interval at this level
    high: float | None
    coverage: float       # what the exact interval actually covers (at least the level asked)


def hodges_lehmann(d: list[float], level: float = 1 - ALPHA) -> Interval:
    """The estimate and the exact distribution-free interval of the median
    of d from the signed-rank distribution (no ties assumed in |d|)."""
    n = len(d)
    walsh = walsh_averages(d)
    estimate = median(walsh) if walsh else 0.0
    counts = signed_rank_counts(n)
    total = 2 ** n
    tail, below = (1 - level) / 2, 0
    critical = -1  # the largest c with P(T+ <= c) <= tail
    for t, c in enumerate(counts):
        if (below + c) / total > tail:
            break
        below += c
        critical = t
    if critical < 0:
        return Interval(estimate, None, None, 0.0)
    k = critical + 1  # 1-based: the interval is [W_(k), W_(M-k+1)]
    return Interval(estimate, walsh[k - 1], walsh[len(walsh) - k], round(1 - 2 * below / total, 4))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def log_ratios(a: list[float], b: list[float]) -> list[float]:
    """log(B/A) per block; a block where either side is not positive is left out."""
    return [math.log(y / x) for x, y in zip(a, b) if x and y and x > 0 and y > 0]


def verdict(interval: Interval, p_adjusted: float, higher_is_better: bool, threshold: float,
            alpha: float = ALPHA) -> str:
    """better / worse (B against A), no change (the interval within
    +-threshold on the log scale), or inconclusive."""
    if interval.low is None:
        return INCONCLUSIVE
    bound = math.log1p(threshold)
    clear = interval.low > 0 or interval.high < 0
    if clear and p_adjusted < alpha:
        up = interval.low > 0
        return BETTER if up == higher_is_better else WORSE
    if -bound <= interval.low and interval.high <= bound:
        return SAME
    return INCONCLUSIVE


def beyond_threshold_worse(interval: Interval, higher_is_better: bool, threshold: float) -> bool:
    """The whole interval lies past the threshold on B's worse side: what a
    gate fails on."""
    if interval.low is None:
        return False
    bound = math.log1p(threshold)
    return interval.high < -bound if higher_is_better else interval.low > bound


def within_threshold_worse(interval: Interval, higher_is_better: bool, threshold: float) -> bool:
    """The whole interval lies short of the threshold on B's worse side: B
    shown to be no worse than the threshold (it may be better by any
    amount). What a gate passes on; neither this nor beyond_threshold_worse
    is "not shown safe"."""
    if interval.low is None:
        return False
    bound = math.log1p(threshold)
    return interval.low >= -bound if higher_is_better else interval.high <= bound


POWER = 0.8


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile: exact for 1 and 2 degrees of freedom (closed
    forms), else Cornish-Fisher from the normal's (within 0.8% of the exact
    one at 3, 0.3% from 5 up): no scipy in bench."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    return (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
            + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))


def detectable(sd: float, n: int, power: float = POWER, alpha: float = ALPHA) -> float | None:
    """The smallest change (log scale) a two-sided test at alpha finds with
    this power from n paired samples of this spread (t approximation; the
    signed-rank test is about 95% as efficient). None below 3 samples."""
    if n < 3:
        return None
    return (t_quantile(1 - alpha / 2, n - 1) + t_quantile(power, n - 1)) * sd / math.sqrt(n)


def detectable_change(d: list[float]) -> float | None:
    """detectable() from the run's own paired log-ratios, as a ratio's
    distance from 1 (0.05: a 5% change)."""
    found = detectable(stdev(d), len(d)) if len(d) >= 3 else None
    return math.expm1(found) if found is not None else None


def log_correlation(a: list[float], b: list[float]) -> float | None:
    """Pearson's correlation of log A and log B over the blocks: how much of
    what moves A moves B too, which pairing removes (var of log(B/A) is
    var A + var B - 2 rho sd A sd B). None below 3 blocks or with no spread."""
    pairs = [(math.log(x), math.log(y)) for x, y in zip(a, b) if x and y and x > 0 and y > 0]
    if len(pairs) < 3:
        return None
    xs, ys = zip(*pairs)
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxy = sum((x - mx) * (y - my) for x, y in pairs)
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def counting_floor(whole_a: list[float], whole_b: list[float]) -> float | None:
    """The detectable change below which counting whole answers cannot go:
    a window's count is read to one in N (a count is whole: rounding, sd
    1/sqrt(12) of an answer). A lower bound, never an estimate of the noise:
    not Poisson's 1/sqrt(N) (closed-loop clients answer in step: a duet's
    A/A at 1 KB read 0.6% where Poisson would say 4%), nor a shedding path's
    lottery of which answers come whole (nginx-gridfs shedding 85% at 1 MB
    read a spread of 0.17 where independent draws would give 0.21: the
    loop balances them). Where it nears detectable_change, longer windows,
    not more blocks or a quieter machine, would narrow the interval."""
    variances = [1 / (12 * wa ** 2) + 1 / (12 * wb ** 2) for wa, wb in zip(whole_a, whole_b)
                 if wa and wb and wa > 0 and wb > 0]
    if len(variances) < 3:
        return None
    return math.expm1(detectable(math.sqrt(sum(variances) / len(variances)), len(variances)))


def blocks_for_a_verdict(tests: int, alpha: float = ALPHA) -> int:
    """The fewest blocks with which a table of `tests` case-metrics can give
    a verdict at all: all blocks agreeing give p = 2/2^n, which Holm
    multiplies by the number of tests at the first step."""
    n = 1
    while 2 / 2 ** n * tests >= alpha:
        n += 1
    return n
