"""Between bench and cAdvisor: connect, open a window before a case's
counted repetitions and close it after, into the run's cpu, flags and
cpu_window. A cAdvisor failure costs only those, never the timings."""
import time
from urllib.parse import urlsplit

from .monitor import CadvisorClient, Monitor, MonitorError, own_id
from .progress import say
from .results import Results, Run


def database_service(cfg) -> str:
    """The database's compose service: the host of MONGO_URI."""
    return urlsplit(cfg.mongo_uri).hostname or "mongo"


def connect_monitor(cfg, deadline: float, results: Results) -> Monitor | None:
    """cAdvisor, waited for until the startup deadline; without it the run
    goes on and records cpu as null, with a warning in the report."""
    if not cfg.cadvisor_url:
        results.warnings.append("CADVISOR_URL is empty: CPU and memory were not measured.")
        return None
    monitor = Monitor(CadvisorClient(cfg.cadvisor_url), cfg.targets, database_service(cfg))
    try:
        warnings = monitor.connect(max(deadline, time.monotonic() + 10), own_id())
    except MonitorError as e:
        results.warnings.append(f"CPU and memory were not measured: {e}")
        say(f"WARNING: {results.warnings[-1]}")
        return None
    for w in warnings:
        say(f"WARNING: {w}")
    results.warnings += warnings
    say(f"cAdvisor at {cfg.cadvisor_url}: watching {', '.join(sorted(monitor.ids))}")
    monitor.start_sampling()
    return monitor


def measure(monitor: Monitor | None, start, run: Run, requests: int, ab_seconds: float,
            ab_cpu_seconds: float) -> None:
    """Fills run.cpu, flags and cpu_window over all of a case's counted
    repetitions; a cAdvisor failure loses only them."""
    if monitor is None or start is None:
        return
    try:
        run.cpu, flags, run.cpu_window = monitor.end_window(start, run.target, requests, ab_seconds,
                                                            ab_cpu_seconds)
        run.flags += [f for f in flags if f not in run.flags]
    except (OSError, MonitorError) as e:
        say(f"{run.target} {run.file} c={run.concurrency}: CPU not measured: {e}")


def start_window(monitor: Monitor | None):
    if monitor is None:
        return None
    try:
        return monitor.start_window()
    except (OSError, MonitorError) as e:
        say(f"CPU window not opened: {e}")
        return None


def cpu_note(run: Run) -> str:
    if not run.cpu or run.target not in run.cpu:
        return ""
    note = f"; CPU ms/request {run.target} {run.cpu[run.target]['cpu_ms_per_request']:.3f}"
    note += "".join(f" {role} {u['cpu_ms_per_request']:.3f}" for role, u in run.cpu.items() if role != run.target)
    return note + (f" [{', '.join(run.flags)}]" if run.flags else "")
