"""bench compare RUN_A RUN_B: what changed between two separate runs. First
the parameters and environment facts that differ, then per case (target,
file, concurrency) the ratio B/A of requests per second, of the target's CPU
per request and of p99 (ab's own per-request times; none for a row timed by
wrk, whose percentiles are corrected for coordinated omission, not its
answers' own: results.CORRECTED_LATENCY_TOOLS). Writes compare.md and
compare.json.

Two runs are never judged significant. Their repetitions share one machine,
time and set of neighbours each, so a test on repetitions takes run-to-run
drift for a change: in the captured fixtures, two runs differing only in
GUNICORN_WORKERS put nginx-static, which that setting cannot touch, at 0.93x
and "significant". A change whose repetitions are clearly apart is marked
"apart" (the test below), which says only that it is larger than the spread
within each run; the verdict on one change comes from `make ab`, A and B
interleaved in one run. --normalise divides each path's figures by the same
run's nginx-static (same file and concurrency) first, so drift that moves
every path alike cancels. --fail-above exits 1 on a change for the worse
beyond PCT whose repetitions are apart, or a case failing in B only: a
tripwire for two runs on one quiet machine, not a gate.

Apart. Each metric's repetitions of run A and of run B are compared by
Mann-Whitney U, two-sided, exact (every arrangement of the pooled values, as
Go's benchstat does for small samples), at --alpha (0.05). With the lab's
default BENCH_REPETITIONS=3 the exact test can never reach 0.05: 3 against 3
values have 20 arrangements and the two most extreme (every B above every A,
or below) give p = 2/20 = 0.10. A change whose ranges do not overlap counts
as apart when the test cannot reach alpha at those sample sizes and that
separation is itself p <= FEW_REPETITIONS_LEVEL (0.10: 3 against 3, 3
against 4); it is marked "ranges apart" so a reader knows the level. Fewer
repetitions (1 or 2 a side) never make a change apart. And a change smaller
than --min-change (5%, what the lab already calls noise within a run:
stats.NOISY_HALF_RANGE) is never apart."""
import argparse
import json
import math
import sys
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from statistics import median

from ..results import Results, Run, own_latency
from ..measure.flags import shown
from ..measure.paired import mean_ranks
from ..measure.stats import NOISY_HALF_RANGE

ALPHA = 0.05
FEW_REPETITIONS_LEVEL = 0.10
MIN_CHANGE = NOISY_HALF_RANGE
EXACT_LIMIT = 200_000  # arrangements enumerated; beyond, the normal approximation

# Each compared metric: its label, how to read it from a repetition, and
# whether a higher value is better.
METRICS = {
    "rps": ("req/s", True),
    "cpu_ms_per_request": ("target CPU ms/req", False),
    "p99_ms": ("p99", False),
}

# Environment entries that differ on every run by nature: not a difference.
ENVIRONMENT_IGNORED = {"duration_seconds"}
# The path every other is judged against: files on disk through nginx.
REFERENCE = "nginx-static"
TIMING_IGNORED = {"planned_seconds", "actual_seconds"}


class CompareError(Exception):
    """A run that cannot be compared: the message names the file."""


# --- statistics ------------------------------------------------------------

def mann_whitney(a: list[float], b: list[float]) -> float:
    """Two-sided p of Mann-Whitney U: exact over every arrangement of the
    pooled ranks (ties by mean rank) when there are at most EXACT_LIMIT,
    else the normal approximation with tie correction."""
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        raise ValueError("Mann-Whitney U needs values on both sides")
    ranks = mean_ranks(list(a) + list(b))
    centre = n1 * (n1 + n2 + 1) / 2  # the mean of A's rank sum under the null
    observed = abs(sum(ranks[:n1]) - centre)
    if math.comb(n1 + n2, n1) <= EXACT_LIMIT:
        sums = [abs(sum(ranks[i] for i in chosen) - centre) for chosen in combinations(range(n1 + n2), n1)]
        return sum(1 for s in sums if s >= observed - 1e-9) / len(sums)
    n = n1 + n2
    ties = {}
    for r in ranks:
        ties[r] = ties.get(r, 0) + 1
    variance = n1 * n2 / 12 * ((n + 1) - sum(t ** 3 - t for t in ties.values()) / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = max(observed - 0.5, 0) / math.sqrt(variance)
    return math.erfc(z / math.sqrt(2))


def smallest_p(n1: int, n2: int) -> float:
    """The smallest two-sided p the exact test can give these sample sizes
    (no ties): the two most extreme of C(n1 + n2, n1) arrangements."""
    return min(1.0, 2 / math.comb(n1 + n2, n1))


def ranges_apart(a: list[float], b: list[float]) -> bool:
    return max(a) < min(b) or max(b) < min(a)


CROSS_RUN = ("Two separate runs differ in machine, time and neighbours by more than their repetitions show: "
             "no row here is a verdict. `apart` says only that a change is larger than the spread within each "
             "run. For a verdict on one change, run `make ab SERVICE=<path> ...`: A and B interleaved in one run.")


@dataclass
class Change:
    """One metric of one case: medians, ratio B/A, the test on repetitions.
    `significant` stays False: across runs nothing is (module docstring)."""
    a: float
    b: float
    ratio: float | None
    p: float
    n_a: int
    n_b: int
    apart: bool         # larger than the spread within each run (the test on repetitions)
    basis: str          # "mann-whitney", "ranges apart", "below min change", "not apart"
    direction: str | None  # "better" / "worse" when apart
    significant: bool = False

    def to_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "ratio": None if self.ratio is None else round(self.ratio, 4),
                "p": round(self.p, 4), "n_a": self.n_a, "n_b": self.n_b, "apart": self.apart,
                "significant": self.significant, "basis": self.basis, "direction": self.direction}


def change_of(a: list[float], b: list[float], higher_is_better: bool, alpha: float = ALPHA,
              min_change: float = MIN_CHANGE) -> Change:
    """The verdict on one metric's repetitions (see the module's docstring)."""
    ma, mb = median(a), median(b)
    ratio = mb / ma if ma else None
    p = mann_whitney(a, b)
    floor = smallest_p(len(a), len(b))
    if p < alpha:
        apart, basis = True, "mann-whitney"
    elif floor >= alpha and floor <= FEW_REPETITIONS_LEVEL and ranges_apart(a, b):
        apart, basis = True, "ranges apart"
    else:
        apart, basis = False, "not apart"
    if apart and (ratio is None or abs(ratio - 1) < min_change):
        apart, basis = False, "below min change"
    direction = None
    if apart:
        direction = "better" if (ratio > 1) == higher_is_better else "worse"
    return Change(ma, mb, ratio, p, len(a), len(b), apart, basis, direction)


# --- loading -----------------------------------------------------------------

def results_path(arg: str) -> Path:
    """A run directory (results/<run-id>) or its results.json."""
    path = Path(arg)
    return path / "results.json" if path.is_dir() else path


def load(arg: str) -> Results:
    path = results_path(arg)
    if not path.exists():
        raise CompareError(f"{path}: no such file (expected a results/<run-id> directory or its results.json)")
    try:
        return Results.load(path)
    except OSError as e:
        raise CompareError(f"{path}: cannot read: {e.strerror or e}") from e
    except json.JSONDecodeError as e:
        raise CompareError(f"{path}: not JSON ({e.msg}, line {e.lineno}): not a bench results.json") from e
    except (TypeError, KeyError, AttributeError, ValueError) as e:
        raise CompareError(f"{path}: not a bench results.json ({type(e).__name__}: {e})") from e


# --- what differs ------------------------------------------------------------

def _flat(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list):
        out[prefix] = " ".join(map(str, value))
    else:
        out[prefix] = value


def _shown(value) -> str:
    return "(unset)" if value is None or value == "" else str(value)


def differences(a: Results, b: Results) -> list[dict]:
    """Parameters first (results.json `parameters`), then what the run
    recorded of its environment (database product and version, kernel,
    tools...) and the timing as applied, wherever A and B disagree."""
    out = []
    for source, ignored, va, vb in (("parameter", set(), a.parameters, b.parameters),
                                    ("environment", ENVIRONMENT_IGNORED, a.environment, b.environment),
                                    ("timing", TIMING_IGNORED, a.timing, b.timing)):
        fa, fb = {}, {}
        _flat("", {k: v for k, v in va.items() if k not in ignored}, fa)
        _flat("", {k: v for k, v in vb.items() if k not in ignored}, fb)
        for name in list(fa) + [k for k in fb if k not in fa]:
            if _shown(fa.get(name)) != _shown(fb.get(name)):
                out.append({"kind": source, "name": name, "a": fa.get(name), "b": fb.get(name)})
    return out


# --- per case ------------------------------------------------------------------

def metric_values(run: Run, metric: str) -> list[float]:
    """The metric over the case's repetitions (CPU per request of the target's
    own container; a repetition without cAdvisor's figures is left out, and
    from p99 one whose tool's percentiles are not its answers' own)."""
    if metric == "cpu_ms_per_request":
        values = [((r.get("cpu") or {}).get(run.target) or {}).get("cpu_ms_per_request") for r in run.repetitions]
    elif metric == "p99_ms":
        values = [r.get(metric) for r in run.repetitions if own_latency(r.get("tool"))]
    else:
        values = [r.get(metric) for r in run.repetitions]
    return [float(v) for v in values if isinstance(v, (int, float))]


def normalised(values: list[float], per: dict | None, metric: str) -> list[float]:
    """values / the same run's reference median (per: None leaves them as
    they are; a reference without the figure leaves none)."""
    if per is None:
        return values
    reference = per.get(metric)
    return [v / reference for v in values] if reference else []


def reference_medians(results: Results, file: str, concurrency: int) -> dict[str, float | None]:
    """The reference path's median of each metric in one run and case, the
    denominator of --normalise (None where it has no figure)."""
    run = results.run_for(REFERENCE, file, concurrency)
    if run is None or not run.ok:
        return {m: None for m in METRICS}
    return {m: (median(v) if (v := metric_values(run, m)) else None) for m in METRICS}


def _key(run: Run) -> tuple:
    return run.target, run.file, run.concurrency


def _case_name(key: tuple) -> str:
    target, file, c = key
    return f"{target} {file.removesuffix('.bin')} c={c}"


def compare_case(a: Run, b: Run, alpha: float = ALPHA, min_change: float = MIN_CHANGE,
                 metrics=tuple(METRICS), per_a: dict | None = None, per_b: dict | None = None) -> dict:
    """per_a, per_b: each run's reference medians by metric (--normalise)."""
    case = {"target": a.target, "file": a.file, "size_bytes": a.size_bytes, "concurrency": a.concurrency,
            "status": "compared", "a_status": a.status, "b_status": b.status, "a_error": a.error,
            "b_error": b.error, "flags_a": list(a.flags), "flags_b": list(b.flags), "metrics": {}}
    if not a.ok or not b.ok:
        case["status"] = "failed"
        return case
    for metric in metrics:
        va = normalised(metric_values(a, metric), per_a, metric)
        vb = normalised(metric_values(b, metric), per_b, metric)
        case["metrics"][metric] = (change_of(va, vb, METRICS[metric][1], alpha, min_change).to_dict()
                                   if va and vb else None)
    return case


def reference_moved(cases: list[dict], reference: str = REFERENCE) -> str | None:
    """A warning when the reference path's requests per second changed
    beyond its repetitions: files on disk through nginx, which a GridFS path's image
    or setting does not touch, so unless a listed difference concerns it,
    the machine itself was not the same in both runs (another load, a
    slower host) and every ratio carries that drift too."""
    moved = [c for c in cases if c["target"] == reference and c["status"] == "compared"
             and (c["metrics"].get("rps") or {}).get("apart")]
    if not moved:
        return None
    ratios = ", ".join(f"{_case_name((c['target'], c['file'], c['concurrency']))} "
                       f"{c['metrics']['rps']['ratio']:.2f}x" for c in moved)
    return (f"{reference}, the reference, moved beyond its repetitions in {len(moved)} case(s) ({ratios}): unless a "
            "difference listed here concerns it, the machine itself was not the same in both runs, and the "
            "other ratios carry that drift too")


def compare(a: Results, b: Results, alpha: float = ALPHA, min_change: float = MIN_CHANGE,
            normalise: bool = False) -> dict:
    runs_a, runs_b = {_key(r): r for r in a.runs}, {_key(r): r for r in b.runs}
    warnings = [f"run {name} ({r.run_id}) is {r.status}, not complete: it holds what was measured until it stopped"
                for name, r in (("A", a), ("B", b)) if r.status != "complete"]

    def per(results: Results, key: tuple) -> dict | None:
        return reference_medians(results, key[1], key[2]) if normalise else None
    cases = [compare_case(runs_a[k], runs_b[k], alpha, min_change, per_a=per(a, k), per_b=per(b, k))
             for k in runs_a if k in runs_b and not (normalise and k[0] == REFERENCE)]
    drift = None if normalise else reference_moved(cases)
    return {"a": {"run_id": a.run_id, "started_at": a.started_at, "status": a.status},
            "b": {"run_id": b.run_id, "started_at": b.started_at, "status": b.status},
            "alpha": alpha, "min_change": min_change, "few_repetitions_level": FEW_REPETITIONS_LEVEL,
            "cross_run": CROSS_RUN, "normalised_to": REFERENCE if normalise else None,
            "differences": differences(a, b),
            "cases": cases,
            "only_in_a": [_case_name(k) for k in runs_a if k not in runs_b],
            "only_in_b": [_case_name(k) for k in runs_b if k not in runs_a],
            "warnings": warnings + ([drift] if drift else [])}


def regressions(comparison: dict, fail_above: float) -> list[str]:
    """Changes for the worse beyond their repetitions larger than fail_above
    percent, and cases that completed in A but failed in B (a regression of
    any size). Across runs: a tripwire, not a verdict."""
    found = []
    for case in comparison["cases"]:
        name = _case_name((case["target"], case["file"], case["concurrency"]))
        if case["status"] == "failed":
            if case["a_status"] == "ok":
                found.append(f"{name}: failed in B ({case['b_error']})")
            continue
        for metric, ch in case["metrics"].items():
            if not ch or ch["direction"] != "worse":
                continue
            worse = (1 - ch["ratio"]) * 100 if METRICS[metric][1] else (ch["ratio"] - 1) * 100
            if worse > fail_above:
                found.append(f"{name}: {METRICS[metric][0]} {ch['ratio']:.3f}x B/A, {worse:.1f}% worse "
                             f"(apart on repetitions, p={ch['p']:.3g}, {ch['basis']}) > {fail_above:g}%")
    return found


# --- rendering -------------------------------------------------------------------

def cell(ch: dict | None) -> str:
    """A ratio B/A: the number and its direction with `apart` when beyond
    the repetitions' spread, `~` and the number in brackets when not, `-`
    when there is no figure. Never bold: across runs nothing is a verdict."""
    if ch is None or ch["ratio"] is None:
        return "-"
    dagger = "†" if ch["basis"] == "ranges apart" else ""
    if ch.get("apart"):
        return f"{ch['ratio']:.2f}x {ch['direction']}, apart (p={ch['p']:.2g}{dagger})"
    return f"~ ({ch['ratio']:.2f}x, p={ch['p']:.2g})"


def _flags(flags: list[str]) -> str:
    # by name: the report's marks include "~" (noisy), which here means "within the runs' spread"
    return " ".join(flags) or "-"


def _escaped(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_markdown(comparison: dict, path_a: str, path_b: str) -> str:
    a, b = comparison["a"], comparison["b"]
    lines = [f"# Comparison: {a['run_id']} (A) -> {b['run_id']} (B)", "",
             f"A: `{path_a}`, started {a['started_at']}, {a['status']}  ",
             f"B: `{path_b}`, started {b['started_at']}, {b['status']}", "",
             f"**Not a verdict.** {comparison.get('cross_run', CROSS_RUN)}", ""]
    if comparison.get("normalised_to"):
        lines += [f"Each path's figures are divided by the same run's {comparison['normalised_to']} (same file and "
                  "concurrency) before B is set against A: drift that moves every path alike cancels.", ""]
    lines += [f"**Warning:** {w}" for w in comparison["warnings"]] + ([""] if comparison["warnings"] else [])
    lines += ["## What differs", ""]
    if comparison["differences"]:
        lines += [f"- {d['kind']} `{d['name']}` {_shown(d['a'])} -> {_shown(d['b'])}"
                  for d in comparison["differences"]]
    else:
        lines.append("No parameter, environment fact or timing setting differs.")
    lines += ["", "## Per case: B / A", ""]
    header = ["target", "file", "c", *(f"{label} B/A" for label, _ in METRICS.values()), "reps A/B", "flags A",
              "flags B", "note"]
    rows, flags_seen, apart_seen = [], set(), False  # apart_seen: a "ranges apart" mark to explain
    for case in comparison["cases"]:
        flags_seen |= set(case["flags_a"]) | set(case["flags_b"])
        head = [case["target"], case["file"].removesuffix(".bin"), str(case["concurrency"])]
        flags = [_flags(case["flags_a"]), _flags(case["flags_b"])]
        if case["status"] == "failed":
            note = "; ".join(f"failed in {n}: {case[f'{n.lower()}_error']}" for n in ("A", "B")
                             if case[f"{n.lower()}_status"] != "ok")
            rows.append(head + ["failed"] * len(METRICS) + ["-"] + flags + [_escaped(note)])
            continue
        metrics = case["metrics"]
        rps = metrics.get("rps") or {}
        apart_seen |= any(m and m["basis"] == "ranges apart" for m in metrics.values())
        rows.append(head + [cell(metrics.get(m)) for m in METRICS]
                    + [f"{rps.get('n_a', 0)}/{rps.get('n_b', 0)}"] + flags + [""])
    if rows:
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
    else:
        lines.append("No case is in both runs.")
    lines += ["", f"Ratios are B's median over its repetitions / A's. `apart`: beyond the spread within each run "
              f"(Mann-Whitney U on the repetitions, two-sided exact p < {comparison['alpha']:g}, and a change of at "
              f"least {comparison['min_change']:.0%}), which two runs exceed on their own; `~`: within it. "
              "CPU is the target's own container, per request. p99: ab's, each request's own (closed loop); a row "
              "timed by wrk has none (wrk's percentiles are corrected for coordinated omission, not its answers' "
              "own)."]
    if apart_seen:
        lines.append(f"† ranges apart: every repetition of B above (or below) every one of A, p = "
                     f"{comparison['few_repetitions_level']:g} or less, the smallest the exact test can give with "
                     "so few repetitions (3 against 3: p = 0.1).")
    if flags_seen:
        lines += ["", "Flags (each run's own row):", ""]
        lines += [f"- `{f.name}`: {f.legend}" if f.legend else f"- `{f.name}`" for f in shown(flags_seen)]
    for side, key in (("A", "only_in_a"), ("B", "only_in_b")):
        if comparison[key]:
            lines += ["", f"Only in {side}: " + ", ".join(comparison[key]) + "."]
    if comparison.get("regressions") is not None:
        lines += ["", f"## Regressions above {comparison['fail_above']:g}%", ""]
        lines += [f"- {r}" for r in comparison["regressions"]] or ["None."]
    return "\n".join(lines) + "\n"


# --- command line --------------------------------------------------------------------

def _percent(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a percentage of 0 or more")
    return value


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_a", metavar="RUN_A", help="results/<run-id> directory or its results.json (before)")
    parser.add_argument("run_b", metavar="RUN_B", help="results/<run-id> directory or its results.json (after)")
    parser.add_argument("--out", help="where compare.md and compare.json go (default: RUN_B's directory)")
    parser.add_argument("--fail-above", type=_percent, metavar="PCT",
                        help="exit 1 when a change for the worse beyond the repetitions (req/s lower, CPU/request "
                             "or p99 higher) exceeds PCT percent, or a case fails in B only: a tripwire across "
                             "runs, not a verdict (make ab gives one)")
    parser.add_argument("--normalise", action="store_true",
                        help="divide each path's figures by the same run's nginx-static first")
    parser.add_argument("--alpha", type=float, default=ALPHA, help=f"significance level (default {ALPHA})")
    # help strings are %-formatted by argparse: a percent sign is written %%
    parser.add_argument("--min-change", type=_percent, default=MIN_CHANGE * 100, metavar="PCT",
                        help=f"smallest change marked apart (default {MIN_CHANGE * 100:g}%%)")
    args = parser.parse_args(argv)
    if not 0 < args.alpha < 1:
        parser.error(f"--alpha {args.alpha}: expected a level between 0 and 1, e.g. 0.05")
    try:
        a, b = load(args.run_a), load(args.run_b)
    except CompareError as e:
        print(f"bench compare: error: {e}", file=sys.stderr)
        return 2
    comparison = compare(a, b, args.alpha, args.min_change / 100, normalise=args.normalise)
    if args.fail_above is not None:
        comparison["fail_above"] = args.fail_above
        comparison["regressions"] = regressions(comparison, args.fail_above)
    out = Path(args.out) if args.out else results_path(args.run_b).parent
    markdown = render_markdown(comparison, str(results_path(args.run_a)), str(results_path(args.run_b)))
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / "compare.md").write_text(markdown)
        (out / "compare.json").write_text(json.dumps(comparison, indent=2) + "\n")
    except OSError as e:
        print(f"bench compare: error: cannot write to {out}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(markdown, end="")
    print(f"bench compare: wrote {out / 'compare.md'} and {out / 'compare.json'}", file=sys.stderr)
    if comparison.get("regressions"):
        for r in comparison["regressions"]:
            print(f"bench compare: regression: {r}", file=sys.stderr)
        return 1
    return 0
