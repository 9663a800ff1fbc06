"""Pure parser of cAdvisor's REST JSON (GET /api/v1.3/docker/): each Docker
container's identity (compose project and service), the store a serving
path declares, its CPU allowance, and its cumulative counters per stats
entry. No I/O, so it is unit-tested on captured JSON; bench.measure.monitor
does the fetching."""
import re
from dataclasses import dataclass
from datetime import datetime, timezone

SERVICE_LABEL = "com.docker.compose.service"
PROJECT_LABEL = "com.docker.compose.project"
# Compose stamps each container with the ID of the image it was created from.
IMAGE_ID_LABEL = "com.docker.compose.image"
# What a serving path serves its files from, declared beside it in compose.yaml
# (disk, GridFS...): the report groups paths by it, so bench names none.
STORE_LABEL = "lab.store"


class CadvisorError(ValueError):
    pass


@dataclass(frozen=True)
class Counters:
    """One stats entry: cumulative since the container started, stamped by
    cAdvisor (nanoseconds since the epoch) when it read the cgroup."""
    timestamp_ns: int
    cpu_total_ns: int
    cpu_user_ns: int      # user/system are in USER_HZ ticks (10 ms) scaled to ns
    cpu_system_ns: int
    throttled_periods: int
    working_set_bytes: int
    max_usage_bytes: int  # lifetime peak of usage; 0 on cgroup v2 kernels without memory.peak


@dataclass(frozen=True)
class Container:
    id: str
    name: str                 # cgroup name, "/docker/<id>"
    project: str | None       # compose project, None if not started by compose
    service: str | None       # compose service
    image: str | None         # the image's name as Docker knows it (spec.image)
    image_id: str | None      # "sha256:..." of that image (Compose's label), None outside compose
    aliases: tuple[str, ...]
    cpu_allowance: float | None  # cores: CFS quota/period if set, else CPUs in the cpuset
    cpuset: tuple[int, ...]      # the CPUs it may run on (spec.cpu.mask); empty when not reported
    memory_limit_bytes: int | None
    stats: tuple[Counters, ...]  # oldest first
    host: str = ""               # the host whose cAdvisor listed it (several hosts: tools/lab/hosts.py)
    store: str | None = None     # its compose label lab.store; None for a container without one

    @property
    def latest(self) -> Counters | None:
        return self.stats[-1] if self.stats else None


def parse_timestamp_ns(stamp: str) -> int:
    """RFC 3339 with up to nanoseconds ("2026-11-22T03:36:14.200778788Z"),
    which datetime cannot hold exactly."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if m is None:
        raise CadvisorError(f"not an RFC 3339 timestamp: {stamp!r}")
    seconds, fraction, zone = m.groups()
    whole = datetime.fromisoformat(seconds + ("+00:00" if zone == "Z" else zone))
    return int(whole.astimezone(timezone.utc).timestamp()) * 10**9 + int((fraction or "0").ljust(9, "0")[:9])


def cpus_of_mask(mask: str) -> tuple[int, ...]:
    """The CPUs of a cpuset list such as "0-1,3"."""
    cpus = []
    for part in mask.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return tuple(sorted(set(cpus)))


def cpus_in_mask(mask: str) -> int:
    """Number of CPUs in a cpuset list such as "0-1,3"."""
    return len(cpus_of_mask(mask))


def cpu_allowance(spec_cpu: dict) -> float | None:
    """Cores a container may use: quota/period when a CFS quota is set
    (docker --cpus), else the CPUs of its cpuset (spec.cpu.mask, present when
    cAdvisor's cpuset metrics are enabled), else unknown."""
    quota, period = spec_cpu.get("quota") or 0, spec_cpu.get("period") or 0
    if quota > 0 and period > 0:
        return quota / period
    mask = spec_cpu.get("mask")
    return float(cpus_in_mask(mask)) if mask else None


# cAdvisor reports "no limit" as a huge number (page-rounded 2^63-1).
_UNLIMITED = 1 << 62


def parse_counters(stat: dict) -> Counters:
    cpu, memory = stat.get("cpu") or {}, stat.get("memory") or {}
    usage = cpu.get("usage") or {}
    return Counters(
        timestamp_ns=parse_timestamp_ns(stat["timestamp"]),
        cpu_total_ns=int(usage.get("total", 0)),
        cpu_user_ns=int(usage.get("user", 0)),
        cpu_system_ns=int(usage.get("system", 0)),
        throttled_periods=int((cpu.get("cfs") or {}).get("throttled_periods", 0)),
        working_set_bytes=int(memory.get("working_set", 0)),
        max_usage_bytes=int(memory.get("max_usage", 0)),
    )


def parse_container(info: dict) -> Container:
    spec = info.get("spec") or {}
    labels = spec.get("labels") or {}
    name = info.get("name", "")
    limit = (spec.get("memory") or {}).get("limit")
    return Container(
        id=info.get("id") or name.rsplit("/", 1)[-1],
        name=name,
        project=labels.get(PROJECT_LABEL),
        service=labels.get(SERVICE_LABEL),
        image=spec.get("image") or None,
        image_id=labels.get(IMAGE_ID_LABEL),
        store=labels.get(STORE_LABEL) or None,
        aliases=tuple(info.get("aliases") or ()),
        cpu_allowance=cpu_allowance(spec.get("cpu") or {}),
        cpuset=cpus_of_mask((spec.get("cpu") or {}).get("mask") or ""),
        memory_limit_bytes=int(limit) if limit and limit < _UNLIMITED else None,
        stats=tuple(sorted((parse_counters(s) for s in info.get("stats") or ()),
                           key=lambda c: c.timestamp_ns)),
    )


def parse_docker_list(data: dict) -> list[Container]:
    """GET /api/v1.3/docker/ (or /api/v1.3/docker/<name>): a map from cgroup
    name to container info."""
    if not isinstance(data, dict):
        raise CadvisorError(f"expected a JSON object of containers, got {type(data).__name__}")
    return [parse_container(info) for info in data.values()]


@dataclass(frozen=True)
class Machine:
    """A host as its cAdvisor describes it (GET /api/v1.3/machine)."""
    cpus: int
    memory_bytes: int
    identity: str   # machine and boot id: two cAdvisors on one kernel report the same

    def as_dict(self) -> dict:
        return {"cpus": self.cpus, "memory_bytes": self.memory_bytes}


def parse_machine(info: dict) -> Machine:
    """num_cores and memory_capacity, checked: they become figures in the
    report and a bound on the machine's cores."""
    cpus, memory = info.get("num_cores"), info.get("memory_capacity")
    if not isinstance(cpus, int) or isinstance(cpus, bool) or not 0 < cpus <= 4096:
        raise CadvisorError(f"machine: num_cores {cpus!r} is not a count of CPUs")
    if not isinstance(memory, int) or isinstance(memory, bool) or memory <= 0:
        raise CadvisorError(f"machine: memory_capacity {memory!r} is not a size in bytes")
    identity = f"{info.get('machine_id') or ''}/{info.get('boot_id') or ''}"
    return Machine(cpus, memory, identity if identity != "/" else "")


def own_container_id(mountinfo: str) -> str | None:
    """The id of the container this process runs in, from /proc/self/mountinfo:
    Docker bind-mounts /etc/hostname from /var/lib/docker/containers/<id>/.
    Works on cgroup v1 and v2 (where /proc/self/cgroup may say only "0::/")."""
    m = re.search(r"/containers/([0-9a-f]{64})/(?:hostname|resolv\.conf|hosts)\s", mountinfo)
    return m.group(1) if m else None


def find_by_id(containers: list[Container], container_id: str) -> Container | None:
    """Full id, or a prefix of at least 12 characters (the default hostname)."""
    if len(container_id) < 12:
        return None
    return next((c for c in containers if c.id.startswith(container_id)), None)


def services_of_project(containers: list[Container], project: str | None) -> dict[str, Container]:
    """Compose service -> its container in one project; with project None,
    only services that a single container across all projects claims."""
    found: dict[str, list[Container]] = {}
    for c in containers:
        if c.service and (project is None or c.project == project):
            found.setdefault(c.service, []).append(c)
    return {service: cs[0] for service, cs in found.items() if len(cs) == 1}
