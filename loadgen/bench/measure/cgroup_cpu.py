"""Each container's cumulative CPU counter read by bench itself, from the
host's cgroup tree (compose.yaml binds /sys/fs/cgroup read-only at
CGROUP_DIR), at the very moments an A/B window starts and ends.

Why not cAdvisor's: it reads the same counter, but on its own clock, every
1 to 2 s (its housekeeping interval of 1 s, jittered up to twice that), each
container on its own tick. A 3 s window then holds two or three readings of
each twin, a different stretch of about half the window for A and for B, and
the CPU per request divided the stretch's cores by the whole window's rate.
In the 20-run A/A calibration of flask-postgres at 1 MB (its twins sharing a
core they did not keep saturated), log(B/A) of CPU per request spread 0.077
where the rates' spread 0.028 (detectable change 6% against 2.4%), more the
shorter the stretches (0.045 where both held 1.5 s or more, 0.077 below) and
the farther apart A's and B's lay (0.046 within 0.5 s, 0.11 beyond 1.5 s);
at 1 KB, the core saturated and split evenly, any stretch read alike. Read here at the
window's edges, both twins' CPU covers exactly the window their answers
were counted in. cAdvisor stays the source of everything else (memory,
user and system time, throttling, the machine's totals) and the fallback.

Cgroup v2 (unified: cgroup.controllers at the mount's root): <cgroup>/
cpu.stat's usage_usec. Cgroup v1: cpuacct/<cgroup>/cpuacct.usage, in ns
(the hierarchy mounted as cpuacct or cpu,cpuacct). <cgroup> is the
container's cgroup as cAdvisor names it (/docker/<id>, or
/system.slice/docker-<id>.scope under systemd), so the layout Docker chose
is cAdvisor's to know, not guessed here. The parsing and the choice of file
are pure; reading is CgroupCounters.read.

The whole of a cgroup's CPU accounting (read_times: the counter, its user
and system split, its CFS throttled periods) for make overload, which
samples every container from the host (tools/lab/overload.py): v2's
cpu.stat has it all; v1 adds cpuacct.stat beside the counter and the cpu
controller's cpu.stat (beside it where cpu and cpuacct are mounted together)."""
import time
from dataclasses import dataclass
from pathlib import Path

V2_MARK = "cgroup.controllers"  # present at the root of a cgroup v2 mount only
V1_HIERARCHIES = ("cpuacct", "cpu,cpuacct", "cpuacct,cpu")
V1_CPU_HIERARCHIES = ("cpu", "cpu,cpuacct", "cpuacct,cpu")  # the cpu controller's: throttling
USER_HZ_NS = 10_000_000  # v1's cpuacct.stat counts user and system time in USER_HZ ticks (100 a second)


class CgroupError(ValueError):
    pass


def parse_cpuacct_usage(text: str) -> int:
    """cgroup v1's cpuacct.usage: one number, nanoseconds."""
    try:
        return int(text.strip())
    except ValueError as e:
        raise CgroupError(f"cpuacct.usage is not a count of nanoseconds: {text[:40]!r}") from e


def parse_cpu_stat_usage(text: str) -> int:
    """cgroup v2's cpu.stat, "usage_usec N" among other keys: nanoseconds."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            try:
                return int(value) * 1000
            except ValueError as e:
                raise CgroupError(f"cpu.stat's usage_usec is not a number: {value[:40]!r}") from e
    raise CgroupError("cpu.stat has no usage_usec")


PARSERS = {"cpu.stat": parse_cpu_stat_usage, "cpuacct.usage": parse_cpuacct_usage}


def parse_fields(text: str) -> dict[str, int]:
    """A flat keyed file's "key N" lines (cpu.stat, cpuacct.stat)."""
    try:
        return {k: int(v) for k, v in (line.split() for line in text.splitlines() if len(line.split()) == 2)}
    except ValueError as e:
        raise CgroupError(f"not lines of a key and a number: {text[:40]!r}") from e


def relative_cgroup(cgroup: str) -> Path:
    """A cgroup's name ("/docker/<id>"; "/", the root) as a path under a
    hierarchy's root; a name that would leave it (..) is refused: it comes
    over the network."""
    parts = [p for p in cgroup.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise CgroupError(f"not a cgroup's name: {cgroup!r}")
    return Path(*parts)


def counter_candidates(root: Path, cgroup: str, unified: bool) -> list[Path]:
    """Where a container's CPU counter is under `root` (the host's
    /sys/fs/cgroup), in the order tried."""
    relative = relative_cgroup(cgroup)
    if unified:
        return [root / relative / "cpu.stat"]
    return [root / hierarchy / relative / "cpuacct.usage" for hierarchy in V1_HIERARCHIES]


def counter_file(root: Path, cgroup: str) -> Path | None:
    """The counter file of `cgroup` that exists under `root`, None if none."""
    unified = (root / V2_MARK).is_file()
    return next((p for p in counter_candidates(root, cgroup, unified) if p.is_file()), None)


def read_counter(path: Path) -> int:
    return PARSERS[path.name](path.read_text())


@dataclass(frozen=True)
class CpuFiles:
    """One cgroup's CPU accounting files: `usage`, counter_file's; `stat`,
    v1's cpuacct.stat (None on v2: its cpu.stat has the split); `throttle`,
    the cpu controller's cpu.stat (None where there is none)."""
    usage: Path
    stat: Path | None
    throttle: Path | None


@dataclass(frozen=True)
class CpuTimes:
    """A cgroup's cumulative CPU (ns): all, user, system; and its CFS periods throttled."""
    total_ns: int
    user_ns: int
    system_ns: int
    throttled_periods: int


def cpu_files(root: Path, cgroup: str) -> CpuFiles | None:
    """The CPU accounting files of `cgroup` under `root`, None if it has no counter there."""
    usage = counter_file(root, cgroup)
    if usage is None:
        return None
    if usage.name == "cpu.stat":  # v2: one file
        return CpuFiles(usage, None, usage)
    relative = relative_cgroup(cgroup)
    throttle = (usage.parent / "cpu.stat", *(root / h / relative / "cpu.stat" for h in V1_CPU_HIERARCHIES))
    return CpuFiles(usage, usage.parent / "cpuacct.stat", next((p for p in throttle if p.is_file()), None))


def read_times(files: CpuFiles) -> CpuTimes:
    """A cgroup's CPU now; OSError or CgroupError where a file is gone or not what it should be."""
    if files.stat is None:  # v2
        text = files.usage.read_text()
        stat = parse_fields(text)
        return CpuTimes(parse_cpu_stat_usage(text), stat.get("user_usec", 0) * 1000,
                        stat.get("system_usec", 0) * 1000, stat.get("nr_throttled", 0))
    ticks = parse_fields(files.stat.read_text())
    throttled = parse_fields(files.throttle.read_text()).get("nr_throttled", 0) if files.throttle else 0
    return CpuTimes(read_counter(files.usage), ticks.get("user", 0) * USER_HZ_NS, ticks.get("system", 0) * USER_HZ_NS,
                    throttled)


def agrees(counter_ns: int, read_at_ns: int, cadvisor_ns: int, cadvisor_at_ns: int, cores: float) -> bool:
    """A counter read here belongs to the container cAdvisor reported: it
    is not below cAdvisor's earlier reading of it, nor above what the
    container could have used since (its cores, whole seconds of slack for
    the two clocks)."""
    elapsed = max(0.0, (read_at_ns - cadvisor_at_ns) / 1e9) + 1.0
    return cadvisor_ns <= counter_ns <= cadvisor_ns + elapsed * cores * 1e9


@dataclass(frozen=True)
class Reading:
    """One container's cumulative CPU (ns) and when bench read it (time.time_ns())."""
    at_ns: int
    cpu_ns: int


class CgroupCounters:
    """The counter files of the roles bench reads itself (role -> path)."""

    def __init__(self, files: dict[str, Path]):
        self.files = dict(files)

    def read(self, roles) -> dict[str, Reading]:
        """role -> Reading, now, for those of `roles` with a file; a file that
        cannot be read (the container restarting: its cgroup is made anew)
        leaves its role out, so that window falls back to cAdvisor."""
        found = {}
        for role in roles:
            path = self.files.get(role)
            if path is None:
                continue
            try:
                cpu = read_counter(path)
            except (OSError, CgroupError):
                continue
            found[role] = Reading(time.time_ns(), cpu)
        return found


def between(before: dict[str, Reading], after: dict[str, Reading]) -> dict[str, tuple[int, int]]:
    """role -> (CPU ns before, after) for the roles read at both edges
    (usage.WindowInput.counters)."""
    return {role: (before[role].cpu_ns, after[role].cpu_ns) for role in before if role in after}
