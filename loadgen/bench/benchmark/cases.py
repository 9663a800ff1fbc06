"""Timing: every (target, file, concurrency) case with ab, repetitions
rotating through the targets; ab -k against wrk; latency at a fixed rate;
the concurrency sweep. A target that dies is marked, its remaining cases
failed, and the others go on."""
import math
import time
from dataclasses import asdict
from pathlib import Path

from ..measure import cache_log, rounds as rounds_mod, usage
from ..measure.flags import NONCONFORMING
from ..measure.rounds import BASELINE
from ..measure.bottleneck import bottleneck, link_bound
from ..measure.monitor import HostSampler, Monitor, MonitorError
from ..progress import MEASURED_OVERHEAD_S, OVERHEAD_S, Progress, clock, say, warm_up_seconds
from .quiet import wait_until_quiet
from .schedule import PHASE_REPETITIONS, WINDOW_WARM_UP_S, Schedule, WarmUp, round_order, warm_up
from ..results import (Comparison, OpenLoop, Results, Run, SweepPoint, TargetResult, ToolResult, failed_run,
                      repeated_run, FAILED)
from ..settings import OPEN_LOOP_MAX_S, OPEN_LOOP_REQUESTS, SLOW_CASE_STRETCH
from ..clients.timing import (Measurement, TimingError, ToolTimeout, run_ab, run_vegeta, run_wrk,
                              vegeta_max_workers)
from ..measure.usage import (BEHIND_SCHEDULE, CACHE_MISSED, FEW_ROUNDS, FEW_SAMPLES, LOADGEN_BOUND, ROUNDS_WANTED,
                             tool_bound)
from ..checks.verify import VerificationError, wait_until_healthy

IDLE_WINDOW_S = 2.5  # each container at rest before a round: two of cAdvisor's 1 s readings inside it


def case_name(target: str, file: str, c: int | None = None) -> str:
    return f"{target}-{file.removesuffix('.bin')}" + (f"-c{c}" if c is not None else "")


def case_seconds(cfg, warmup: WarmUp | Measurement | None, concurrency: int) -> float:
    """Each repetition lasts BENCH_DURATION, longer for a slow case (at most
    SLOW_CASE_STRETCH times as long), so that at the warm-up's rate it holds
    BENCH_MIN_REQUESTS requests and ROUNDS_WANTED rounds of the concurrency:
    every client starts at once, so the first answers come after one round,
    and a run of few rounds reads low. A warm-up that completed nothing was
    slower than any rate it could give."""
    if warmup is None or not cfg.min_requests:
        return cfg.duration
    if warmup.requests == 0 or warmup.rps <= 0:
        return cfg.duration * SLOW_CASE_STRETCH
    wanted = max(cfg.min_requests, ROUNDS_WANTED * concurrency)
    return min(max(cfg.duration, math.ceil(wanted / warmup.rps)), cfg.duration * SLOW_CASE_STRETCH)


def tools_in_turn(repetition: int) -> tuple[str, str]:
    """ab -k first in odd repetitions, wrk first in even ones."""
    return ("ab -k", "wrk") if repetition % 2 else ("wrk", "ab -k")


def few_rounds(requests: int, concurrency: int) -> bool:
    """Each client completed fewer than ROUNDS_WANTED requests on average."""
    return requests < ROUNDS_WANTED * concurrency


class Timer:
    """Runs the tools of one bench run against live targets, with a window
    of CPU per run; knows which targets have died and why."""

    def __init__(self, cfg, run_dir: Path, results: Results, monitor: Monitor | None, allowance: float,
                 progress: Progress):
        self.cfg, self.run_dir, self.results, self.monitor = cfg, run_dir, results, monitor
        self.allowance, self.progress = allowance, progress
        self.down: dict[str, str] = {}  # target -> why it stopped answering
        self.idle: dict[str, float] = {}  # role -> cores at rest, measured before the latest round
        self.cache_logs: dict[str, bool] = {}  # target -> it serves GET /cache-log
        # what the link to the paths' host carried before timing (several hosts only)
        self.link_bps: float | None = (results.environment.get("link") or {}).get("bits_per_second")
        # Every phase's order and warm-ups; results.schedule holds the same
        # dicts, so results.json has them as the run goes.
        self.schedule = Schedule(seed=results.run_id, repetitions=min(cfg.repetitions, PHASE_REPETITIONS))
        results.schedule = self.schedule.to_dict()

    def cache_offset(self, target: TargetResult) -> int | None:
        """Where the target's cache log ends now (None: it has none)."""
        if self.cache_logs.get(target.name) is False:
            return None
        try:
            found = cache_log.new_words(target.url, 0)
        except cache_log.CacheLogError as e:
            say(f"{target.name}: cache log not read: {e}")
            found = None
        self.cache_logs[target.name] = found is not None
        return found[1] if found else None

    def cache_counts(self, target: TargetResult, offset: int | None) -> dict | None:
        if offset is None:
            return None
        try:
            found = cache_log.new_words(target.url, offset)
        except cache_log.CacheLogError as e:
            self.results.warnings.append(f"{target.name}: cache hits not counted: {e}")
            return None
        return cache_log.counts(found[0]) if found else None

    # --- one tool run, measured -------------------------------------------
    def measured(self, target: str, run) -> dict:
        """Runs run() (a tool returning a Measurement), once the machine is
        quiet, and returns it as a dict with the CPU, flags and window of the
        interval it ran in."""
        return self.measured_together([target], lambda: [run()])[0]

    def measured_together(self, targets: list[str], run) -> list[dict]:
        """measured() for tools run at the same moment, one per target (run()
        returns their Measurements in the targets' order: an A/B duet): each
        target's CPU is read over the same window as the others'."""
        cpus = set().union(*(self.case_cpus(t) or set() for t in targets)) or None
        waited, quiet = wait_until_quiet(cpus)
        if not quiet:
            self.results.warnings.append(f"{' and '.join(targets)}: a run started on a busy machine (a core of "
                                         f"{sorted(cpus) if cpus else 'the host'} still busy after "
                                         f"{waited:.0f} s of waiting)")
        with HostSampler() as host:
            found = run()
        return [self.window_of(target, m, host.readings, waited, tuple(t for t in targets if t != target))
                for target, m in zip(targets, found)]

    def window_of(self, target: str, m, host: list[usage.HostReading], waited: float,
                  together: tuple[str, ...]) -> dict:
        """One tool run as a dict, with its CPU, flags and window."""
        # over the tool's own run; a tool that gives no times, over the call
        busy = usage.busy_between(host, m.started_ns, m.ended_ns) or \
            (usage.busy_shares(host[0].stat, host[-1].stat) if host else {})
        rep = asdict(m)
        rep["cpu"], rep["flags"], rep["cpu_window"] = None, [], {"busy_shares": busy}
        rep["quiet_wait_s"] = round(waited, 2)
        if tool_bound(m.loadgen_cores, m.threads, self.allowance) or usage.a_worker_bound(m.workers):
            rep["flags"].append(LOADGEN_BOUND)  # the tools' own rusage says so, cAdvisor or not
        if link_bound(m.transfer_kbps * 1024, self.link_bps):
            rep["flags"].append(usage.LINK_BOUND)
        if self.monitor is not None:
            window = usage.WindowInput(m.started_ns, m.ended_ns, m.whole, m.whole_rps, m.loadgen_cores, m.threads,
                                       busy, host, idle=self.idle, completions=m.completions,
                                       whole_share=m.whole / m.requests if m.requests else 1.0)
            try:
                rep["cpu"], found, rep["cpu_window"] = self.monitor.window(target, window, self.allowance,
                                                                           together=together)
                rep["flags"] += [f for f in found if f not in rep["flags"]]
            except MonitorError as e:
                self.results.warnings.append(f"{target}: CPU of one run not measured: {e}")
                say(f"WARNING: {self.results.warnings[-1]}")
        return rep

    def case_cpus(self, target: str) -> set[int] | None:
        """The cores of the case's containers' cpusets (the target's, the
        databases' and bench's); None without cAdvisor: every core."""
        if self.monitor is None:
            return None
        roles = {target, usage.LOADGEN, *self.monitor.databases}
        return {c for role in roles for c in self.monitor.cpusets.get(role, ())} or None

    def measure_idle(self, targets: list[TargetResult]) -> None:
        """Every watched container's cores at rest, bench running nothing,
        once the case's cores are quiet: what CPU per request is net of
        (cpu_ms_per_request_net) in the round that follows."""
        if self.monitor is None:
            return
        cpus = set().union(*(self.case_cpus(t.name) or set() for t in targets)) or None
        wait_until_quiet(cpus)
        start = time.time_ns()
        time.sleep(IDLE_WINDOW_S)
        try:
            self.idle = self.monitor.idle(start, time.time_ns())
        except MonitorError as e:
            self.idle = {}
            self.results.warnings.append(f"idle CPU before a round not measured: {e}")

    def health(self, target: TargetResult) -> None:
        """Before a round and after a failed run: is the target still there?
        If not, it is down for the rest of the run, with the reason."""
        try:
            wait_until_healthy(target.url, time.monotonic() + 3)
        except (VerificationError, OSError) as e:
            self.down[target.name] = f"target stopped answering: {e}"
            say(f"{target.name}: DOWN, its remaining cases are marked failed: {e}")

    # --- a round: one (file, concurrency) across every target ---------------
    def warm(self, phase: str, target: str, concurrency: int, window) -> WarmUp | None:
        """The schedule's warm-up of one target before one case (None when
        BENCH_WARMUP is 0): window(seconds) -> (requests, req/s)."""
        if not self.cfg.warmup:
            return None
        warm = warm_up(window, concurrency, self.cfg.warmup)
        self.schedule.record_warm_up(phase, target, warm)
        self.progress.advance(warm_up_seconds(self.cfg))
        return warm

    def round(self, targets: list[TargetResult], f: dict, c: int) -> list[Run]:
        """One case's rounds (BENCH_REPETITIONS of them, none judged for width)."""
        return self.rounds(targets, [(f, c)])

    def rounds(self, targets: list[TargetResult], cases: list[tuple[dict, int]], headline: int | None = None,
               deadline: float | None = None) -> list[Run]:
        """Rounds of every case: in each, every path once, in a fresh order
        drawn from the run's seed, each counted window after its own short
        warm-up, so the machine's swing within a round falls on a path and
        the baseline alike and each round gives a paired ratio
        (bench.measure.rounds). A case at the `headline` concurrency goes on
        past BENCH_REPETITIONS rounds while a path's interval is wider than
        BENCH_TARGET_WIDTH, that path leaving once it is narrow (the
        baseline stays), until `deadline` (monotonic) would pass. After
        every round results.json holds the rounds so far: nothing measured
        is lost; the runs are returned at the end (the caller adds them)."""
        live = [t for t in targets if t.name not in self.down]
        kept = list(self.results.runs)
        state = [CaseRounds(f, c, f"{f['name']} c={c}", c == headline) for f, c in cases]
        for case in state:  # the first round's settling warm-up sizes each path's windows
            self.measure_idle(live)
            case.settle(self, targets)
        count = 0
        while True:
            count += 1
            began = time.monotonic()
            self.measure_idle([t for t in targets if t.name not in self.down])
            for case in state:
                case.round(self, targets, count)
            for case in state:
                case.judge(self.cfg, count)
            still_open = any(case.open(self, targets) for case in state)
            took = time.monotonic() - began
            stopped = stop_reason(self.cfg, still_open, count, took, deadline)
            if count == 1 and not stopped:
                say(rounds_outlook(self.cfg, took, deadline))
            if stopped:
                break
            self.results.runs = kept + [r for case in state for r in case.runs(self, targets, final=False)]
            self.results.rounds = rounds_record(self.cfg, state, count, "running", self.results.rounds)
            self.results.write_json(self.run_dir / "results.json")
        self.results.runs = kept
        self.results.rounds = rounds_record(self.cfg, state, count, stopped, self.results.rounds)
        say(f"rounds: {count} ({stopped})")
        return [r for case in state for r in case.runs(self, targets)]

    def compare_round(self, targets: list[TargetResult], f: dict, c: int,
                      repetitions: int | None = None) -> list[Comparison]:
        """ab -k and wrk at the same connection count and duration, their
        repetitions interleaved, the targets in the schedule's order. Each
        pair starts after the schedule's warm-up with wrk on the path, not
        counted, and which tool goes first alternates by repetition: the
        first run on node after the other paths' turns was 20-25% slower than
        the second, in either order (run 20261125T141036Z)."""
        by_name = {t.name: t for t in targets}
        reps: dict[str, dict[str, list[dict]]] = {t.name: {"ab -k": [], "wrk": []} for t in targets}
        failed: set[str] = set()

        def pair(name: str, i: int) -> None:
            t = by_name[name]
            case = case_name(name, f["name"], c)
            seconds = self.case_duration(name, f["name"], c)
            runs = {
                "ab -k": lambda: run_ab(self.url(t, f), seconds, c, self.run_dir, f"{case}-abk-r{i}",
                                        keepalive=True, expected_size=f["size"], workers=self.cfg.loadgens),
                "wrk": lambda: run_wrk(self.url(t, f), c, seconds, self.run_dir, f"{case}-wrk-r{i}"),
            }
            try:
                self.warm(f"{f['name']} c={c} ab -k / wrk r={i}", name, c,
                          lambda s: run_wrk(self.url(t, f), c, s))
                for tool in tools_in_turn(i):
                    reps[name][tool].append(self.measured(name, runs[tool]))
                    self.results.order.append(f"{name} {f['name']} c={c} {tool} r={i}")
            except TimingError as e:
                failed.add(name)
                self.results.warnings.append(f"{case}: ab -k / wrk not compared: {e}")
                say(f"{case}: ab -k / wrk FAILED: {e}")
                self.health(t)
            self.progress.advance(2 * (self.cfg.duration + MEASURED_OVERHEAD_S))
            self.progress.report(f"{case} ab -k / wrk r{i} done")

        self.schedule.repeat(f"{f['name']} c={c} ab -k / wrk", [t.name for t in targets], pair,
                             skip=lambda name: name in self.down or name in failed, repetitions=repetitions)
        comparisons = []
        for t in targets:
            if t.name in failed or t.name in self.down or not reps[t.name]["wrk"]:
                continue
            tools = [ToolResult.of(rs, [LOADGEN_BOUND] if any(LOADGEN_BOUND in r["flags"] for r in rs) else [])
                     for rs in (reps[t.name]["ab -k"], reps[t.name]["wrk"])]
            comparison = Comparison(t.name, f["name"], f["size"], c, *tools)
            comparisons.append(comparison)
            say(f"{case_name(t.name, f['name'], c)}: ab -k {tools[0].rps:.0f} req/s, wrk {tools[1].rps:.0f} req/s "
                f"({comparison.difference:.1%} apart{', DISAGREE' if comparison.disagree else ''})")
        return comparisons

    def open_loop(self, target: TargetResult, f: dict, share: float | None = None) -> OpenLoop | None:
        """vegeta at a share (BENCH_OPEN_LOOP's headline one unless given) of
        the case's keep-alive capacity, until OPEN_LOOP_REQUESTS requests or
        OPEN_LOOP_MAX_S seconds."""
        found = open_loop_capacity(self.results, target.name, f["name"])
        if found is None:
            return None
        capacity, capacity_from = found
        share = share or self.cfg.open_loop
        rate = share * capacity
        rate = float(round(rate)) if rate >= 1 else 1 / round(1 / max(rate, 0.01))  # what vegeta can be asked
        seconds = open_loop_seconds(rate, self.cfg.open_loop_max_s)
        name = f"{case_name(target.name, f['name'])}-rate" + ("" if share == self.cfg.open_loop
                                                              else f"-{share * 100:g}pct")
        result = OpenLoop(target.name, f["name"], f["size"], rate, capacity=round(capacity, 1),
                          capacity_from=capacity_from, seconds=seconds, max_workers=vegeta_max_workers(rate),
                          share=share)
        if target.name in self.down:
            result.status, result.error = FAILED, self.down[target.name]
            return result
        def attack():
            return run_vegeta(self.url(target, f), rate, seconds, self.run_dir, name)

        try:
            try:
                rep = self.measured(target.name, attack)
            except ToolTimeout as e:
                # once in a full run vegeta hung on a path that answered every other
                # run, and would not again: one more try, on the record
                self.results.warnings.append(f"{name}: tried again: {e}")
                say(f"{name}: {e}; trying once more")
                rep = self.measured(target.name, attack)
        except TimingError as e:
            result.status, result.error = FAILED, str(e)
            say(f"{name}: FAILED: {e}")
            self.health(target)
            return result
        finally:
            self.progress.advance(self.cfg.open_loop_max_s + OVERHEAD_S)  # as planned
        open_loop_figures(result, rep)
        say(f"{name}: {rate:g} req/s asked ({share:.0%} of {capacity_from}), {result.sent_rate:g} "
            f"sent, {result.requests} requests, p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, "
            f"p99.9 {result.p999_ms:.2f} ms, {result.failed} failed" + (f" [{', '.join(result.flags)}]"
                                                                       if result.flags else ""))
        return result

    def sweep(self, target: TargetResult, files: list[dict]) -> list[SweepPoint]:
        """One run per level and tool, BENCH_SWEEP_DURATION seconds each; the
        timed cases before it warmed every path."""
        points = []
        for f in files:
            for c in self.cfg.sweep:
                name = f"sweep-{case_name(target.name, f['name'], c)}"
                if target.name in self.down:
                    break
                try:
                    ms = [run_ab(self.url(target, f), self.cfg.sweep_duration, c, self.run_dir, name,
                                 expected_size=f["size"], workers=self.cfg.loadgens)]
                    if "wrk" in self.cfg.tools:
                        ms.append(run_wrk(self.url(target, f), c, self.cfg.sweep_duration, self.run_dir,
                                          f"{name}-wrk"))
                except TimingError as e:
                    say(f"{name}: failed: {e}")
                    self.health(target)
                    continue
                finally:
                    self.progress.advance(len(self.cfg.tools) * (self.cfg.sweep_duration + OVERHEAD_S))
                for m in ms:
                    bound = tool_bound(m.loadgen_cores, m.threads, self.allowance)
                    flags = ([LOADGEN_BOUND] if bound else []) + ([usage.REFUSED] if m.refused else [])
                    points.append(SweepPoint(target.name, f["name"], f["size"], c, m.tool, m.requests, m.failed,
                                             m.rps, m.p50_ms, m.p99_ms, round(m.loadgen_cores, 4), m.raw_output,
                                             flags, refused=m.refused))
                say(f"{name}: " + ", ".join(f"{m.tool} {m.rps:.0f} req/s" for m in ms))
                self.progress.report(f"{name} done")
        return points

    # ---------------------------------------------------------------------
    def url(self, target: TargetResult, f: dict) -> str:
        return f"{target.url}/files/{f['name']}"

    def case_duration(self, target: str, file: str, c: int) -> float:
        run = self.results.run_for(target, file, c)
        return (run.duration_s if run and run.duration_s else self.cfg.duration)


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


class CaseRounds:
    """One case (file, concurrency) across its rounds: each path's window
    length, counted windows, failure, and (headline cases) when its interval
    first met the width."""

    def __init__(self, f: dict, c: int, phase: str, headline: bool):
        self.f, self.c, self.phase, self.headline = f, c, phase, headline
        self.seconds: dict[str, float] = {}
        self.reps: dict[str, list[dict]] = {}
        self.errors: dict[str, str] = {}
        self.offsets: dict[str, int | None] = {}
        self.converged_at: dict[str, int] = {}
        self.done: set[str] = set()  # paths whose rounds are over (converged, or the fixed count reached)
        self.ratios: dict[str, dict] = {}

    def settle(self, timer: "Timer", targets: list[TargetResult]) -> None:
        for t in targets:
            self.reps.setdefault(t.name, [])
            if t.name not in timer.down:
                timer.health(t)  # a dead target is found here, not by a tool waiting on it
            if t.name in timer.down:
                continue
            try:
                warm = timer.warm(self.phase, t.name, self.c,
                                  lambda s, t=t: run_ab(timer.url(t, self.f), s, self.c, expected_size=self.f["size"],
                                                        need_answers=False, workers=timer.cfg.loadgens))
                self.seconds[t.name] = case_seconds(timer.cfg, warm, self.c)
            except TimingError as e:
                self.errors[t.name] = f"warm-up failed: {e}"
                timer.health(t)
        # a caching path's log, from after its warm-up: the counted requests only
        self.offsets = {t.name: timer.cache_offset(t) for t in targets
                        if t.name not in timer.down and t.name not in self.errors}

    def taking_part(self, timer: "Timer", targets: list[TargetResult]) -> list[str]:
        """This round's paths: every live one not done, with the baseline
        while any other still runs (alone when it is the only path)."""
        alive = [t.name for t in targets if t.name not in timer.down and t.name not in self.errors]
        if BASELINE not in alive or alive == [BASELINE]:
            return [n for n in alive if n not in self.done]
        others = [n for n in alive if n != BASELINE and n not in self.done]
        return [BASELINE, *others] if others else []

    def round(self, timer: "Timer", targets: list[TargetResult], count: int) -> None:
        names = self.taking_part(timer, targets)
        if not names:
            return
        order = round_order(names, f"{timer.schedule.seed}:{self.phase}", count)
        timer.schedule.orders.setdefault(self.phase, []).append(order)
        by_name = {t.name: t for t in targets}
        for name in order:
            if name in timer.down or name in self.errors:
                continue
            t = by_name[name]
            case = f"{case_name(name, self.f['name'], self.c)}-r{count}"
            url = timer.url(t, self.f)
            try:
                # each window after its own short warm-up: a path's first
                # seconds after another's turn run 20-25% slow
                if timer.cfg.warmup:
                    run_ab(url, WINDOW_WARM_UP_S, self.c, expected_size=self.f["size"], need_answers=False,
                           workers=timer.cfg.loadgens)
                rep = timer.measured(name, lambda: run_ab(url, self.seconds[name], self.c, timer.run_dir, case,
                                                          expected_size=self.f["size"], workers=timer.cfg.loadgens))
                rep["round"] = count
                self.reps[name].append(rep)
                timer.results.order.append(f"{name} {self.f['name']} c={self.c} r={count}")
            except TimingError as e:
                self.errors[name] = f"round {count}: {e}"
                say(f"{case}: FAILED: {e}")
                timer.health(t)
            timer.progress.advance(self.seconds.get(name, timer.cfg.duration) + MEASURED_OVERHEAD_S
                                   + (WINDOW_WARM_UP_S if timer.cfg.warmup else 0))
            timer.progress.report(f"{case} done")

    def judge(self, cfg, count: int) -> None:
        """After a round: each path's ratios so far; which paths are done."""
        base = self.reps.get(BASELINE) or []
        for name, reps in self.reps.items():
            if name == BASELINE or not base:
                continue
            found = rounds_mod.ratios(reps, base, name, BASELINE, rounds_mod.QUANTILE_LEVEL)
            if (self.headline and cfg.target_width and name not in self.converged_at
                    and len(reps) >= max(cfg.repetitions, rounds_mod.MIN_ROUNDS)
                    and rounds_mod.converged(found, cfg.target_width)):
                self.converged_at[name] = count
            if name not in self.converged_at:  # not stopped on its width (so far): the plain 95% quantile
                found = rounds_mod.ratios(reps, base, name, BASELINE)
            self.ratios[name] = {m: r.to_dict() for m, r in found.items()}
        fixed = not (self.headline and cfg.target_width and base and set(self.reps) - {BASELINE})
        for name, reps in self.reps.items():  # done: only a path counted in this round (a dead one never is)
            if reps and reps[-1]["round"] == count and ((fixed and count >= cfg.repetitions)
                                                        or name in self.converged_at):
                self.done.add(name)

    def open(self, timer: "Timer", targets: list[TargetResult]) -> bool:
        """Another round would time a path."""
        return bool(self.taking_part(timer, targets))

    def runs(self, timer: "Timer", targets: list[TargetResult], final: bool = True) -> list[Run]:
        """The case's Run per path; `final`: the last word (the cache log
        read, a line said), else the rounds so far, for results.json. A path
        that stopped answering fails the cases it had rounds left in."""
        f, c, runs = self.f, self.c, []
        for t in targets:
            reps = self.reps.get(t.name) or []
            why = self.errors.get(t.name) or (timer.down.get(t.name) if t.name not in self.done else None)
            if why is not None or not reps:
                runs.append(failed_run(t.name, f["name"], f["size"], c, why or "not run", reps))
                continue
            run = repeated_run(t.name, f["name"], f["size"], c, reps, self.seconds.get(t.name))
            if t.conforming is False:
                run.flags.append(NONCONFORMING)
            if few_rounds(run.requests, c):
                run.flags.append(FEW_ROUNDS)
            if final:
                run.cache = timer.cache_counts(t, self.offsets.get(t.name))
                if run.cache and (run.cache["hit_ratio"] or 0) < cache_log.HIT_RATIO_WANTED:
                    run.flags.append(CACHE_MISSED)
                say(describe(run))
            runs.append(run)
        return runs


def stop_reason(cfg, still_open: bool, count: int, last_round_s: float, deadline: float | None) -> str:
    """Why the rounds end after round `count` ("" while they go on): no path
    left to time, MAX_ROUNDS, or the budget, which another round as long as
    the last would pass."""
    if not still_open:
        return "every interval within the width" if cfg.target_width else "fixed count"
    if count >= rounds_mod.MAX_ROUNDS:
        return f"at most {rounds_mod.MAX_ROUNDS} rounds"
    if deadline is not None and time.monotonic() + last_round_s > deadline:
        return "budget"
    return ""


def rounds_outlook(cfg, took: float, deadline: float | None) -> str:
    """After the first round: how many more fit, and when the rounds end."""
    wanted = max(cfg.repetitions, rounds_mod.MIN_ROUNDS if cfg.target_width else 1) - 1
    if deadline is None:
        return f"round 1 took {clock(took)}: about {clock(wanted * took)} more for {wanted} more rounds"
    fit = max(0, int((deadline - time.monotonic()) // took)) if took > 0 else 0
    words = (f"round 1 took {clock(took)}: {fit} more fit the budget, so the rounds end within about "
             f"{clock(min(fit, rounds_mod.MAX_ROUNDS - 1) * took)}")
    if cfg.target_width:
        words += f" (sooner once every ratio is within x/÷{cfg.target_width:g}; rounds then shorten as paths leave)"
    if fit < wanted:
        words += f"; WARNING: fewer than the {wanted + 1} rounds an interval needs"
    return words


def rounds_record(cfg, cases: list[CaseRounds], count: int, stopped: str, earlier: dict) -> dict:
    # earlier: a previous call's record (a test's second round); its other cases' rows are kept
    """results.rounds: how the rounds ran and every path's ratios."""
    rows = [r for r in earlier.get("rows") or [] if (r["file"], r["concurrency"]) not in
            {(c.f["name"], c.c) for c in cases}]
    for case in cases:
        for name, found in case.ratios.items():
            rows.append({"target": name, "file": case.f["name"], "concurrency": case.c, "headline": case.headline,
                         "rounds": len(case.reps.get(name) or []), "converged_at": case.converged_at.get(name),
                         **found})
    return {"design": "shuffled rounds",
            "estimator": "geometric mean of the rounds' ratios, 95% t interval (the 96% quantile where a row "
                         "stopped on its width)",
            "baseline": BASELINE, "min_rounds": max(cfg.repetitions, rounds_mod.MIN_ROUNDS),
            "target_width": cfg.target_width, "quantile_level": rounds_mod.QUANTILE_LEVEL,
            "rounds": count,
            "stopped": stopped, "rows": rows}



def describe(run: Run) -> str:
    if not run.ok:
        return f"{case_name(run.target, run.file, run.concurrency)}: FAILED: {run.error}"
    note = ""
    if run.cpu and run.target in run.cpu and run.cpu[run.target].get("cpu_ms_per_request") is not None:
        note = f"; CPU ms/request {run.target} {run.cpu[run.target]['cpu_ms_per_request']:.3f}"
        note += "".join(f" {role} {u['cpu_ms_per_request']:.3f}" for role, u in run.cpu.items()
                        if role != run.target and u.get("cpu_ms_per_request") is not None)
    spread = f" ±{run.spread['half_range']:.1%}" if run.spread and len(run.repetitions) > 1 else ""
    if run.cache:
        note += f"; cache hit ratio {run.cache['hit_ratio']}"
    if run.refused:
        note += f"; {run.refused} of {run.answers} answers not 2xx ({run.refused_share:.0%}: shed)"
    return (f"{case_name(run.target, run.file, run.concurrency)}: {run.rps:.0f} req/s{spread} over "
            f"{len(run.repetitions)} x {run.duration_s or 0:.1f} s, p99 {run.p99_ms:.1f} ms{note}"
            + (f" [{', '.join(run.flags)}]" if run.flags else ""))
