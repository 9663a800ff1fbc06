"""Does an A/B run's "no change" hold? N A/A runs of one path at the same
settings (tools/lab/change_calibrate.py), read per case and metric. Pure, the
standard library only (bench's image has no scipy), but for
calibration_for, which reads the results directory.

What each figure says:
- the signed-rank p-values of an unchanged B should be uniform on (0, 1):
  a Kolmogorov-Smirnov test against U(0, 1) says whether they are (a low
  KS p: the test's promise, 5% false alarms at 0.05, does not hold here);
- Cochran's Q and I^2 of the runs' log-ratio estimates, each weighted by
  its own interval: whether runs differ by more than each run's interval
  allows (I^2 near 0: the interval holds what moves between runs; high:
  something drawn once per run, which no pairing within it sees);
- the between-run sd of the estimates and 2.8 x it (the 95% repeatability
  limit of two runs, ISO 5725's r = 1.96 x sqrt(2) x sd), on the log scale
  (0.05 is a ratio of about 5%): issue 36 asks at most 5% at 1 KB;
- the false alarms (a "better" or "worse" verdict of an unchanged B) with
  the exact Clopper-Pearson 95% interval: 0 of 6 still allows 46%;
- what one run could resolve: each run's own detectable change at 80%
  power (its row's `detectable`, from its blocks' spread) as the median
  and range over the runs, whether the median is within the A/B's
  threshold (AB_THRESHOLD), the largest counting floor (what counting
  whole answers cannot go below) and the median A-B correlation rho.

The signed-rank p-values are discrete (with 12 blocks a grid of 1/4096, and
an atom at 1 of about 3%): under the null they are super-uniform, P(p <= x)
<= x, so a KS test on them would read a little off-uniform with nothing
wrong. So KS is run on randomised p-values, p - u x P(the observed
statistic exactly), u uniform, which are exactly U(0, 1) under the null;
u is drawn from a seed of the run, case and metric, so the same runs give
the same figures. Above 16 blocks the test's p comes from its normal
approximation, continuous already: it is read as it is. The raw p-values
are kept beside them (the QQ table, and KS on the raw ones for reference)."""
import json
import math
import random
from pathlib import Path
from statistics import mean, median, stdev

from . import paired

ALARMS = (paired.BETTER, paired.WORSE)
Z95 = 1.96            # a row's 95% interval as +-1.96 se on the log scale
KS_FLOOR = 0.01       # a case-metric whose KS p is below this fails the calibration
ALARM_CEILING = 0.05  # the largest share of case-metrics given a verdict that passes
MIN_RUNS = 3          # fewer measured runs: nothing to judge
REPEATABILITY = 2.8   # x the between-run sd: the 95% limit of the difference of two runs


# --- Kolmogorov-Smirnov against U(0, 1) -------------------------------------------------------------------

def ks_sides(values: list[float]) -> tuple[float, float]:
    """(D+, D-): how far the values' F_n rises above U(0, 1)'s (values piled
    near 0) and falls below it (piled high)."""
    xs = sorted(min(1.0, max(0.0, v)) for v in values)
    n = len(xs)
    return max((i + 1) / n - x for i, x in enumerate(xs)), max(x - i / n for i, x in enumerate(xs))


def ks_statistic(values: list[float]) -> float:
    """D = sup |F_n(x) - x| of the values against U(0, 1)."""
    return max(ks_sides(values))


def _matmul(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:
    columns = list(zip(*b))
    return [[math.fsum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


SCALE_BITS = 500  # a matrix power's entries are kept below 2^500 and the scale counted apart


def _scaled_power(h: list[list[float]], n: int) -> tuple[list[list[float]], int]:
    """h^n as (matrix, e) with h^n = matrix x 2^e: the entries of h^n outgrow a float at n of 100 or so."""
    m = len(h)
    result, result_e = [[float(i == j) for j in range(m)] for i in range(m)], 0
    base, base_e = h, 0
    while n:
        if n & 1:
            result, result_e = _rescaled(_matmul(result, base), result_e + base_e)
        n >>= 1
        if n:
            base, base_e = _rescaled(_matmul(base, base), 2 * base_e)
    return result, result_e


def _rescaled(matrix: list[list[float]], e: int) -> tuple[list[list[float]], int]:
    if max(abs(x) for row in matrix for x in row) > 2.0 ** SCALE_BITS:
        return [[math.ldexp(x, -SCALE_BITS) for x in row] for row in matrix], e + SCALE_BITS
    return matrix, e


def kolmogorov_cdf(n: int, d: float) -> float:
    """P(D_n < d) for n values drawn from a continuous distribution: the
    exact matrix method of Durbin (1973) as Marsaglia, Tsang and Wang
    (2003) program it, with their tail shortcut where d^2 n > 7.24 (or >
    3.76 above 99 values; there the two-sided p is below 1e-3 and the
    shortcut is within 1e-5 of it). Above 200 values: Kolmogorov's limit
    with Stephens' (1970) small-sample factor: within 5e-4 of the exact p
    where it is below 0.1 (what KS_FLOOR reads), 1e-2 above."""
    if d <= 0.5 / n:
        return 0.0
    if d >= 1:
        return 1.0
    s = d * d * n
    if s > 7.24 or (s > 3.76 and n > 99):
        return 1 - 2 * math.exp(-(2.000071 + 0.331 / math.sqrt(n) + 1.409 / n) * s)
    if n > 200:
        return 1 - kolmogorov_limit_sf(d * (math.sqrt(n) + 0.12 + 0.11 / math.sqrt(n)))
    k = int(n * d) + 1
    m = 2 * k - 1
    h = k - n * d
    matrix = [[1.0 if i - j + 1 >= 0 else 0.0 for j in range(m)] for i in range(m)]
    for i in range(m):
        matrix[i][0] -= h ** (i + 1)
        matrix[m - 1][i] -= h ** (m - i)
    matrix[m - 1][0] += (2 * h - 1) ** m if 2 * h - 1 > 0 else 0.0
    for i in range(m):
        for j in range(m):
            if i - j + 1 > 0:
                matrix[i][j] /= math.factorial(i - j + 1)
    power, e = _scaled_power(matrix, n)
    corner = power[k - 1][k - 1]
    if corner <= 0:
        return 0.0
    # P = n!/n^n x (H^n)_kk, in logs: n!/n^n underflows long before n = 200
    return min(1.0, math.exp(math.log(corner) + e * math.log(2) + math.lgamma(n + 1) - n * math.log(n)))


def kolmogorov_limit_sf(x: float) -> float:
    """P(sqrt(n) D_n >= x) as n grows: 2 sum (-1)^(j-1) exp(-2 j^2 x^2)."""
    if x <= 0:
        return 1.0
    if x < 0.2:  # the alternating series cancels badly here, and the answer is 1 to 1e-12
        return 1.0
    return min(1.0, max(0.0, 2 * sum((-1) ** (j - 1) * math.exp(-2 * j * j * x * x) for j in range(1, 101))))


def ks_uniform(values: list[float]) -> dict | None:
    """The one-sample two-sided KS test of the values against U(0, 1): its
    statistic and exact p-value; None below MIN_RUNS values."""
    if len(values) < MIN_RUNS:
        return None
    d = ks_statistic(values)
    return {"n": len(values), "statistic": d, "p": min(1.0, max(0.0, 1 - kolmogorov_cdf(len(values), d)))}


def piled_near_0(values: list[float]) -> bool:
    """Which side KS's D lies on: p-values piled near 0 (verdicts fire more
    often than they promise), or high (the runs agree more than their
    intervals say: intervals wider than needed, fewer verdicts)."""
    above, below = ks_sides(values)
    return above >= below


# --- chi-square and Cochran's Q -----------------------------------------------------------------------------

def gamma_q(a: float, x: float) -> float:
    """The regularised upper incomplete gamma function Q(a, x): a series
    below x = a + 1, Lentz's continued fraction above (Numerical Recipes' split)."""
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1 / a
        ap = a
        for _ in range(10_000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-17:
                break
        return max(0.0, 1 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-16:
            break
    return min(1.0, math.exp(log_front) * h)


def chi2_sf(q: float, df: int) -> float:
    """P(chi-square with df degrees of freedom >= q)."""
    return gamma_q(df / 2, q / 2)


def se_of_interval(low: float, high: float) -> float | None:
    """A row's standard error on the log scale from its 95% interval; None
    where the interval is missing or has no width."""
    if low is None or high is None or low <= 0 or high <= low:
        return None
    return (math.log(high) - math.log(low)) / (2 * Z95)


def heterogeneity(estimates: list[float], ses: list[float]) -> dict | None:
    """Cochran's Q of the estimates weighted by 1/se^2, its chi-square
    p-value (k - 1 df), I^2 = max(0, (Q - df) / Q), and DerSimonian-Laird's
    tau, the between-run sd beyond what each run's interval holds. None
    below two estimates. The signed-rank interval is not symmetric, so se
    from its width is an approximation: read Q's p as a guide, not a test
    to the third digit (simulated A/As of 12 normal blocks, nothing moving
    between runs: 6-8% of Q's p-values fell below 0.05)."""
    if len(estimates) < 2:
        return None
    weights = [1 / se ** 2 for se in ses]
    total = sum(weights)
    pooled = sum(w * y for w, y in zip(weights, estimates)) / total
    q = sum(w * (y - pooled) ** 2 for w, y in zip(weights, estimates))
    df = len(estimates) - 1
    spread = total - sum(w * w for w in weights) / total
    tau2 = max(0.0, (q - df) / spread) if spread > 0 else 0.0
    return {"runs": len(estimates), "pooled": pooled, "q": q, "df": df, "p": chi2_sf(q, df),
            "i2": max(0.0, (q - df) / q) if q > 0 else 0.0, "tau": math.sqrt(tau2)}


# --- binomial and Clopper-Pearson -----------------------------------------------------------------------------

def _binomial_sum(first: int, last: int, n: int, p: float) -> float:
    """P(first <= X <= last) for X ~ Binomial(n, 0 < p < 1), summed term by
    term in logs (no 1 - P: a small tail keeps its digits)."""
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(max(0, first), min(n, last) + 1)]
    if not terms:
        return 0.0
    top = max(terms)
    return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if k < 0:
        return 0.0
    if k >= n or p <= 0:
        return 1.0
    if p >= 1:
        return 0.0
    return _binomial_sum(0, k, n, p)


def beta_quantile(q: float, a: int, b: int) -> float:
    """The q quantile of Beta(a, b) for whole a, b >= 1, by bisection on
    its link to the binomial: P(Beta(a, b) <= x) = P(Binomial(a + b - 1, x) >= a).
    Below the median the upper tail is summed, above it the lower one, so
    a quantile near 0 or 1 keeps its digits."""
    if not (a >= 1 and b >= 1 and a == int(a) and b == int(b)):
        raise ValueError(f"beta_quantile: whole a, b >= 1 expected, got {a}, {b}")
    n = a + b - 1

    def below(x: float) -> bool:  # P(Beta <= x) < q
        if q < 0.5:
            return _binomial_sum(a, n, n, x) < q
        return _binomial_sum(0, a - 1, n, x) > 1 - q

    low, high = 0.0, 1.0
    for _ in range(200):
        x = (low + high) / 2
        if below(x):
            low = x
        else:
            high = x
        if high - low < 1e-16:
            break
    return (low + high) / 2


def clopper_pearson(successes: int, trials: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial proportion: it covers at
    least `level` at every true rate (conservative where the count is small)."""
    if trials <= 0:
        return 0.0, 1.0
    tail = (1 - level) / 2
    low = beta_quantile(tail, successes, trials - successes + 1) if successes > 0 else 0.0
    high = beta_quantile(1 - tail, successes + 1, trials - successes) if successes < trials else 1.0
    return low, high


def alarm_count(alarms: int, rows: int) -> dict:
    low, high = clopper_pearson(alarms, rows)
    return {"alarms": alarms, "rows": rows, "rate": alarms / rows if rows else None, "low": low, "high": high}


# --- randomised signed-rank p-values -------------------------------------------------------------------------

def signed_rank_tail(d: list[float]) -> tuple[float, float] | None:
    """(p, P(the observed statistic exactly)) of paired.signed_rank_p's
    exact test for these log-ratios; None where it uses the normal
    approximation (above paired.EXACT_MAX_N blocks: nearly continuous)."""
    nonzero = [x for x in d if x != 0]
    n = len(nonzero)
    if n == 0:
        return 1.0, 1.0
    if n > paired.EXACT_MAX_N:
        return None
    ranks = paired.mean_ranks([abs(x) for x in nonzero])
    observed = sum(r for r, x in zip(ranks, nonzero) if x > 0)
    centre = sum(ranks) / 2
    distance = abs(observed - centre)
    if len(set(ranks)) == n:
        sums = enumerate(paired.signed_rank_counts(n))
    else:
        found: dict[float, int] = {}
        for mask in range(2 ** n):
            t = sum(r for i, r in enumerate(ranks) if mask >> i & 1)
            found[t] = found.get(t, 0) + 1
        sums = found.items()
    extreme = exact = 0
    for t, count in sums:
        gap = abs(t - centre)
        if gap >= distance - 1e-9:
            extreme += count
            if gap <= distance + 1e-9:
                exact += count
    return min(1.0, extreme / 2 ** n), exact / 2 ** n


def randomised_p(row: dict, seed: str) -> float:
    """The row's p-value made continuous: p - u x P(the observed statistic),
    u uniform from `seed` (reproducible). Exactly U(0, 1) under the null
    (continuous log-ratios, symmetric about 0); the raw p where the row's
    log-ratios do not give back its p (or it came from the normal approximation)."""
    d = row.get("log_ratios") or []
    tail = signed_rank_tail(d) if d else None
    if tail is None or abs(tail[0] - row["p"]) > 1e-9:
        return row["p"]
    return row["p"] - random.Random(seed).random() * tail[1]


# --- the runs, per case and metric ---------------------------------------------------------------------------

def settings_of(ab: dict) -> dict:
    """What must be the same for two A/A runs (or an A/B and a calibration)
    to be read together: the path, its sizes and levels, blocks, design,
    window and whether the twins were restarted. ab.json names no window
    (AB_WINDOW) today: None then."""
    cases = ab.get("cases") or []
    files = ab.get("files") or list(dict.fromkeys(c["file"].removesuffix(".bin") for c in cases))
    concurrency = ab.get("concurrency") or sorted({c["concurrency"] for c in cases})
    return {"path": ab.get("a"), "files": list(files), "concurrency": list(concurrency), "blocks": ab.get("blocks"),
            "design": ab.get("design", "blocks"), "window": ab.get("window"),
            "restart_twins": ab.get("restart_twins")}


COMPARED = ("path", "files", "concurrency", "blocks", "design", "restart_twins")


def run_unmeasured(ab: dict, first: dict | None) -> str:
    """Why one ab.json cannot be read as an A/A of the calibration ('' when
    it can): an error, an unfinished run, not an A/A, no rows, or other
    settings than the first measured run's."""
    if ab.get("error"):
        return ab["error"]
    if ab.get("status", "complete") != "complete":
        return f"bench's run is {ab['status']}"
    if ab.get("kind") != "A/A":
        return f"not an A/A run (kind {ab.get('kind')!r}: {ab.get('change') or 'a change to B'})"
    if not ab.get("rows"):
        return "no case was judged"
    if first is not None:
        mine, theirs = settings_of(ab), settings_of(first)
        differs = [k for k in COMPARED if mine[k] != theirs[k]]
        if differs:
            return "settings differ from the first run's: " + ", ".join(f"{k} {mine[k]} (not {theirs[k]})"
                                                                         for k in differs)
        if ab.get("machine") != first.get("machine"):
            return f"another machine: {ab.get('machine')}"
    return ""


def blocks_short(ab: dict, case: dict) -> str:
    """Why one case of an ab.json counted too few blocks ('' when it did
    not): fewer counted than the run planned (a disturbed block not run
    again). Its interval stands on fewer pairs than the run promised, so
    the pull-request gate (tools/ci/change_gate.py) calls the run not
    measured, and a calibration leaves the case out: one rule for both."""
    counted = sum(1 for blk in case.get("blocks", []) if blk.get("counted", True))
    planned = ab.get("blocks", 0)
    return f"{counted} blocks counted of {planned} planned" if counted < planned else ""


def resolution(rows: list[dict], threshold: float | None) -> dict:
    """What one run of a case and metric could resolve, over the runs' rows:
    the detectable change at 80% power (a ratio's distance from 1, 0.05 a 5%
    change) as median, min and max, whether the median is within the
    threshold (None where either is unknown), the largest counting floor
    (rps only; None elsewhere) and the median rho. A row without a figure
    (fewer than 3 blocks) is left out of that figure's count."""
    found = [row["detectable"] for row in rows if row.get("detectable") is not None]
    floors = [row["counting_floor"] for row in rows if row.get("counting_floor") is not None]
    rhos = [row["rho"] for row in rows if row.get("rho") is not None]
    middle = median(found) if found else None
    return {"detectable_runs": len(found), "detectable_median": middle,
            "detectable_min": min(found, default=None), "detectable_max": max(found, default=None),
            "resolves_threshold": middle <= threshold if middle is not None and threshold is not None else None,
            "counting_floor_max": max(floors, default=None), "rho_median": median(rhos) if rhos else None}


def case_metric(rows: list[tuple[str, dict]], threshold: float | None = None) -> dict:
    """The statistics of one case and metric over the runs that measured it
    ((run id, row) pairs, in run order); `threshold`: the A/B's (AB_THRESHOLD,
    a ratio's distance from 1), which a run's detectable change is read against."""
    ps = [row["p"] for _, row in rows]
    randomised = [randomised_p(row, f"{run_id}|{row['case']}|{row['metric']}") for run_id, row in rows]
    estimates = [(run_id, math.log(row["ratio"]), se_of_interval(row.get("low"), row.get("high")))
                 for run_id, row in rows if row.get("ratio")]
    weighed = [(y, se) for _, y, se in estimates if se]
    sd = stdev([y for _, y, _ in estimates]) if len(estimates) >= 2 else None
    alarms = sum(1 for _, row in rows if row.get("verdict") in ALARMS)
    first = rows[0][1]
    return {"case": first["case"], "metric": first["metric"], "what": first.get("what", first["metric"]),
            "runs": len(rows), "run_ids": [run_id for run_id, _ in rows], "p": ps, "p_randomised": randomised,
            "ks": ks_uniform(randomised), "ks_raw": ks_uniform(ps),
            "log_ratios": [y for _, y, _ in estimates], "mean_log_ratio": mean([y for _, y, _ in estimates])
            if estimates else None, "between_run_sd": sd,
            "repeatability_pct": REPEATABILITY * sd * 100 if sd is not None else None,
            "heterogeneity": heterogeneity([y for y, _ in weighed], [se for _, se in weighed]),
            "without_interval": [run_id for run_id, _, se in estimates if not se],
            "false_alarms": alarm_count(alarms, len(rows)),
            "verdicts": {v: sum(1 for _, row in rows if row.get("verdict") == v)
                         for v in dict.fromkeys(row.get("verdict") for _, row in rows)},
            **resolution([row for _, row in rows], threshold)}


def summarise(aa_runs: list[dict], missing: list[dict] = ()) -> dict:
    """Every statistic of a calibration from its runs' ab.json (in run
    order). `missing`: the runs that gave no ab.json ({"run_id": None,
    "why": ...}), named beside those whose ab.json cannot be read. No run
    is dropped unnamed: a run not measured, and a case a run did not
    measure (its error, fewer blocks counted than planned, none), are
    listed with why."""
    not_measured = [dict(m) for m in missing]
    measured: list[dict] = []
    for ab in aa_runs:
        why = run_unmeasured(ab, measured[0] if measured else None)
        if why:
            not_measured.append({"run_id": ab.get("run_id"), "why": why})
        else:
            measured.append(ab)
    by_key: dict[tuple[str, str], list[tuple[str, dict]]] = {}
    cases_missed: list[dict] = []
    short: set[tuple[str, str]] = set()
    for ab in measured:
        errors, too_few = {}, {}
        for c in ab.get("cases", []):
            name = f"{c['file'].removesuffix('.bin')} c={c['concurrency']}"
            errors[name], too_few[name] = c.get("error"), blocks_short(ab, c)
        for row in ab["rows"]:
            why = errors.get(row["case"]) or too_few.get(row["case"]) or ("" if row.get("n") else "no block counted")
            if why:
                cases_missed.append({"run_id": ab.get("run_id"), "case": row["case"], "metric": row["metric"],
                                     "why": why})
                if not errors.get(row["case"]) and too_few.get(row["case"]):
                    short.add((ab.get("run_id"), row["case"]))
                continue
            by_key.setdefault((row["case"], row["metric"]), []).append((ab.get("run_id"), row))
    threshold = measured[0].get("threshold") if measured else None
    stats = [case_metric(rows, threshold) for rows in by_key.values()]
    rows_judged = sum(s["runs"] for s in stats)
    alarms = sum(s["false_alarms"]["alarms"] for s in stats)
    run_alarms = sum(1 for ab in measured if any(r.get("verdict") in ALARMS for r in ab["rows"]))
    return {"runs": len(aa_runs) + len(missing), "measured": [ab.get("run_id") for ab in measured],
            "not_measured": not_measured, "cases_not_measured": cases_missed, "cases_short_of_blocks": len(short),
            "settings": settings_of(measured[0]) if measured else None,
            "machine": measured[0].get("machine") if measured else None,
            "threshold": threshold,
            "case_metrics": stats, "false_alarms": alarm_count(alarms, rows_judged),
            "runs_with_alarm": alarm_count(run_alarms, len(measured)),
            "ks_min_p": min((s["ks"]["p"] for s in stats if s["ks"]), default=None)}


# The calibration's exit: what a script acts on
PASSES, FAILS, NOT_MEASURED = 0, 1, 2


def judge(summary: dict) -> tuple[int, list[str]]:
    """0 when every case-metric's KS p is at least KS_FLOOR and at most
    ALARM_CEILING of the case-metrics got a verdict; 1 when not; 2 when
    fewer than MIN_RUNS runs (or runs of a case-metric) were measured."""
    measured = len(summary["measured"])
    if measured < MIN_RUNS:
        return NOT_MEASURED, [f"{measured} runs measured of {summary['runs']}: at least {MIN_RUNS} are needed"]
    short = [f"{s['case']} {s['metric']}: {s['runs']} runs measured" for s in summary["case_metrics"] if not s["ks"]]
    if short or not summary["case_metrics"]:
        return NOT_MEASURED, short or ["no case-metric was measured"]
    why = [f"{s['case']} {s['metric']}: the p-values are not uniform (KS p {s['ks']['p']:.3g} < {KS_FLOOR:g}), "
           + ("piled near 0: the verdicts fire more often than they promise" if piled_near_0(s["p_randomised"]) else
              "piled high: the runs agree more than their intervals say, which are wider than needed")
           for s in summary["case_metrics"] if s["ks"]["p"] < KS_FLOOR]
    found = summary["false_alarms"]
    if found["rate"] > ALARM_CEILING:
        why.append(f"{found['alarms']} false alarms of {found['rows']} case-metrics ({found['rate']:.1%} > "
                   f"{ALARM_CEILING:.0%}; 95% interval {found['low']:.1%}-{found['high']:.1%})")
    return (FAILS, why) if why else (PASSES, [])


# --- what an A/B page quotes --------------------------------------------------------------------------------

def calibration_for(results_dir: Path, ab: dict) -> dict | None:
    """The newest complete calibration (results/calibration-*/calibration.json)
    of the same path, machine and settings as this A/B run, finished before
    it began, summarised for its page; None when there is none. A window
    the A/B run does not record (ab.json has no "window") cannot be
    compared: the summary says so ("unchecked")."""
    want = settings_of(ab)
    began = ab.get("run_id") or ""
    best = None
    for found in sorted(Path(results_dir).glob("calibration-*/calibration.json")):
        try:
            data = json.loads(found.read_text())
        except (OSError, ValueError):
            continue
        have = data.get("settings") or {}
        if data.get("status") != "complete" or data.get("machine") != ab.get("machine"):
            continue
        if any(have.get(k) != want[k] for k in COMPARED if want[k] is not None) or have.get("path") != want["path"]:
            continue
        if want["window"] is not None and have.get("window") != want["window"]:
            continue
        finished = data.get("finished_at") or ""
        if began and finished and finished > began:
            continue
        if best is None or finished >= best[0]:
            best = (finished, found, data)
    if best is None:
        return None
    _, found, data = best
    stats = data.get("statistics") or {}
    return {"calibration": found.parent.name, "finished_at": data.get("finished_at"),
            "runs": len(stats.get("measured", [])), "planned": data.get("planned_runs"),
            "not_measured": len(stats.get("not_measured", [])),
            "unchecked": ["window"] if want["window"] is None else [],
            "exit": (data.get("verdict") or {}).get("exit"), "false_alarms": stats.get("false_alarms"),
            "runs_with_alarm": stats.get("runs_with_alarm"), "ks_min_p": stats.get("ks_min_p"),
            "cases": _by_case(stats.get("case_metrics", []))}


def _by_case(stats: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for s in stats:
        het = s.get("heterogeneity") or {}
        out.setdefault(s["case"], {})[s["metric"]] = {
            "runs": s["runs"], "ks_p": (s.get("ks") or {}).get("p"), "between_run_sd": s.get("between_run_sd"),
            "repeatability_pct": s.get("repeatability_pct"), "i2": het.get("i2"), "q_p": het.get("p"),
            "alarms": s["false_alarms"]["alarms"], "rows": s["false_alarms"]["rows"],
            "alarm_high": s["false_alarms"]["high"], "detectable_median": s.get("detectable_median"),
            "resolves_threshold": s.get("resolves_threshold")}
    return out
