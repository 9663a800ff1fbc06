"""Talks to cAdvisor for bench: finds the containers to watch (each target,
the database, bench's own), reads their counters at each timed window's edges,
and samples them about once a second in a background thread for the charts.
An A/B's twins' CPU counters bench also reads itself, from the host's cgroup
tree (find_counters, read_counters; bench.measure.cgroup_cpu says why)."""
import http.client
import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

from . import cgroup_cpu, usage
from .usage import LOADGEN
from .cadvisor import CadvisorError, Container, Counters, Machine, find_by_id, own_container_id, \
    parse_container, parse_docker_list, parse_machine, services_of_project

HOUSEKEEPING_INTERVAL = 1.0  # seconds: compose runs cAdvisor with --housekeeping_interval=1s
# compose runs cAdvisor with --storage_duration=10m: it keeps that long of
# stats, so a window that began earlier has lost its start
STORAGE_DURATION_S = 600.0
SAMPLE_INTERVAL = 1.0
FRESH_TIMEOUT = 3.0    # seconds to wait for a stats entry newer than a window edge (> 2 intervals)


class MonitorError(Exception):
    pass


def check_stored(start_ns: int, now_ns: int) -> None:
    """A window cAdvisor no longer holds the start of is an error, not a
    figure from whatever stats it still has (a leftover of the window)."""
    age = (now_ns - start_ns) / 1e9
    if age > STORAGE_DURATION_S - 2 * HOUSEKEEPING_INTERVAL:
        raise MonitorError(f"the window began {age:.0f} s ago; cAdvisor keeps {STORAGE_DURATION_S:.0f} s of "
                           "stats (--storage_duration in compose.yaml)")


class CadvisorClient:
    def __init__(self, url: str, timeout: float = 5.0):
        parts = urlsplit(url)
        self.url, self.host, self.port, self.timeout = url, parts.hostname, parts.port or 80, timeout

    def _get(self, path: str, num_stats: int):
        """The v1 API takes its query as a JSON body, even on GET; its default
        is the newest 60 stats entries."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        try:
            conn.request("GET", path, body=json.dumps({"num_stats": num_stats}),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException) as e:  # IncompleteRead and friends too
            raise MonitorError(f"GET {self.url}{path} failed: {e!r}") from e
        finally:
            conn.close()
        if resp.status != 200:
            raise MonitorError(f"GET {self.url}{path} answered {resp.status}: {body[:200]!r}")
        try:
            return json.loads(body)
        except ValueError as e:
            raise MonitorError(f"unreadable answer from {self.url}{path}: {e}") from e

    def containers(self, num_stats: int = 1) -> list[Container]:
        """GET /api/v1.3/docker/: every Docker container, newest entries first."""
        try:
            return parse_docker_list(self._get("/api/v1.3/docker/", num_stats))
        except (KeyError, CadvisorError) as e:
            raise MonitorError(f"unreadable answer from {self.url}: {e}") from e

    def machine(self, num_stats: int = 1) -> list[Counters]:
        """GET /api/v1.3/containers/: the root cgroup, i.e. the whole host."""
        try:
            return list(parse_container(self._get("/api/v1.3/containers/", num_stats)).stats)
        except (KeyError, TypeError, CadvisorError) as e:
            raise MonitorError(f"unreadable answer from {self.url}: {e}") from e

    def info(self) -> Machine:
        """GET /api/v1.3/machine: the host's CPUs, memory and identity."""
        try:
            return parse_machine(self._get("/api/v1.3/machine", 0))
        except (AttributeError, CadvisorError) as e:
            raise MonitorError(f"unreadable answer from {self.url}: {e}") from e


class CadvisorHosts:
    """The cAdvisors of several hosts (tools/lab/hosts.py) read as one: every
    container tagged with the host whose cAdvisor lists it, and the root
    cgroup's series once per distinct machine (namespace hosts on one
    kernel all report the same one). The first host is bench's own."""

    def __init__(self, clients: dict[str, CadvisorClient]):
        if not clients:
            raise ValueError("no cAdvisor to read")
        self.clients = clients
        self.url = " ".join(f"{host}={c.url}" if host else c.url for host, c in clients.items())
        self.local = next(iter(clients))
        self._machines: dict[str, Machine] | None = None

    def containers(self, num_stats: int = 1) -> list[Container]:
        found: dict[str, Container] = {}
        for host, client in self.clients.items():
            for c in client.containers(num_stats):
                found.setdefault(c.id, replace(c, host=host))
        return list(found.values())

    def machines_by_host(self) -> dict[str, Machine]:
        """host -> its Machine, asked once."""
        if self._machines is None:
            self._machines = {host: client.info() for host, client in self.clients.items()}
        return self._machines

    def machines(self, num_stats: int = 1) -> list[list[Counters]]:
        """The root cgroup's series of each distinct machine."""
        if len(self.clients) == 1:
            return [self.clients[self.local].machine(num_stats)]
        seen, series = set(), []
        for host, machine in self.machines_by_host().items():
            if machine.identity and machine.identity in seen:
                continue
            seen.add(machine.identity)
            series.append(self.clients[host].machine(num_stats))
        return series


def cadvisor_hosts(text: str, timeout: float = 5.0) -> CadvisorHosts:
    """CADVISOR_URL as CadvisorHosts: one URL (this machine's cAdvisor), or
    several as HOST=URL, bench's own host first (tools/lab/hosts.py writes it)."""
    clients = {}
    for word in text.split():
        host, _, url = word.partition("=") if "=" in word.split("://", 1)[0] else ("", "", word)
        clients[host] = CadvisorClient(url, timeout)
    return CadvisorHosts(clients)


def read_proc_stat() -> str | None:
    try:
        return Path("/proc/stat").read_text()
    except OSError:
        return None


class HostSampler:
    """/proc/stat read every `interval` seconds in a thread while a run lasts
    (`with HostSampler() as host: ...; host.readings`), so the host's busy
    share can be taken over any stretch inside the run: cAdvisor's readings
    or the tool's own start and end. Empty where /proc/stat cannot be read."""

    def __init__(self, interval: float = 0.1):
        self.interval = interval
        self.readings: list[usage.HostReading] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="proc-stat", daemon=True)

    def _read(self) -> None:
        text = read_proc_stat()
        if text is not None:
            self.readings.append(usage.HostReading(time.time_ns(), usage.parse_proc_stat(text)))

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def __enter__(self) -> "HostSampler":
        self._read()
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()
        self._read()


class Monitor:
    def __init__(self, client: "CadvisorClient | CadvisorHosts", targets: list[str], databases: list[str]):
        self.client = client if not isinstance(client, CadvisorClient) else CadvisorHosts({"": client})
        self.databases = list(databases)
        self.services = [*targets, *databases]  # compose services to watch besides bench
        self.ids: dict[str, str] = {}     # role -> container id
        self.allowance: dict[str, float | None] = {}
        self.cpusets: dict[str, tuple[int, ...]] = {}
        self.memory_limits: dict[str, int | None] = {}  # role -> bytes (None: no limit)
        # role -> the image its container runs, as Docker reports it
        self.images: dict[str, dict[str, str | None]] = {}
        self.stores: dict[str, str | None] = {}  # role -> its label lab.store (a serving path's store)
        self.hosts: dict[str, str] = {}   # role -> the host it runs on ("" on one machine)
        self.samples: dict[str, list[Counters]] = {}
        self.counters = cgroup_cpu.CgroupCounters({})  # role -> its cgroup's CPU counter, read by bench itself
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.sample_errors = 0

    def connect(self, deadline: float, own_id: str | None) -> list[str]:
        """Waits (until the monotonic deadline) for cAdvisor to answer and to
        list bench's container and every service's; returns warnings for what
        it never found. Raises MonitorError if cAdvisor never answered."""
        last_error, containers = "no answer", None
        while True:
            try:
                containers = self.client.containers(num_stats=1)
                self._identify(containers, own_id)
                missing = self._missing(own_id)
                if not missing:
                    return []
                last_error = f"not (yet) listed by cAdvisor: {', '.join(missing)}"
            except (OSError, MonitorError) as e:
                last_error = str(e)
            if time.monotonic() >= deadline:
                if containers is None:
                    raise MonitorError(f"cAdvisor at {self.client.url} never answered: {last_error}")
                return [f"CPU of {role} not measured: {last_error}" for role in self._missing(own_id)]
            time.sleep(0.5)

    def _missing(self, own_id: str | None) -> list[str]:
        wanted = [*self.services, *([LOADGEN] if own_id else [])]
        return [role for role in wanted if role not in self.ids]

    def _identify(self, containers: list[Container], own_id: str | None) -> None:
        own = find_by_id(containers, own_id) if own_id else None
        # bench's own compose project, so another copy of the lab running on
        # the same engine is not mistaken for ours.
        by_service = services_of_project(containers, own.project if own else None)
        found = {s: by_service[s] for s in self.services if s in by_service}
        if own:
            found[LOADGEN] = own
        for role, c in found.items():
            if c.latest is not None:
                self.ids[role] = c.id
                self.allowance[role] = c.cpu_allowance
                # bench reads /proc/stat of its own host only: another host's
                # CPU numbers name other cores, so they are not compared
                self.cpusets[role] = c.cpuset if c.host == getattr(self.client, "local", c.host) else ()
                self.hosts[role] = c.host
                self.memory_limits[role] = c.memory_limit_bytes
                self.images[role] = {"image": c.image, "image_id": c.image_id}
                self.stores[role] = c.store

    def find_counters(self, cgroup_dir: str, roles: list[str]) -> dict[str, str]:
        """Finds, under cgroup_dir (the host's /sys/fs/cgroup, mounted
        read-only), the CPU counter of each of `roles`, each checked against
        cAdvisor's latest reading of it; returns role -> why bench reads that
        one from cAdvisor's stamps instead. Only bench's own host: a
        container on another (tools/lab/hosts.py) is in another kernel's tree."""
        root = Path(cgroup_dir) if cgroup_dir else None
        if root is None or not root.is_dir():
            why = "CGROUP_DIR is empty" if root is None else f"{root} is not there (compose.yaml mounts it)"
            return {role: why for role in roles}
        try:
            listed = {c.id: c for c in self.client.containers(num_stats=1)}
        except MonitorError as e:
            return {role: f"cAdvisor did not list the containers: {e}" for role in roles}
        files, fallback = {}, {}
        for role in roles:
            container = listed.get(self.ids.get(role, ""))
            if container is None or container.latest is None:
                fallback[role] = "not listed by cAdvisor"
            elif container.host != getattr(self.client, "local", container.host):
                fallback[role] = "on another host than bench's" + (f" ({container.host})" if container.host else "")
            else:
                fallback[role] = self._counter_file(root, container, files, role)
        self.counters = cgroup_cpu.CgroupCounters(files)
        return {role: why for role, why in fallback.items() if why}

    def _counter_file(self, root: Path, container, files: dict[str, Path], role: str) -> str:
        """Adds the container's counter file to `files`; '' when found, else why not."""
        try:
            path = cgroup_cpu.counter_file(root, container.name)
        except cgroup_cpu.CgroupError as e:
            return str(e)
        if path is None:
            return f"no CPU counter of {container.name} under {root}"
        try:
            value, at = cgroup_cpu.read_counter(path), time.time_ns()
        except (OSError, cgroup_cpu.CgroupError) as e:
            return f"{path} unreadable: {e}"
        latest = container.latest
        if not cgroup_cpu.agrees(value, at, latest.cpu_total_ns, latest.timestamp_ns,
                                 self.allowance.get(role) or os.cpu_count() or 1):
            return f"{path} reads {value} ns, cAdvisor {latest.cpu_total_ns} ns: not the same container's"
        files[role] = path
        return ""

    def read_counters(self, roles) -> dict[str, cgroup_cpu.Reading]:
        """role -> its CPU counter now, for those of `roles` bench reads itself."""
        return self.counters.read(roles)

    def window(self, target: str, run: usage.WindowInput, loadgen_allowance: float | None,
               together: tuple[str, ...] = ()):
        """(cpu by role, flags, figures) of one timed run that has just
        ended: the counters' series over it, from cAdvisor's stored stats
        (about one entry a second). A run too short to hold two entries of a
        container waits, up to FRESH_TIMEOUT, for the first entry after it.
        `together`: the targets loaded at the same time as this one (an A/B
        duet), whose CPU is read over the same window."""
        check_stored(run.start_ns, time.time_ns())
        give_up = time.monotonic() + FRESH_TIMEOUT
        entries = int((time.time_ns() - run.start_ns) / 1e9 / HOUSEKEEPING_INTERVAL) + 4
        while True:
            containers = {c.id: c for c in self.client.containers(num_stats=entries)}
            machines = self.client.machines(num_stats=entries)
            # A run's cost: its target's, the databases' and bench's; the other
            # targets sit idle and are left out.
            series = {role: list(containers[i].stats) for role, i in self.ids.items()
                      if (role in (target, LOADGEN, *together) or role in self.databases) and i in containers}
            waiting = [role for role, s in series.items()
                       if usage.run_edges(s, run.start_ns, run.end_ns, run.completions)[0] is None]
            if not waiting or time.monotonic() >= give_up:
                break
            time.sleep(HOUSEKEEPING_INTERVAL / 2)
        return usage.window(
            series, self.allowance, self.cpusets, target, run, loadgen_allowance,
            all_series={i: list(c.stats) for i, c in containers.items()}, machines=machines,
            host_cpus=os.cpu_count() or 1, together=together)

    def idle(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """role -> cores of every watched container over a span that has just
        ended in which bench ran nothing (a role whose series does not
        cover it is left out)."""
        give_up = time.monotonic() + FRESH_TIMEOUT
        entries = int((time.time_ns() - start_ns) / 1e9 / HOUSEKEEPING_INTERVAL) + 4
        while True:
            containers = {c.id: c for c in self.client.containers(num_stats=entries)}
            found = {role: usage.idle_cores(list(containers[i].stats), start_ns, end_ns)
                     for role, i in self.ids.items() if i in containers}
            if all(v is not None for v in found.values()) or time.monotonic() >= give_up:
                return {role: round(v, 4) for role, v in found.items() if v is not None}
            time.sleep(HOUSEKEEPING_INTERVAL / 2)

    # --- background sampling, for the charts ---------------------------------
    def start_sampling(self) -> None:
        self._thread = threading.Thread(target=self._sample_loop, name="cadvisor-sampler", daemon=True)
        self._thread.start()

    def stop_sampling(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)
        self._sample()  # the last window's end is in the series too

    def _sample_loop(self) -> None:
        while not self._stop.wait(SAMPLE_INTERVAL):
            self._sample()

    def _sample(self) -> None:
        try:
            # 3 entries, so a tick that drifts past a housekeeping loses none.
            containers = {c.id: c for c in self.client.containers(num_stats=3)}
        except MonitorError:
            self.sample_errors += 1
            return
        with self._lock:
            for role, container_id in self.ids.items():
                c = containers.get(container_id)
                if c is None:
                    continue
                series = self.samples.setdefault(role, [])
                newest = series[-1].timestamp_ns if series else 0
                series += [s for s in c.stats if s.timestamp_ns > newest]

    def serialised_samples(self) -> dict[str, list[list[int]]]:
        """role -> [[timestamp_ns, cpu_total_ns, working_set_bytes], ...]"""
        with self._lock:
            return {role: [[s.timestamp_ns, s.cpu_total_ns, s.working_set_bytes] for s in series]
                    for role, series in self.samples.items()}


def own_id() -> str | None:
    try:
        return own_container_id(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return None
