"""The Timer every phase of a run times with (closed_loop, tool_check,
open_loop, sweep, working_set, writes): one tool run at a time, on a quiet
machine, with the CPU, flags and window of the interval it ran in; the
targets that died and why (their remaining cases failed, the others go
on); the schedule's warm-ups and orders."""
import math
import time
from dataclasses import asdict
from pathlib import Path

from ..measure import cache_log, usage
from ..measure.bottleneck import link_bound
from ..measure.cgroup_cpu import between
from ..measure.monitor import HostSampler, Monitor, MonitorError
from ..progress import Progress, say
from .costs import warm_up_seconds
from .quiet import wait_until_quiet
from .schedule import PHASE_REPETITIONS, Schedule, WarmUp, warm_up
from ..results import Results, TargetResult
from ..settings import SLOW_CASE_STRETCH
from ..clients.timing import Measurement
from ..measure.usage import LOADGEN_BOUND, ROUNDS_WANTED, tool_bound
from ..checks.verify import VerificationError, wait_until_healthy

IDLE_WINDOW_S = 2.5  # each container at rest before a round: two of cAdvisor's 1 s readings inside it


def case_name(target: str, file: str, c: int | None = None) -> str:
    return f"{target}-{file.removesuffix('.bin')}" + (f"-c{c}" if c is not None else "")


def case_seconds(cfg, warmup: WarmUp | Measurement | None, concurrency: int,
                 stretch: int = SLOW_CASE_STRETCH) -> float:
    """Each repetition lasts BENCH_DURATION, longer for a slow case (at most
    `stretch` times as long), so that at the warm-up's rate it holds
    BENCH_MIN_REQUESTS requests and ROUNDS_WANTED rounds of the concurrency:
    every client starts at once, so the first answers come after one round,
    and a run of few rounds reads low. A warm-up that completed nothing was
    slower than any rate it could give."""
    if warmup is None or not cfg.min_requests:
        return cfg.duration
    if warmup.requests == 0 or warmup.rps <= 0:
        return cfg.duration * stretch
    wanted = max(cfg.min_requests, ROUNDS_WANTED * concurrency)
    return min(max(cfg.duration, math.ceil(wanted / warmup.rps)), cfg.duration * stretch)


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
    def measured(self, target: str, run, read_cpu: tuple[str, ...] = ()) -> dict:
        """Runs run() (a tool returning a Measurement), once the machine is
        quiet, and returns it as a dict with the CPU, flags and window of the
        interval it ran in."""
        return self.measured_together([target], lambda: [run()], read_cpu)[0]

    def measured_together(self, targets: list[str], run, read_cpu: tuple[str, ...] = ()) -> list[dict]:
        """measured() for tools run at the same moment, one per target (run()
        returns their Measurements in the targets' order: an A/B duet): each
        target's CPU is read over the same window as the others'. The CPU
        counters of `read_cpu` (roles) bench reads itself just before run()
        and just after it, where it can (Monitor.find_counters)."""
        cpus = set().union(*(self.case_cpus(t) or set() for t in targets)) or None
        waited, quiet = wait_until_quiet(cpus)
        if not quiet:
            self.results.warnings.append(f"{' and '.join(targets)}: a run started on a busy machine (a core of "
                                         f"{sorted(cpus) if cpus else 'the host'} still busy after "
                                         f"{waited:.0f} s of waiting)")
        read = self.monitor.read_counters if self.monitor is not None and read_cpu else lambda roles: {}
        with HostSampler() as host:
            before = read(read_cpu)
            found = run()
            counters = between(before, read(read_cpu))
        return [self.window_of(target, m, host.readings, waited, tuple(t for t in targets if t != target), counters)
                for target, m in zip(targets, found)]

    def window_of(self, target: str, m, host: list[usage.HostReading], waited: float,
                  together: tuple[str, ...], counters: dict[str, tuple[int, int]] | None = None) -> dict:
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
                                       whole_share=m.whole / m.requests if m.requests else 1.0,
                                       counters=counters or {})
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

    # --- a warm-up ---------------------------------------------------------
    def warm(self, phase: str, target: str, concurrency: int, window) -> WarmUp | None:
        """The schedule's warm-up of one target before one case (None when
        BENCH_WARMUP is 0): window(seconds) -> (requests, req/s)."""
        if not self.cfg.warmup:
            return None
        warm = warm_up(window, concurrency, self.cfg.warmup)
        self.schedule.record_warm_up(phase, target, warm)
        self.progress.advance(warm_up_seconds(self.cfg))
        return warm

    # ---------------------------------------------------------------------
    def url(self, target: TargetResult, f: dict) -> str:
        return f"{target.url}/files/{f['name']}"

    def case_duration(self, target: str, file: str, c: int) -> float:
        run = self.results.run_for(target, file, c)
        return (run.duration_s if run and run.duration_s else self.cfg.duration)
