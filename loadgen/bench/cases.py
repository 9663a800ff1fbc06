"""Timing: each (target, file, concurrency) case with ab and its repetitions,
ab -k against wrk, and the concurrency sweep."""
import math
import time
from pathlib import Path

from .cpu_windows import cpu_note, measure, start_window
from .monitor import Monitor
from .progress import say
from .results import Comparison, Results, Run, SweepPoint, TargetResult, ToolResult, repeated_run
from .timing import Measurement, TimingError, run_ab, run_wrk
from .usage import LOADGEN_BOUND, tool_bound


def bound(m: Measurement, allowance: float) -> bool:
    """The tool was at its CPU limit in this run (its own rusage)."""
    return tool_bound(m.loadgen_cpu_seconds, m.seconds, m.threads, allowance)


PRIMER_REQUESTS = 10  # first requests to a (target, file): cold caches, first connections; not counted


def time_case(cfg, target: TargetResult, f: dict, c: int, run_dir: Path, monitor: Monitor | None,
              allowance: float) -> Run:
    url = f"{target.url}/files/{f['name']}"
    case = f"{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
    try:
        run_ab(url, cfg.warmup_requests, c)  # the warm-up: not counted
        window = start_window(monitor)
        reps = [run_ab(url, cfg.requests, c, run_dir, f"{case}-r{i}") for i in range(1, cfg.repetitions + 1)]
    except TimingError as e:
        say(f"{case}: ab failed: {e}")
        return Run(target.name, f["name"], f["size"], c, cfg.requests, cfg.requests,
                   0.0, 0.0, 0.0, 0.0, 0.0, f"{case}-r1.txt")
    run = repeated_run(target.name, f["name"], f["size"], c, cfg.requests, reps)
    measure(monitor, window, run, cfg.requests * len(reps), sum(m.seconds for m in reps),
            sum(m.loadgen_cpu_seconds for m in reps))
    if LOADGEN_BOUND not in run.flags and any(bound(m, allowance) for m in reps):
        run.flags.append(LOADGEN_BOUND)  # ab's own rusage says so, cAdvisor or not
    if target.conforming is False:
        run.flags.append("nonconforming")
    say(f"{case}: {run.rps:.0f} req/s (spread {run.spread['rps']['spread']:.1%} over {len(reps)}), "
        f"{run.time_per_request_ms:.3f} ms/request, p99 {run.p99_ms:.1f} ms, {run.failed} failed, "
        f"ab CPU {sum(m.loadgen_cpu_seconds for m in reps):.2f} s in {sum(m.seconds for m in reps):.1f} s"
        f"{cpu_note(run)}")
    return run


def compare_tools(cfg, target: TargetResult, f: dict, c: int, run_dir: Path, allowance: float) -> Comparison | None:
    """ab -k and wrk at the same connection count, repetitions interleaved
    so a drift in the server weighs on both; wrk runs as long as ab -k just did."""
    url = f"{target.url}/files/{f['name']}"
    case = f"{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
    ab_k, wrk = [], []
    try:
        for i in range(1, cfg.repetitions + 1):
            ab_k.append(run_ab(url, cfg.requests, c, run_dir, f"{case}-abk-r{i}", keepalive=True))
            wrk.append(run_wrk(url, c, math.ceil(ab_k[-1].seconds), run_dir, f"{case}-wrk-r{i}"))
    except TimingError as e:
        say(f"{case}: ab -k / wrk failed: {e}")
        return None
    flags = lambda ms: [LOADGEN_BOUND] if any(bound(m, allowance) for m in ms) else []  # noqa: E731
    comparison = Comparison(target.name, f["name"], f["size"], c, ToolResult.of(ab_k, flags(ab_k)),
                            ToolResult.of(wrk, flags(wrk)))
    say(f"{case}: ab -k {comparison.ab_keepalive.rps:.0f} req/s, wrk {comparison.wrk.rps:.0f} req/s "
        f"({comparison.difference:.1%} apart{', DISAGREE' if comparison.disagree else ''})")
    return comparison


def time_target(cfg, target: TargetResult, files: list[dict], run_dir: Path, results: Results,
                monitor: Monitor | None = None, allowance: float = 1.0) -> float:
    """Times every case of a target into results; returns the seconds spent
    on the ab -k / wrk comparison (a phase of its own)."""
    compared = 0.0
    for f in files:
        try:
            run_ab(f"{target.url}/files/{f['name']}", PRIMER_REQUESTS, 1)  # the primer: not counted
        except TimingError as e:
            say(f"{target.name} {f['name']}: primer failed: {e}")
        for c in cfg.concurrency:
            results.runs.append(time_case(cfg, target, f, c, run_dir, monitor, allowance))
            if "wrk" in cfg.tools:
                began = time.monotonic()
                comparison = compare_tools(cfg, target, f, c, run_dir, allowance)
                if comparison:
                    results.comparisons.append(comparison)
                else:
                    results.warnings.append(f"{target.name} {f['name']} c={c}: ab -k / wrk not compared "
                                            "(see bench's log)")
                compared += time.monotonic() - began
    return compared


def sweep_target(cfg, target: TargetResult, files: list[dict], run_dir: Path, allowance: float) -> list[SweepPoint]:
    """One run per level and tool, BENCH_SWEEP_REQUESTS requests (at least one
    per connection); the timed cases before it warmed every path."""
    points = []
    for f in files:
        url = f"{target.url}/files/{f['name']}"
        for c in cfg.sweep:
            name = f"sweep-{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
            try:
                ms = [run_ab(url, max(cfg.sweep_requests, c), c, run_dir, name)]
                if "wrk" in cfg.tools:
                    ms.append(run_wrk(url, c, math.ceil(ms[0].seconds), run_dir, f"{name}-wrk"))
            except TimingError as e:
                say(f"{name}: failed: {e}")
                continue
            for m in ms:
                points.append(SweepPoint(target.name, f["name"], f["size"], c, m.tool, m.requests, m.failed,
                                         m.rps, m.p50_ms, m.p99_ms, round(m.loadgen_cores, 4), m.raw_output,
                                         [LOADGEN_BOUND] if bound(m, allowance) else []))
            say(f"{name}: " + ", ".join(f"{m.tool} {m.rps:.0f} req/s" + (" [loadgen-bound]" if bound(m, allowance)
                                                                         else "") for m in ms))
    return points
