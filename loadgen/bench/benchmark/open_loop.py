"""Open loop ("open loop"): latency at a fixed request rate (vegeta), a
share of each case's keep-alive capacity, so p99 is response time, not
queueing in a saturated server; with BENCH_OPEN_LOOP_CURVE, at several
shares."""
import math

from ..measure import usage
from ..measure.bottleneck import bottleneck
from ..measure.usage import BEHIND_SCHEDULE, FEW_SAMPLES
from ..progress import say
from ..results import FAILED, OpenLoop, Results, TargetResult
from ..settings import OPEN_LOOP_MAX_S, OPEN_LOOP_REQUESTS
from ..clients.timing import TimingError, ToolTimeout, run_vegeta, vegeta_max_workers
from .cases import Timer, case_name
from .costs import OVERHEAD_S
from .phase import Phase, PhaseRun, Scope


class OpenLoopLatency(Phase):
    """Every path and file at the headline's share, then a curve's other
    shares."""
    name = "open loop"

    def enabled(self, cfg, scope: Scope) -> bool:
        return bool(cfg.open_loop)

    def planned_seconds(self, cfg, scope: Scope) -> float:
        """Each point at most BENCH_OPEN_LOOP_SECONDS."""
        per_case = (cfg.open_loop_max_s + OVERHEAD_S) * max(len(cfg.open_loop_curve), 1)
        return len(scope.targets) * len(scope.files) * per_case

    def run(self, run: PhaseRun) -> None:
        cfg = run.cfg
        # the headline's share first; a curve's other shares after it, lightest load first
        shares = [cfg.open_loop] + [s for s in cfg.open_loop_curve if s != cfg.open_loop]
        for f in run.scope.files:
            run.results.open_loop += [o for share in shares
                                      for o in (time_open_loop(run.timer, t, f, share) for t in run.scope.targets)
                                      if o is not None]


def time_open_loop(timer: Timer, target: TargetResult, f: dict, share: float | None = None) -> OpenLoop | None:
    """vegeta at a share (BENCH_OPEN_LOOP's headline one unless given) of
    the case's keep-alive capacity, until OPEN_LOOP_REQUESTS requests or
    OPEN_LOOP_MAX_S seconds."""
    found = open_loop_capacity(timer.results, target.name, f["name"])
    if found is None:
        return None
    capacity, capacity_from = found
    share = share or timer.cfg.open_loop
    rate = share * capacity
    rate = float(round(rate)) if rate >= 1 else 1 / round(1 / max(rate, 0.01))  # what vegeta can be asked
    seconds = open_loop_seconds(rate, timer.cfg.open_loop_max_s)
    name = f"{case_name(target.name, f['name'])}-rate" + ("" if share == timer.cfg.open_loop
                                                          else f"-{share * 100:g}pct")
    result = OpenLoop(target.name, f["name"], f["size"], rate, capacity=round(capacity, 1),
                      capacity_from=capacity_from, seconds=seconds, max_workers=vegeta_max_workers(rate),
                      share=share)
    if target.name in timer.down:
        result.status, result.error = FAILED, timer.down[target.name]
        return result
    def attack():
        return run_vegeta(timer.url(target, f), rate, seconds, timer.run_dir, name)

    try:
        try:
            rep = timer.measured(target.name, attack)
        except ToolTimeout as e:
            # once in a full run vegeta hung on a path that answered every other
            # run, and would not again: one more try, on the record
            timer.results.warnings.append(f"{name}: tried again: {e}")
            say(f"{name}: {e}; trying once more")
            rep = timer.measured(target.name, attack)
    except TimingError as e:
        result.status, result.error = FAILED, str(e)
        say(f"{name}: FAILED: {e}")
        timer.health(target)
        return result
    finally:
        timer.progress.advance(timer.cfg.open_loop_max_s + OVERHEAD_S)  # as planned
    open_loop_figures(result, rep)
    say(f"{name}: {rate:g} req/s asked ({share:.0%} of {capacity_from}), {result.sent_rate:g} "
        f"sent, {result.requests} requests, p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
        f"p99.9 {result.p999_ms:.2f} ms, {result.failed} failed" + (f" [{', '.join(result.flags)}]"
                                                                   if result.flags else ""))
    return result


def open_loop_capacity(results: Results, target: str, file: str) -> tuple[float, str] | None:
    """The rate an open-loop run takes its share of, and where it came from:
    the faster tool of the ab -k / wrk comparison (keep-alive, as vegeta
    is), else the best ab rate (a connection per request: lower than what
    keep-alive connections can take, so the share asked is lighter)."""
    compared = [c for c in results.comparisons if (c.target, c.file) == (target, file)]
    tools = [(t.rps, f"{t.tool} at c={c.concurrency}") for c in compared for t in (c.ab_keepalive, c.wrk)
             if t.rps > 0 and not t.failed]
    if tools:
        return max(tools)
    ok = [r for r in results.runs if (r.target, r.file) == (target, file) and r.ok]
    if not ok:
        return None
    best = max(ok, key=lambda r: r.rps)
    return best.rps, f"ab at c={best.concurrency} (no keep-alive)"


def open_loop_seconds(rate: float, max_s: float = OPEN_LOOP_MAX_S) -> float:
    """Long enough for OPEN_LOOP_REQUESTS requests at `rate`, at most max_s
    (BENCH_OPEN_LOOP_SECONDS), in whole milliseconds. vegeta sends its k-th
    request at k / rate and stops once past the duration: half an interval
    more keeps a late timer from dropping the last one."""
    return min(max_s, math.ceil((OPEN_LOOP_REQUESTS + 0.5) / rate * 1000) / 1000)


def open_loop_figures(result: OpenLoop, rep: dict) -> OpenLoop:
    """Fills an OpenLoop from its vegeta run (a measured Measurement dict)
    and flags what the figures cannot be trusted for. Kept its schedule:
    vegeta's own sending rate, first to last request sent, so a slow last
    answer after the schedule ended does not read as falling behind."""
    latency = rep.get("latency") or {}
    result.sent_rate = round(rep["sent_rate"], 3) if rep.get("sent_rate") is not None else 0.0
    result.requests, result.failed = rep["requests"], rep["failed"]
    result.refused, result.status_codes = rep.get("refused") or 0, rep.get("status_codes")
    result.p50_ms, result.p90_ms, result.p99_ms, result.max_ms = (rep[k] for k in ("p50_ms", "p90_ms", "p99_ms",
                                                                                     "max_ms"))
    result.p999_ms = latency.get("p999_ms", 0.0)
    result.p99_interval_ms = latency.get("p99_interval_ms")
    result.latency_histogram = latency.get("histogram", [])
    result.raw_output = rep["raw_output"]
    result.flags = [f for f in rep["flags"] if f != usage.SHORT_WINDOW]
    if usage.behind_schedule(result.rate, result.sent_rate):
        result.flags.append(BEHIND_SCHEDULE)  # out of workers or CPU: the requests' waits went unrecorded
    if result.requests < OPEN_LOOP_REQUESTS:
        result.flags.append(FEW_SAMPLES)
    if result.refused:
        result.flags.append(usage.REFUSED)
    result.bottleneck = bottleneck(result.flags, rep.get("cpu"), result.target)
    if result.failed:
        result.status, result.error = FAILED, f"{result.failed} of {result.requests} requests failed"
    elif result.requests and result.refused == result.requests:
        codes = ", ".join(f"{n} x {code}" for code, n in (result.status_codes or {}).items())
        result.status, result.error = FAILED, f"every answer of {result.requests} was refused ({codes})"
    return result
