"""Orchestrates a bench run: wait, verify, check conformance, time, sweep,
chart, write results/<run-id>/."""
import sys
import time
from pathlib import Path

from . import environment, settings as settings_mod
from .cases import sweep_target, time_target
from .checks import check_all_conformance, verify_targets
from .cpu_windows import connect_monitor, database_service
from .monitor import LOADGEN
from .progress import say
from .report import render_markdown
from .results import Results
from .run_dir import load_manifest, new_run_dir, now, point_latest


class Phases:
    """Wall seconds of each phase of a run, in order, for results.phases."""
    def __init__(self, seconds: dict):
        self.seconds = seconds
        self._began = time.monotonic()

    def end(self, name: str, extra: float = 0.0) -> None:
        now_ = time.monotonic()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now_ - self._began + extra, 1)
        self._began = now_


def draw_charts(cfg, results: Results, run_dir: Path) -> None:
    """PNGs per timed target: CPU over time, requests/s against concurrency;
    a charting failure never costs the results."""
    try:
        from .charts import cpu_chart, sweep_chart
        for t in sorted({r.target for r in results.runs}):
            name = f"cpu-{t}.png"
            if results.cpu_samples and cpu_chart(results, t, database_service(cfg), LOADGEN, run_dir / name):
                results.charts[t] = name
            name = f"sweep-{t}.png"
            if sweep_chart(results, t, run_dir / name):
                results.sweep_charts[t] = name
    except Exception as e:  # noqa: BLE001 - any matplotlib failure
        results.warnings.append(f"charts not drawn: {e}")


def main() -> int:
    started = time.monotonic()
    try:
        cfg = settings_mod.from_env()
    except settings_mod.SettingsError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    results_dir = Path(cfg.results_dir)
    manifest = load_manifest(Path(cfg.files_dir))
    files = manifest["files"]
    run_dir = new_run_dir(results_dir)
    results = Results(run_id=run_dir.name, started_at=now(),
                      parameters=settings_mod.recorded_parameters())
    if manifest.get("seconds") is not None:
        results.phases["seed"] = manifest["seconds"]
    say(f"run {run_dir.name}: targets {' '.join(cfg.targets)}; files "
        f"{' '.join(f['name'] for f in files)}; concurrency {cfg.concurrency}; {cfg.requests} requests per case, "
        f"{cfg.repetitions} repetitions; tools {' '.join(cfg.tools)}; sweep {' '.join(map(str, cfg.sweep)) or 'off'}")
    results.environment = environment.describe(cfg.mongo_uri)
    allowance = results.environment["loadgen_allowance_cores"]
    say(f"database: {results.environment['server']}; load generator allowance {allowance:g} cores")

    phases = Phases(results.phases)
    results.targets = verify_targets(cfg, files)
    phases.end("verify")
    check_all_conformance(cfg, results.targets, files)
    phases.end("conformance")
    monitor = connect_monitor(cfg, started + cfg.startup_timeout, results)
    cases = sum(t.verified for t in results.targets) * len(files) * len(cfg.concurrency)
    say(f"timing {cases} cases x {cfg.repetitions} repetitions")
    compared = 0.0
    for target in results.targets:
        if target.verified:
            compared += time_target(cfg, target, files, run_dir, results, monitor, allowance)
            results.write_json(run_dir / "results.json")  # nothing lost if a later case dies
    phases.end("timed cases", -compared)
    if compared:
        results.phases["ab -k vs wrk"] = round(compared, 1)
    if cfg.sweep:
        for target in results.targets:
            if target.verified:
                results.sweep += sweep_target(cfg, target, files, run_dir, allowance)
        phases.end("sweep")
    if monitor:
        monitor.stop_sampling()
        results.cpu_samples = monitor.serialised_samples()
        if monitor.sample_errors:
            results.warnings.append(f"{monitor.sample_errors} of cAdvisor's once-a-second samples failed: "
                                    "the CPU charts have gaps there (the timed windows do not depend on them)")
    draw_charts(cfg, results, run_dir)
    phases.end("charts")
    side_failures = ([f"{c.target} {c.file} c={c.concurrency}: {t.tool} counted {t.failed} failed requests"
                      for c in results.comparisons for t in (c.ab_keepalive, c.wrk) if t.failed]
                     + [f"sweep {p.target} {p.file} c={p.concurrency}: {p.tool} counted {p.failed} failed requests"
                        for p in results.sweep if p.failed])
    results.warnings += side_failures
    results.finished_at = now()
    results.environment["duration_seconds"] = round(time.monotonic() - started, 1)
    results.phases["bench total"] = results.environment["duration_seconds"]
    results.write_json(run_dir / "results.json")
    (run_dir / "report.md").write_text(render_markdown(results))
    point_latest(results_dir, run_dir)
    print(render_markdown(results), flush=True)
    say("phases (wall seconds): " + ", ".join(f"{k} {v:g}" for k, v in results.phases.items()))
    say(f"wrote {run_dir}/ (results.json, report.md, raw outputs) in "
        f"{results.environment['duration_seconds']:.0f} s")
    if results.failed:
        say("FAILED: a target failed verification or ab counted failed requests")
        return 1
    return 0
