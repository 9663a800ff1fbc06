"""Between bench and cAdvisor: connect before timing (waiting for it and
for every container to be listed). A cAdvisor failure costs only the CPU
figures, never the timings."""
import time
from urllib.parse import urlsplit

from .monitor import CadvisorClient, Monitor, MonitorError, own_id
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
    monitor = Monitor(CadvisorClient(cfg.cadvisor_url), cfg.targets, database_services(cfg))
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
    say(f"cAdvisor at {cfg.cadvisor_url}: watching {', '.join(sorted(monitor.ids))}")
    monitor.start_sampling()
    return monitor
