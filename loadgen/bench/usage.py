"""CPU and memory a timed window cost each container, from cAdvisor's
cumulative counters at the window's start and end, and the flags that say
how far to trust the row. Pure: bench.monitor reads, this computes."""
from dataclasses import dataclass, field

from .cadvisor import Counters

LOADGEN = "bench"                 # the role of the load generator's own container
LOADGEN_BOUND = "loadgen-bound"   # the load generator used >= 90% of its CPU allowance,
                                  # or ab (one thread) >= 90% of one core
THROTTLED = "throttled"           # the target's CFS quota throttled it
SHORT_WINDOW = "short-window"     # ab ran under SHORT_WINDOW_SECONDS: cores are rough
LOADGEN_BOUND_SHARE = 0.9
# About two housekeeping intervals: below it, bench's own reads of cAdvisor at
# the window's edges weigh on its container's CPU as much as ab does.
SHORT_WINDOW_SECONDS = 2.0

# /proc/stat "cpu" columns that are work, not waiting: user nice system idle
# iowait irq softirq steal (guest time is already inside user).
_BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class Snapshot:
    """Counters read at one edge of a window. `watched` is keyed by role (a
    compose service name; the load generator is "bench"); `containers` holds
    every Docker container cAdvisor listed, keyed by id; `machine` is
    cAdvisor's root cgroup (the whole host); host_busy_seconds is from the
    host's /proc/stat, read at the same moment."""
    watched: dict[str, Counters]
    allowance: dict[str, float | None]
    containers: dict[str, Counters] = field(default_factory=dict)
    host_busy_seconds: float | None = None
    machine: Counters | None = None


def host_busy_seconds(proc_stat: str, ticks_per_second: int = 100) -> float:
    """Busy CPU seconds of the whole host, all cores, from /proc/stat (which a
    container sees host-wide on cgroup v1 and v2 alike)."""
    for line in proc_stat.splitlines():
        words = line.split()
        if words and words[0] == "cpu":
            values = [int(v) for v in words[1:]]
            return sum(values[i] for i in _BUSY_COLUMNS if i < len(values)) / ticks_per_second
    raise ValueError("/proc/stat has no aggregate 'cpu' line")


def peak_memory_bytes(start: Counters, end: Counters, samples: list[Counters]) -> int:
    """cgroup v1's max_usage (a lifetime peak of usage); on cgroup v2 it is
    often 0, so the highest working set seen in the window instead."""
    if end.max_usage_bytes > 0:
        return end.max_usage_bytes
    inside = [s for s in samples if start.timestamp_ns <= s.timestamp_ns <= end.timestamp_ns]
    return max(s.working_set_bytes for s in [start, end, *inside])


def container_usage(start: Counters, end: Counters, requests: int, busy_seconds: float,
                    allowance: float | None, samples: list[Counters] = ()) -> dict | None:
    """One container's cost of a window. `cores` is the mean over ab's own
    duration (busy_seconds): the counters' window encloses ab's run plus idle
    edges of up to a housekeeping interval, which would dilute it. None when
    the counters went backwards (the container restarted)."""
    cpu_ns = end.cpu_total_ns - start.cpu_total_ns
    if cpu_ns < 0 or end.timestamp_ns < start.timestamp_ns:
        return None
    cpu_seconds = cpu_ns / 1e9
    return {
        "cpu_seconds": round(cpu_seconds, 6),
        "user_seconds": round((end.cpu_user_ns - start.cpu_user_ns) / 1e9, 3),
        "system_seconds": round((end.cpu_system_ns - start.cpu_system_ns) / 1e9, 3),
        "cores": round(cpu_seconds / busy_seconds, 4) if busy_seconds > 0 else None,
        "cpu_ms_per_request": round(cpu_seconds * 1000 / requests, 6) if requests else None,
        "peak_memory_bytes": peak_memory_bytes(start, end, list(samples)),
        "allowance_cores": allowance,
        "throttled_periods": end.throttled_periods - start.throttled_periods,
    }


def flags(cpu: dict, target: str, busy_seconds: float, loadgen: str = LOADGEN) -> list[str]:
    found = []
    bench = cpu.get(loadgen) or {}
    cores, allowance = bench.get("cores"), bench.get("allowance_cores")
    # ab is single-threaded: it tops out at one core whatever the cpuset allows.
    ab_cores = bench.get("ab_cores")
    container_bound = (cores is not None and allowance and busy_seconds >= SHORT_WINDOW_SECONDS
                       and cores >= LOADGEN_BOUND_SHARE * allowance)
    if container_bound or (ab_cores is not None and ab_cores >= LOADGEN_BOUND_SHARE):
        found.append(LOADGEN_BOUND)
    if (cpu.get(target) or {}).get("throttled_periods", 0) > 0:
        found.append(THROTTLED)
    if busy_seconds < SHORT_WINDOW_SECONDS:
        found.append(SHORT_WINDOW)
    return found


def window(start: Snapshot, end: Snapshot, target: str, requests: int, busy_seconds: float,
           samples: dict[str, list[Counters]] | None = None,
           ab_cpu_seconds: float | None = None) -> tuple[dict, list[str], dict]:
    """(cpu by role, flags, the window's own figures) for one timed ab run;
    ab_cpu_seconds is ab's own CPU (its rusage), part of the load generator's."""
    samples = samples or {}
    cpu = {}
    for role, first in start.watched.items():
        last = end.watched.get(role)
        if last is None:
            continue
        used = container_usage(first, last, requests, busy_seconds, end.allowance.get(role),
                               samples.get(role, []))
        if used is not None:
            cpu[role] = used
    if LOADGEN in cpu and ab_cpu_seconds is not None and busy_seconds > 0:
        cpu[LOADGEN]["ab_cpu_seconds"] = round(ab_cpu_seconds, 3)
        cpu[LOADGEN]["ab_cores"] = round(ab_cpu_seconds / busy_seconds, 4)
    stamps = [c.timestamp_ns for c in start.watched.values()] + [c.timestamp_ns for c in end.watched.values()]
    both = start.containers.keys() & end.containers.keys()
    figures = {
        "start_ns": min(c.timestamp_ns for c in start.watched.values()) if start.watched else None,
        "end_ns": max(c.timestamp_ns for c in end.watched.values()) if end.watched else None,
        "ab_seconds": busy_seconds,
        # Every Docker container's CPU in the window, whichever project: with
        # host_cpu_seconds, a check that the containers account for the host.
        "containers_cpu_seconds": round(sum(
            max(0, end.containers[i].cpu_total_ns - start.containers[i].cpu_total_ns) for i in both) / 1e9, 6),
        "containers": len(both),
        "host_cpu_seconds": (round(end.host_busy_seconds - start.host_busy_seconds, 3)
                             if start.host_busy_seconds is not None and end.host_busy_seconds is not None
                             else None),
        # cAdvisor's root cgroup over its own stamps: the host as cAdvisor sees it.
        "machine_cpu_seconds": (round((end.machine.cpu_total_ns - start.machine.cpu_total_ns) / 1e9, 6)
                                if start.machine and end.machine else None),
        "machine_seconds": (round((end.machine.timestamp_ns - start.machine.timestamp_ns) / 1e9, 3)
                            if start.machine and end.machine else None),
    }
    if stamps:
        figures["seconds"] = round((figures["end_ns"] - figures["start_ns"]) / 1e9, 3)
    return cpu, flags(cpu, target, busy_seconds), figures


def cores_series(samples: list[Counters]) -> list[tuple[float, float]]:
    """(seconds since the epoch, mean cores since the previous sample) between
    consecutive samples, timed by cAdvisor's own timestamps."""
    points = []
    for a, b in zip(samples, samples[1:]):
        dt = (b.timestamp_ns - a.timestamp_ns) / 1e9
        if dt > 0 and b.cpu_total_ns >= a.cpu_total_ns:
            points.append((b.timestamp_ns / 1e9, (b.cpu_total_ns - a.cpu_total_ns) / 1e9 / dt))
    return points


def tool_bound(cpu_seconds: float, seconds: float, threads: int, allowance: float | None) -> bool:
    """From the tool's own rusage, cAdvisor or not: it used at least
    LOADGEN_BOUND_SHARE of what it could, one core per thread and no more than
    the load generator's allowance (its cpuset, or a CFS quota such as
    LOADGEN_CPU_QUOTA sets)."""
    if seconds <= 0:
        return False
    limit = min(threads, allowance) if allowance else threads
    return cpu_seconds / seconds >= LOADGEN_BOUND_SHARE * limit
