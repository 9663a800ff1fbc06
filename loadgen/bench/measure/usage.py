"""CPU and memory one timed repetition cost each container, from cAdvisor's
cumulative counters, and the flags that say how far to trust the row. Pure:
bench.measure.monitor reads, this computes.

The window is the timed interval itself: of each container's stats entries
(about one a second), the first and last stamped inside the tool's run, so
no idle edge dilutes the rate. A run too short to hold two entries falls back
to the entries just outside it, and is flagged short-window. Where bench
read a container's counter itself at the run's edges (an A/B's twins:
bench.measure.cgroup_cpu), its CPU is that, over exactly the run."""
import math
from dataclasses import dataclass, field

from .cadvisor import Counters
from .flags import (BEHIND_SCHEDULE, CACHE_MISSED, CORE_SATURATED, CORE_SATURATED_SHARE, DISTURBED,  # noqa: F401
                    DISTURBED_CORES, FEW_ROUNDS, FEW_SAMPLES, LINK_BOUND, LOADGEN_BOUND, LOADGEN_BOUND_SHARE, REFUSED,
                    ROUNDS_WANTED, SENT_RATE_KEPT, SHORT_WINDOW, THROTTLED)

LOADGEN = "bench"                 # the role of the load generator's own container
ACTIVE_CORES = 0.05  # a container using more than this share of a core over a window took part in it

# /proc/stat "cpu" columns that are work done here, not waiting: of user nice
# system idle iowait irq softirq steal (guest time is already inside user),
# not steal either: the hypervisor ran another machine then, which no cgroup
# of this one can count (a VM with ~5% steal under load read 6% more busy
# than cAdvisor's machine total).
_BUSY_COLUMNS = (0, 1, 2, 5, 6)
_ALL_COLUMNS = 8


@dataclass(frozen=True)
class ProcStat:
    """/proc/stat at one moment: busy and total ticks of the whole host and
    of each CPU (a container sees them host-wide on cgroup v1 and v2 alike)."""
    busy: dict[str, int]    # "cpu" (all) and "cpu0", "cpu1", ...
    total: dict[str, int]


def parse_proc_stat(text: str) -> ProcStat:
    busy, total = {}, {}
    for line in text.splitlines():
        words = line.split()
        if words and words[0].startswith("cpu"):
            values = [int(v) for v in words[1:]]
            busy[words[0]] = sum(values[i] for i in _BUSY_COLUMNS if i < len(values))
            total[words[0]] = sum(values[:_ALL_COLUMNS])
    if "cpu" not in busy:
        raise ValueError("/proc/stat has no aggregate 'cpu' line")
    return ProcStat(busy, total)


@dataclass(frozen=True)
class HostReading:
    """/proc/stat read at one moment (time.time_ns(), cAdvisor's clock too)."""
    timestamp_ns: int
    stat: ProcStat


def host_at(readings: list[HostReading], at_ns: int) -> ProcStat | None:
    """/proc/stat's counters at `at_ns`, interpolated between the readings on
    either side of it (None outside them): a host figure over exactly the
    stretch another counter (cAdvisor's) covers, not over the run's edges."""
    before = [r for r in readings if r.timestamp_ns <= at_ns]
    after = [r for r in readings if r.timestamp_ns >= at_ns]
    if not before or not after:
        return None
    a = max(before, key=lambda r: r.timestamp_ns)
    b = min(after, key=lambda r: r.timestamp_ns)
    if b.timestamp_ns == a.timestamp_ns:
        return a.stat
    f = (at_ns - a.timestamp_ns) / (b.timestamp_ns - a.timestamp_ns)

    def between(x: dict[str, int], y: dict[str, int]) -> dict[str, int]:
        return {cpu: round(x[cpu] + f * (y[cpu] - x[cpu])) for cpu in y if cpu in x}
    return ProcStat(between(a.stat.busy, b.stat.busy), between(a.stat.total, b.stat.total))


def busy_between(readings: list[HostReading], start_ns: int, end_ns: int) -> dict[str, float]:
    """busy_shares over [start_ns, end_ns] ({} where the readings do not span it)."""
    start, end = host_at(readings, start_ns), host_at(readings, end_ns)
    return busy_shares(start, end) if start and end else {}


def host_busy_seconds(proc_stat: str, ticks_per_second: int = 100) -> float:
    """Busy CPU seconds of the whole host, all cores, from /proc/stat."""
    return parse_proc_stat(proc_stat).busy["cpu"] / ticks_per_second


def busy_shares(start: ProcStat, end: ProcStat) -> dict[str, float]:
    """Share of the time each CPU ("cpu0", ...) and the host ("cpu", over all
    CPUs) was busy between two readings."""
    shares = {}
    for cpu, total in end.total.items():
        elapsed = total - start.total.get(cpu, total)
        if elapsed > 0:
            shares[cpu] = round((end.busy[cpu] - start.busy.get(cpu, 0)) / elapsed, 4)
    return shares


def peak_memory_bytes(first: Counters, last: Counters, samples: list[Counters]) -> int:
    """cgroup v1's max_usage (a lifetime peak of usage); on cgroup v2 it is
    often 0, so the highest working set seen in the window instead."""
    if last.max_usage_bytes > 0:
        return last.max_usage_bytes
    inside = [s for s in samples if first.timestamp_ns <= s.timestamp_ns <= last.timestamp_ns]
    return max(s.working_set_bytes for s in [first, last, *inside])


@dataclass(frozen=True)
class Edges:
    first: Counters
    last: Counters
    inner: bool          # both stamped inside the run (else: just outside it)

    @property
    def seconds(self) -> float:
        return (self.last.timestamp_ns - self.first.timestamp_ns) / 1e9


def edges(series: list[Counters], start_ns: int, end_ns: int) -> Edges | None:
    """The first and last entries inside [start_ns, end_ns]; failing two of
    them, the last one before the run and the first one after it (None when
    the series does not reach past the run yet, or the counters went back:
    the container restarted)."""
    series = sorted(series, key=lambda c: c.timestamp_ns)
    inside = [c for c in series if start_ns <= c.timestamp_ns <= end_ns]
    if len(inside) >= 2 and inside[-1].timestamp_ns > inside[0].timestamp_ns:
        return checked(Edges(inside[0], inside[-1], True))
    return outer_edges(series, start_ns, end_ns)


def outer_edges(series: list[Counters], start_ns: int, end_ns: int) -> Edges | None:
    """The last entry before the run and the first one after it: a window
    that holds the whole run (None as for edges)."""
    before = [c for c in series if c.timestamp_ns <= start_ns]
    after = [c for c in series if c.timestamp_ns >= end_ns]
    if not before or not after:
        return None
    first, last = max(before, key=lambda c: c.timestamp_ns), min(after, key=lambda c: c.timestamp_ns)
    return checked(Edges(first, last, False))


def checked(found: Edges) -> Edges | None:
    """None when the counters went back (the container restarted) or the
    window has no length."""
    if found.last.cpu_total_ns < found.first.cpu_total_ns or found.seconds <= 0:
        return None
    return found


def idle_cores(series: list[Counters], start_ns: int, end_ns: int) -> float | None:
    """A container's cores over a span in which bench ran nothing: its own
    background (a database's checkpoints, a runtime's timers), which every
    request of a case would otherwise be charged for."""
    found = edges(series, start_ns, end_ns)
    return (found.last.cpu_total_ns - found.first.cpu_total_ns) / 1e9 / found.seconds if found else None


COMPLETION_BIN_S = 0.1  # completions are kept per tenth of a second: a window's edges cut a bin at most


def completion_bins(completions: list[tuple[float, float, int]], started_ns: int,
                    ended_ns: int) -> list[tuple[float, float]]:
    """Per-request completion times ([(earliest, latest, requests)], seconds
    of the epoch, each request known only to lie somewhere in its span) as
    [(bin start, requests)] per COMPLETION_BIN_S. Each span is first clipped
    to the run's own edges (a completion cannot fall outside the tool's
    process), then spread evenly over what is left."""
    run_start, run_end = started_ns / 1e9, ended_ns / 1e9
    bins: dict[int, float] = {}
    for earliest, latest, n in completions:
        low, high = max(earliest, run_start), min(latest, run_end)
        if high < low:  # outside the run, by clock rounding: the nearest edge
            low = high = min(max(earliest, run_start), run_end)
        first, last = math.floor(low / COMPLETION_BIN_S), math.floor(high / COMPLETION_BIN_S)
        if first == last or high == low:
            bins[first] = bins.get(first, 0.0) + n
            continue
        for b in range(first, last + 1):
            part = min((b + 1) * COMPLETION_BIN_S, high) - max(b * COMPLETION_BIN_S, low)
            if part > 0:
                bins[b] = bins.get(b, 0.0) + n * part / (high - low)
    return [(round(b * COMPLETION_BIN_S, 1), round(n, 3)) for b, n in sorted(bins.items())]


def requests_between(bins: list[tuple[float, float]], start_ns: int, end_ns: int) -> float:
    """Requests completed in [start_ns, end_ns], from completion_bins (each
    bin's requests spread evenly over it)."""
    start, end = start_ns / 1e9, end_ns / 1e9
    return sum(n * max(0.0, min(t + COMPLETION_BIN_S, end) - max(t, start)) / COMPLETION_BIN_S for t, n in bins)


def run_edges(series: list[Counters], start_ns: int, end_ns: int,
              completions: list[tuple[float, float]] | None = None) -> tuple[Edges | None, float | None]:
    """The window a run's CPU is read over (edges), and the requests the
    tool's own times put inside it (None without them or for a window that
    holds the whole run). An inner window in which they put none (two
    readings in the tool's tail, after its last answer) is not the load's:
    the window that holds the whole run stands in."""
    found = edges(series, start_ns, end_ns)
    if not (found and found.inner and completions):
        return found, None
    in_window = requests_between(completions, found.first.timestamp_ns, found.last.timestamp_ns)
    if in_window <= 0:
        return outer_edges(series, start_ns, end_ns), None
    return found, in_window


# How a row's CPU per request was divided (cpu_ms_per_request_from)
PER_REQUEST_IN_WINDOW = "requests in the window"  # the tool's per-request times: ab -g, vegeta
PER_REQUEST_RATE = "run's rate"                   # the window's cores over the whole run's req/s: wrk
PER_REQUEST_RUN = "whole run"                     # a fallback window holds the whole run: CPU over its requests
PER_REQUEST_EDGES = "run's edges"                 # bench's readings at the run's start and end: CPU over its requests


def cadvisor_cpu(found: Edges, in_window: float | None, whole: int, whole_rps: float,
                 whole_share: float) -> tuple[float, float, float | None, str, float | None]:
    """(CPU seconds, cores, CPU ms per whole answer, how divided, requests
    in the window) over cAdvisor's window (run_edges)."""
    cpu_seconds = (found.last.cpu_total_ns - found.first.cpu_total_ns) / 1e9
    cores = cpu_seconds / found.seconds
    if in_window:
        in_window *= whole_share
        return cpu_seconds, cores, (cpu_seconds * 1000 / in_window if in_window > 0 else None), \
            PER_REQUEST_IN_WINDOW, in_window
    if found.inner:
        return cpu_seconds, cores, (cores * 1000 / whole_rps if whole_rps > 0 else None), PER_REQUEST_RATE, None
    return cpu_seconds, cores, (cpu_seconds * 1000 / whole if whole else None), PER_REQUEST_RUN, None


def edges_cpu_seconds(counters: tuple[int, int] | None) -> float | None:
    """CPU seconds between bench's own readings at a run's start and end
    (None without them, or when the counter went back: the container
    restarted in between)."""
    if counters is None or counters[1] < counters[0]:
        return None
    return (counters[1] - counters[0]) / 1e9


def container_usage(series: list[Counters], start_ns: int, end_ns: int, whole: int, whole_rps: float,
                    allowance: float | None, cpuset: tuple[int, ...] = (), idle: float | None = None,
                    completions: list[tuple[float, float]] | None = None, whole_share: float = 1.0,
                    counters: tuple[int, int] | None = None) -> dict | None:
    """One container's cost of one timed run. `cores` is a rate over the
    window. CPU per request is per answer served whole (a 503 shed at the
    deadline or an answer cut short is no work served: its CPU is charged
    to the whole ones), divided here and nowhere else: the window's CPU over
    the whole answers completed inside that same window when the tool gives
    per-request times (`completions`, every answer, times `whole_share`), so
    a run's ramp and tail count on neither side; without them, the window's
    rate over the run's whole answers per second (inner window), or the
    window's CPU over the run's whole answers (a fallback window holds the
    whole run). With `counters` (the cumulative CPU in ns bench read itself
    just before the run and just after it), the window is the run exactly:
    its CPU over its whole answers, cAdvisor's figures kept beside it
    (cadvisor_*). With the container's idle cores measured before the case,
    cpu_ms_per_request_net is the same less that idle rate."""
    found, in_window = run_edges(series, start_ns, end_ns, completions)
    if found is None:
        return None
    first, last = found.first, found.last
    cpu_seconds, cores, per_request, divided_by, in_window = cadvisor_cpu(found, in_window, whole, whole_rps,
                                                                          whole_share)
    window_seconds, inner, beside = found.seconds, found.inner, {}
    exact = edges_cpu_seconds(counters)
    if exact is not None and end_ns > start_ns:
        beside = {"cadvisor_cores": round(cores, 4),
                  "cadvisor_cpu_ms_per_request": round(per_request, 6) if per_request is not None else None,
                  "cadvisor_window_seconds": round(found.seconds, 3)}
        # the container worked for the tool only: its CPU just outside the
        # tool's own edges (the tool's start and exit, microseconds) is idle
        window_seconds, inner, in_window = (end_ns - start_ns) / 1e9, True, None
        cpu_seconds, cores = exact, exact / window_seconds
        per_request, divided_by = (exact * 1000 / whole if whole else None), PER_REQUEST_EDGES
    net = None
    if per_request is not None and idle is not None:
        # the idle rate is in cores too: the run's CPU less it, in the same proportion per request
        net = per_request * max(cores - idle, 0.0) / cores if cores > 0 else 0.0
    return {
        "cpu_seconds": round(cpu_seconds, 6),
        "window_seconds": round(window_seconds, 3),
        "inner_window": inner,
        "user_seconds": round((last.cpu_user_ns - first.cpu_user_ns) / 1e9, 3),
        "system_seconds": round((last.cpu_system_ns - first.cpu_system_ns) / 1e9, 3),
        "cores": round(cores, 4),
        "cpu_ms_per_request": round(per_request, 6) if per_request is not None else None,
        "cpu_ms_per_request_from": divided_by,
        "requests_in_window": round(in_window, 1) if in_window else None,
        "idle_cores": round(idle, 4) if idle is not None else None,
        "cpu_ms_per_request_net": round(net, 6) if net is not None else None,
        "peak_memory_bytes": peak_memory_bytes(first, last, series),
        "allowance_cores": allowance,
        "cpuset": list(cpuset),
        "throttled_periods": last.throttled_periods - first.throttled_periods,
        **beside,
    }


def active(used: dict) -> bool:
    """The container did work in the window: an idle one pinned to a core
    (PostgreSQL beside MongoDB during a GridFS case) competed with nobody."""
    return (used.get("cores") or 0.0) > ACTIVE_CORES


def shared_cpus(cpu: dict, together: tuple[str, ...] = ()) -> set[int]:
    """CPUs in the cpusets of two or more of the case's containers that
    were active in the window; of the targets loaded together (an A/B duet,
    sharing their core by design) only the first counts."""
    seen: dict[int, int] = {}
    for role, used in cpu.items():
        if not active(used) or role in together[1:]:
            continue
        for c in used.get("cpuset") or ():
            seen[c] = seen.get(c, 0) + 1
    return {c for c, n in seen.items() if n > 1}


def loadgen_cores_busy(cpu: dict, busy: dict[str, float], loadgen: str = LOADGEN) -> float | None:
    """How busy the load generator's cores were over the window, whoever kept
    them so (it, the kernel's network processing, cAdvisor, another program):
    the mean busy share of its cpuset's CPUs, or of the machine's without one
    (None without /proc/stat's figures for them)."""
    cpus = (cpu.get(loadgen) or {}).get("cpuset") or ()
    shares = [busy.get(f"cpu{c}") for c in cpus] if cpus else [busy.get("cpu")]
    return None if None in shares else sum(shares) / len(shares)


def crowded_out(cpu: dict, tool_cores: float | None, busy: dict[str, float], saturated_shared: set[int],
                loadgen: str = LOADGEN) -> bool:
    """The load generator worked on cores at least LOADGEN_BOUND_SHARE busy,
    no other container of the case saturating them beside it: what the tool
    did not use went to work outside the case's containers, so it could
    have had no more CPU than it got, whatever its own share (the scheduler
    leaves no core idle while a task on it waits to run). A starved tool
    reads its answers late: a client timeout there is the tool's, not the
    path's. Cores the case's containers saturated together are
    core-saturated's."""
    bench = cpu.get(loadgen) or {}
    working = active(bench) or (tool_cores or 0.0) > ACTIVE_CORES
    share = loadgen_cores_busy(cpu, busy, loadgen)
    return (working and share is not None and share >= LOADGEN_BOUND_SHARE
            and not set(bench.get("cpuset") or ()) & saturated_shared)


def flags(cpu: dict, target: str, tool_cores: float | None, tool_limit: float | None,
          busy: dict[str, float], loadgen: str = LOADGEN, together: tuple[str, ...] = ()) -> list[str]:
    """The flags of one timed run. tool_cores: the tool's own CPU over its
    wall time; tool_limit: what it could use (its threads, within bench's
    allowance); busy: /proc/stat's busy share of each CPU over the run;
    together: the targets loaded with this one at once."""
    found = []
    bench = cpu.get(loadgen) or {}
    container_bound = (bench.get("inner_window") and bench.get("allowance_cores")
                       and bench["cores"] >= LOADGEN_BOUND_SHARE * bench["allowance_cores"])
    tool_bound = tool_cores is not None and tool_limit and tool_cores >= LOADGEN_BOUND_SHARE * tool_limit
    saturated_shared = {c for c in shared_cpus(cpu, together) if busy.get(f"cpu{c}", 0.0) > CORE_SATURATED_SHARE}
    if container_bound or tool_bound or crowded_out(cpu, tool_cores, busy, saturated_shared, loadgen):
        found.append(LOADGEN_BOUND)
    if saturated_shared:
        found.append(CORE_SATURATED)
    if (cpu.get(target) or {}).get("throttled_periods", 0) > 0:
        found.append(THROTTLED)
    # about the figures' CPU: the target's and any container that worked
    # beside it (its database, its upstream). An idle one's rate is ~0 over
    # any window, and the load generator's bound has its own fallback above.
    if any(not used["inner_window"] for role, used in cpu.items()
           if role == target or (role != loadgen and active(used))):
        found.append(SHORT_WINDOW)
    return found


def cross_check(series_by_container: dict[str, list[Counters]], machines: list[list[Counters]],
                start_ns: int, end_ns: int, host: list[HostReading], host_cpus: int) -> dict:
    """Cores of the whole host three ways over one run, each a rate over its
    own inner window: every Docker container summed, cAdvisor's root cgroup
    (summed over the machines, when the lab spans several), and /proc/stat
    (bench's machine only) over the root cgroup's own stretch, its readings
    interpolated to cAdvisor's stamps: over the run's edges instead, ramps
    and the tool's start read 11% below cAdvisor's 1.18 cores in CI. Under
    steady load they agree; a gap says what the containers' figures miss."""
    inner = []

    def cores(series):
        e = edges(series, start_ns, end_ns)
        inner.append(e is not None and e.inner)
        return (e.last.cpu_total_ns - e.first.cpu_total_ns) / 1e9 / e.seconds if e else None
    per_container = [cores(s) for s in series_by_container.values()]
    per_machine = [cores(m) for m in machines if m]
    machine_cores = sum(per_machine) if per_machine and None not in per_machine else None
    stretch = edges(machines[0], start_ns, end_ns) if len(machines) == 1 and machines[0] else None
    busy = busy_between(host, *((stretch.first.timestamp_ns, stretch.last.timestamp_ns) if stretch
                                else (start_ns, end_ns)))
    return {
        "containers_cores": round(sum(c for c in per_container if c is not None), 4),
        "containers": sum(c is not None for c in per_container),
        "machine_cores": round(machine_cores, 4) if machine_cores is not None else None,
        # /proc/stat sees bench's machine only: no figure for a lab that spans several
        "host_cores": round(busy["cpu"] * host_cpus, 4) if "cpu" in busy and len(machines) <= 1 else None,
        # every figure a rate over readings inside the run: only then is their difference work outside
        "inner_window": bool(inner) and all(inner),
    }


def cores_series(samples: list[Counters]) -> list[tuple[float, float]]:
    """(seconds since the epoch, mean cores since the previous sample) between
    consecutive samples, timed by cAdvisor's own timestamps."""
    points = []
    for a, b in zip(samples, samples[1:]):
        dt = (b.timestamp_ns - a.timestamp_ns) / 1e9
        if dt > 0 and b.cpu_total_ns >= a.cpu_total_ns:
            points.append((b.timestamp_ns / 1e9, (b.cpu_total_ns - a.cpu_total_ns) / 1e9 / dt))
    return points


def tool_limit(threads: int, allowance: float | None) -> float:
    """What a tool could use: one core per thread, no more than the load
    generator's allowance (its cpuset, or a CFS quota such as LOADGEN_CPU_QUOTA)."""
    return min(threads, allowance) if allowance else float(threads)


def tool_bound(cores: float, threads: int, allowance: float | None) -> bool:
    """From the tool's own rusage over its wall time, cAdvisor or not."""
    return cores >= LOADGEN_BOUND_SHARE * tool_limit(threads, allowance)


def a_worker_bound(workers: list[dict] | None) -> bool:
    """One of several ab workers (BENCH_LOADGENS) at its one thread's limit:
    the case asked more of it than it could send, whatever the others did."""
    return any(w["cores"] >= LOADGEN_BOUND_SHARE for w in workers or ())


@dataclass
class WindowInput:
    """What a window needs besides cAdvisor's series: the run's edges and
    figures, and /proc/stat's busy shares over it."""
    start_ns: int
    end_ns: int
    whole: int          # answers served whole (clients.timing.whole_answers)
    whole_rps: float    # and per second
    tool_cores: float
    tool_threads: int
    busy: dict[str, float] = field(default_factory=dict)  # busy_between over the run
    host: list[HostReading] = field(default_factory=list)  # /proc/stat read through the run
    idle: dict[str, float] = field(default_factory=dict)  # role -> cores measured idle before the case
    completions: list[tuple[float, float]] | None = None  # completion_bins of the tool's requests, where it gives them
    whole_share: float = 1.0  # of the answers the completions count, the share served whole
    # role -> its cumulative CPU (ns) as bench read it itself just before the run and just after it
    counters: dict[str, tuple[int, int]] = field(default_factory=dict)


def window(series: dict[str, list[Counters]], allowance: dict[str, float | None],
           cpusets: dict[str, tuple[int, ...]], target: str, run: WindowInput, loadgen_allowance: float | None,
           all_series: dict[str, list[Counters]] | None = None, machines: list[list[Counters]] | None = None,
           host_cpus: int = 1, together: tuple[str, ...] = ()) -> tuple[dict, list[str], dict]:
    """(cpu by role, flags, the window's own figures) for one timed run
    (`together`: the targets loaded at once with it, an A/B duet)."""
    cpu = {}
    for role, s in series.items():
        used = container_usage(s, run.start_ns, run.end_ns, run.whole, run.whole_rps, allowance.get(role),
                               cpusets.get(role, ()), run.idle.get(role), run.completions, run.whole_share,
                               run.counters.get(role))
        if used is not None:
            cpu[role] = used
    if LOADGEN in cpu:
        cpu[LOADGEN]["tool_cores"] = round(run.tool_cores, 4)
    found = flags(cpu, target, run.tool_cores, tool_limit(run.tool_threads, loadgen_allowance), run.busy,
                  together=(target, *together) if together else ())
    figures = {"start_ns": run.start_ns, "end_ns": run.end_ns,
               "seconds": round((run.end_ns - run.start_ns) / 1e9, 3), "busy_shares": run.busy,
               **cross_check(all_series or {}, machines or [], run.start_ns, run.end_ns, run.host, host_cpus)}
    outside = outside_cores(figures)
    if outside is not None:
        figures["outside_cores"] = round(outside, 4)
        if outside > DISTURBED_CORES:
            found.append(DISTURBED)
    return cpu, found, figures


def outside_cores(figures: dict) -> float | None:
    """Cores used outside every container over a window: the machine's
    (cAdvisor's root cgroup, else /proc/stat) less the containers' sum."""
    whole = figures.get("machine_cores")
    if whole is None:
        whole = figures.get("host_cores")
    # A short window's figures span different stretches (one container's
    # readings just outside the run, another's not yet fetched), and a
    # container without a figure would count as outside work: no judgement.
    if whole is None or not figures.get("containers") or not figures.get("inner_window", True):
        return None
    return max(0.0, whole - figures["containers_cores"])


def behind_schedule(rate: float, sent_rate: float) -> bool:
    """An open loop that sent below SENT_RATE_KEPT of its asked rate: out of
    workers or CPU, its requests' waits went unrecorded."""
    return bool(rate) and sent_rate < SENT_RATE_KEPT * rate
