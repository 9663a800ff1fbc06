"""Orchestrates a bench run: wait, verify, time, write results/<run-id>/."""
import json
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from . import environment, settings as settings_mod
from .monitor import LOADGEN, CadvisorClient, Monitor, MonitorError, own_id
from .report import render_markdown
from .results import Results, Run, TargetResult
from .timing import TimingError, run_ab
from .verify import VerificationError, verify_target, wait_until_healthy


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_dir(results_dir: Path) -> Path:
    """results/<UTC time>, never an existing one."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = results_dir / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run directory under {results_dir}")


def point_latest(results_dir: Path, run_dir: Path) -> None:
    tmp = results_dir / ".latest.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    tmp.replace(results_dir / "latest")


def load_manifest(files_dir: Path) -> list[dict]:
    path = files_dir / "manifest.json"
    if not path.exists():
        raise SystemExit(f"bench: error: no manifest at {path}: the seed service has not completed")
    return json.loads(path.read_text())["files"]


def check_targets(cfg, files: list[dict]) -> list[TargetResult]:
    deadline = time.monotonic() + cfg.startup_timeout
    checked = []
    for name in cfg.targets:
        url = cfg.url_of(name)
        try:
            wait_until_healthy(url, deadline)
            server = verify_target(url, files)
            checked.append(TargetResult(name, url, True, server_header=server))
            say(f"{name}: verified {len(files)} files (sha256, Content-Length, 404)")
        except (VerificationError, OSError) as e:
            checked.append(TargetResult(name, url, False, error=str(e)))
            say(f"{name}: FAILED verification, will not be timed: {e}")
    return checked


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


def children_cpu_seconds() -> float:
    """CPU of this process's finished children: ab's, bracketed around a run."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measure(monitor: Monitor | None, start, run: Run, ab_seconds: float, ab_cpu_seconds: float) -> None:
    """Fills run.cpu, flags and cpu_window; a cAdvisor failure loses only them."""
    if monitor is None or start is None:
        return
    try:
        run.cpu, run.flags, run.cpu_window = monitor.end_window(start, run.target, run.requests, ab_seconds,
                                                                ab_cpu_seconds)
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


def time_target(cfg, target: TargetResult, files: list[dict], run_dir: Path,
                monitor: Monitor | None = None) -> list[Run]:
    runs = []
    for f in files:
        url = f"{target.url}/files/{f['name']}"
        for c in cfg.concurrency:
            case = f"{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
            try:
                run_ab(url, cfg.warmup_requests, c)
                window = start_window(monitor)  # after the warm-up: it is not counted
                ab_cpu = children_cpu_seconds()
                summary, pct = run_ab(url, cfg.requests, c, run_dir, case)
                ab_cpu = children_cpu_seconds() - ab_cpu
            except TimingError as e:
                say(f"{case}: ab failed: {e}")
                runs.append(Run(target.name, f["name"], f["size"], c, cfg.requests, cfg.requests,
                                0.0, 0.0, 0.0, 0.0, 0.0, f"{case}.txt"))
                continue
            failed = summary.failed + summary.non_2xx + (cfg.requests - summary.complete)
            run = Run(target.name, f["name"], f["size"], c, cfg.requests, failed, summary.rps,
                      summary.time_per_request_ms, summary.transfer_kbps, pct[50], pct[99], f"{case}.txt")
            measure(monitor, window, run, summary.seconds, ab_cpu)
            runs.append(run)
            say(f"{case}: {summary.rps:.0f} req/s, {summary.time_per_request_ms:.3f} ms/request, "
                f"p99 {pct[99]:.1f} ms, {failed} failed ({summary.seconds:.1f} s){cpu_note(run)}")
    return runs


def cpu_note(run: Run) -> str:
    if not run.cpu or run.target not in run.cpu:
        return ""
    note = f"; CPU ms/request {run.target} {run.cpu[run.target]['cpu_ms_per_request']:.3f}"
    note += "".join(f" {role} {u['cpu_ms_per_request']:.3f}" for role, u in run.cpu.items() if role != run.target)
    return note + (f" [{', '.join(run.flags)}]" if run.flags else "")


def draw_charts(cfg, results: Results, run_dir: Path) -> None:
    """One PNG per timed target; a charting failure never costs the results."""
    try:
        from .charts import cpu_chart
        for t in {r.target for r in results.runs}:
            name = f"cpu-{t}.png"
            if cpu_chart(results, t, database_service(cfg), LOADGEN, run_dir / name):
                results.charts[t] = name
    except Exception as e:  # noqa: BLE001 - any matplotlib failure
        results.warnings.append(f"CPU charts not drawn: {e}")


def main() -> int:
    started = time.monotonic()
    try:
        cfg = settings_mod.from_env()
    except settings_mod.SettingsError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    results_dir = Path(cfg.results_dir)
    files = load_manifest(Path(cfg.files_dir))
    run_dir = new_run_dir(results_dir)
    results = Results(run_id=run_dir.name, started_at=now(),
                      parameters=settings_mod.recorded_parameters())
    say(f"run {run_dir.name}: targets {' '.join(cfg.targets)}; files "
        f"{' '.join(f['name'] for f in files)}; concurrency {cfg.concurrency}; {cfg.requests} requests per case")
    results.environment = environment.describe(cfg.mongo_uri)
    say(f"database: {results.environment['server']}")

    results.targets = check_targets(cfg, files)
    monitor = connect_monitor(cfg, started + cfg.startup_timeout, results)
    cases = sum(t.verified for t in results.targets) * len(files) * len(cfg.concurrency)
    say(f"timing {cases} cases")
    for target in results.targets:
        if target.verified:
            results.runs += time_target(cfg, target, files, run_dir, monitor)
            results.write_json(run_dir / "results.json")  # nothing lost if a later case dies

    if monitor:
        monitor.stop_sampling()
        results.cpu_samples = monitor.serialised_samples()
        draw_charts(cfg, results, run_dir)
    results.finished_at = now()
    results.environment["duration_seconds"] = round(time.monotonic() - started, 1)
    results.write_json(run_dir / "results.json")
    (run_dir / "report.md").write_text(render_markdown(results))
    point_latest(results_dir, run_dir)
    print(render_markdown(results), flush=True)
    say(f"wrote {run_dir}/ (results.json, report.md, raw ab outputs) in "
        f"{results.environment['duration_seconds']:.0f} s")
    if results.failed:
        say("FAILED: a target failed verification or ab counted failed requests")
        return 1
    return 0
