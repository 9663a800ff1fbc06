"""A path's ratio to the baseline, from rounds: each round times every path
once for a case, in a fresh order, so the machine's swing over the seconds
of one round (CoV about 0.09 over 4 s windows here) falls on the path and
its baseline alike. The ratio of one round is a paired contrast; the case's
ratio is their geometric mean with a t interval over rounds.

Why the geometric mean and t: a ratio is judged as "times" (a path half as
fast and one twice as fast are equally far from 1), the per-round log
ratios are sums of many small timing effects, and the t interval is exact
for normal data and close for the skew seen here; the Wilcoxon signed-rank
interval (benchmark/change.py) needs the same 6 rounds before it exists and is
wider at that count. No interval is printed below MIN_ROUNDS.

Stopping on width: a row leaves the rounds once its interval is within
the target width (BENCH_TARGET_WIDTH, x/÷1.10) on req/s and on its own CPU
ratio. Stopping when an interval happens to be narrow makes it a little too
narrow (its sd was caught low): simulated, a 95% t interval so stopped
covered 94.0% at a per-round sd of 0.12 and 92.9% at 0.15, and one more
round after converging bought almost nothing. The interval of a row that
stopped on its width is therefore inflated instead: the t quantile of
QUANTILE_LEVEL (96%), computed as for a fixed n, which brings the coverage
back to 95% up to an sd of 0.12; the stopping rule judges that interval too.
A row the budget or the fixed count stopped was never caught narrow (its
sd, if anything, caught high) and takes the plain 95% quantile: simulated
with the rule above, such rows covered 96-99.9% at sds of 0.08-0.20 and
6-9 rounds, all rows together 94.5-96% (tests/test_rounds.py repeats both
simulations). At 6 rounds the plain quantile is 24% narrower (2.57
against 3.36)."""
import math
from dataclasses import asdict, dataclass
from statistics import fmean, stdev

from .paired import t_quantile
from .same_moment import window_logs
from .usage import CORE_SATURATED, LOADGEN, LOADGEN_BOUND

BASELINE = "nginx-static"  # every headline ratio's denominator
MIN_ROUNDS = 6     # no interval below this many paired rounds
MAX_ROUNDS = 30    # a run's rounds stop here whatever the widths
LEVEL = 0.95           # the coverage the intervals are for
QUANTILE_LEVEL = 0.96  # the t quantile of a row stopped on its width: that stop costs about a point
# the headline's metrics: requests per second, the path's own CPU per request
# (both judged for width) and the CPU per request of the path with its
# database and upstream (reported)
RPS, CPU, CPU_TOTAL = "rps", "cpu", "cpu_total"
JUDGED = (RPS, CPU)


def value(rep: dict, metric: str, target: str) -> float | None:
    """One counted window's figure for a metric (None: not measured)."""
    if metric == RPS:
        return rep.get("rps") or None
    cpu = rep.get("cpu") or {}
    if metric == CPU:
        return (cpu.get(target) or {}).get("cpu_ms_per_request") or None
    parts = [u.get("cpu_ms_per_request") for role, u in cpu.items() if role != LOADGEN]
    return sum(parts) if parts and None not in parts and target in cpu else None


def paired_logs(reps: list[dict], base: list[dict], metric: str, target: str, baseline: str) -> list[float]:
    """log(path / baseline) for every round both were counted in."""
    base_of = {r["round"]: r for r in base if r.get("round") is not None}
    logs = []
    for rep in reps:
        other = base_of.get(rep.get("round"))
        a, b = value(rep, metric, target), value(other, metric, baseline) if other else None
        if a and b and a > 0 and b > 0:
            logs.append(math.log(a / b))
    return logs


def metric_logs(reps: list[dict], base: list[dict], metric: str, target: str, baseline: str,
                cpu_windows: list[dict] | None = None) -> list[float]:
    """A metric's per-round log ratios from their source by the CPU design:
    with same-moment windows (BENCH_CPU_DESIGN=same-moment: `cpu_windows`,
    bench.measure.same_moment), the path's own CPU per request from them;
    everything else (req/s, the CPU with the database, which every GridFS
    path shares at once there) from the rounds' closed-loop windows."""
    if metric == CPU and cpu_windows is not None:
        return window_logs(cpu_windows, target, baseline)
    return paired_logs(reps, base, metric, target, baseline)


@dataclass
class Ratio:
    """A path's ratio to the baseline on one metric: the geometric mean of
    its rounds' ratios, and (from MIN_ROUNDS) a 95% t interval; sd is the
    per-round log ratio's. `bound` is set when the baseline measured the
    load generator, not itself: the ratio is then an upper bound."""
    metric: str
    ratio: float
    rounds: int
    sd: float | None = None
    low: float | None = None
    high: float | None = None
    bound: str | None = None

    @property
    def width(self) -> float | None:
        """The interval as x/÷ its centre (1.10: within 10% either way)."""
        return math.sqrt(self.high / self.low) if self.low and self.high else None

    def within(self, target_width: float) -> bool:
        return self.width is not None and self.width <= target_width

    def to_dict(self) -> dict:
        return {**asdict(self), "width": round(self.width, 4) if self.width else None}


def ratio_of(logs: list[float], metric: str, bound: str | None = None, level: float = LEVEL) -> Ratio | None:
    """level: the t quantile's (QUANTILE_LEVEL for a row stopped on its width)."""
    if not logs:
        return None
    n, mean = len(logs), fmean(logs)
    found = Ratio(metric, round(math.exp(mean), 4), n, bound=bound)
    if n >= 2:
        found.sd = round(stdev(logs), 4)
    if n >= MIN_ROUNDS:
        half = t_quantile(1 - (1 - level) / 2, n - 1) * stdev(logs) / math.sqrt(n)
        found.low, found.high = round(math.exp(mean - half), 4), round(math.exp(mean + half), 4)
    return found


BOUND_BY = (LOADGEN_BOUND, CORE_SATURATED)  # a baseline with one of these measured the limit, not the path


def baseline_bound(base: list[dict]) -> str | None:
    """The flag that makes the baseline's req/s a floor of its capacity (the
    load generator or a shared core was the limit in most of its rounds)."""
    for flag in BOUND_BY:
        if 2 * sum(flag in (r.get("flags") or ()) for r in base) > len(base):
            return flag
    return None


def flagged_baseline(flags) -> bool:
    """A baseline figure (one repetition's, not the rounds') with these
    flags measured the load generator or a shared core as much as the path:
    a ratio over it is marked (†)."""
    return bool(set(BOUND_BY) & set(flags))


def apart(a: dict | None, b: dict | None) -> bool:
    """Two ratios (Ratio.to_dict) told apart: both have intervals and they do not overlap."""
    return bool(a and b and a.get("low") and b.get("low") and (a["low"] > b["high"] or b["low"] > a["high"]))


def ratios(reps: list[dict], base: list[dict], target: str, baseline: str, level: float = LEVEL,
           cpu_windows: list[dict] | None = None) -> dict[str, Ratio]:
    """Every metric's Ratio for one path and case from the two lists of
    counted windows (each with its "round"), the path's own CPU from
    `cpu_windows` when given (metric_logs)."""
    bound = baseline_bound(base)
    found = {}
    for metric in (RPS, CPU, CPU_TOTAL):
        r = ratio_of(metric_logs(reps, base, metric, target, baseline, cpu_windows), metric,
                     bound if metric == RPS else None, level)
        if r is not None:
            found[metric] = r
    return found


def converged(found: dict[str, Ratio], target_width: float) -> bool:
    """Every judged metric's interval is within the width; a req/s ratio
    over a baseline that measured the load generator is a bound and is not
    judged (more rounds cannot narrow what it does not measure)."""
    judged = [r for m, r in found.items() if m in JUDGED and not (m == RPS and r.bound)]
    return bool(judged) and all(r.within(target_width) for r in judged)


def mean_positions(orders: dict[str, list[list[str]]]) -> dict[str, float]:
    """Each name's mean position (1 = first) over every round of every
    phase given: how fair the draws were."""
    seen: dict[str, list[int]] = {}
    for rounds in orders.values():
        for order in rounds:
            for i, name in enumerate(order, 1):
                seen.setdefault(name, []).append(i)
    return {name: round(fmean(p), 2) for name, p in sorted(seen.items())}
