"""Between bench and cAdvisor: connect before timing (waiting for it and
for every container to be listed). A cAdvisor failure costs only the CPU
figures, never the timings."""
import time
from urllib.parse import urlsplit

from ..measure.monitor import Monitor, MonitorError, cadvisor_hosts, own_id
from ..progress import say
from ..results import Results


def database_service(cfg) -> str:
    """The GridFS database's compose service: the host of MONGO_URI."""
    return urlsplit(cfg.mongo_uri).hostname or "mongo"


def database_services(cfg) -> list[str]:
    """Every store's compose service whose CPU a run is charged: MongoDB's,
    and PostgreSQL's when POSTGRES_URL names one."""
    found = [database_service(cfg)]
    if cfg.postgres_url:
        found.append(urlsplit(cfg.postgres_url).hostname or "postgres")
    return found


def connect_monitor(cfg, deadline: float, results: Results) -> Monitor | None:
    """cAdvisor, waited for until the startup deadline; without it the run
    goes on and records cpu as null, with a warning in the report."""
    if not cfg.cadvisor_url:
        results.warnings.append("CADVISOR_URL is empty: CPU and memory were not measured.")
        return None
    hosts = cadvisor_hosts(cfg.cadvisor_url)
    # The targets that will be timed: one refused before (no answer, not
    # conforming) may have no container at all, and waiting for it to be
    # listed held the run until the startup deadline (3 minutes).
    timed = [t.name for t in results.targets if t.verified]
    monitor = Monitor(hosts, timed, database_services(cfg))
    try:
        warnings = monitor.connect(max(deadline, time.monotonic() + 10), own_id())
    except MonitorError as e:
        results.warnings.append(f"CPU and memory were not measured: {e}")
        say(f"WARNING: {results.warnings[-1]}")
        return None
    for w in warnings:
        say(f"WARNING: {w}")
    results.warnings += warnings
    # What each container actually ran, from Docker, not the variables' text.
    results.environment["images"] = dict(sorted(monitor.images.items()))
    # Each path's store as its container declares it (label lab.store): the
    # report groups by what the run recorded, so adding a path changes no bench code.
    for target in results.targets:
        target.store = monitor.stores.get(target.name)
    if len(hosts.clients) > 1:
        results.environment["hosts"] = hosts_of(hosts, monitor.hosts, results)
    say(f"cAdvisor at {cfg.cadvisor_url}: watching {', '.join(sorted(monitor.ids))}")
    monitor.start_sampling()
    return monitor


def hosts_of(hosts, roles: dict[str, str], results: Results) -> list[dict]:
    """The hosts of a lab split by tools/lab/hosts.py: each one's cAdvisor, CPUs,
    memory, and the containers it ran (by role)."""
    try:
        machines = hosts.machines_by_host()
    except MonitorError as e:
        results.warnings.append(f"the hosts' CPUs and memory were not read: {e}")
        machines = {}
    return [{"name": host, "cadvisor": client.url, "bench": host == hosts.local,
             **(machines[host].as_dict() if host in machines else {}),
             "containers": sorted(role for role, on in roles.items() if on == host)}
            for host, client in hosts.clients.items()]
