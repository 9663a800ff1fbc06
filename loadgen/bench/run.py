"""Orchestrates a bench run: wait, verify, time, write results/<run-id>/."""
import json
import math
from dataclasses import asdict
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from . import conformance, environment, settings as settings_mod
from .monitor import LOADGEN, CadvisorClient, Monitor, MonitorError, own_id
from .report import render_markdown
from .results import Comparison, Results, Run, SweepPoint, TargetResult, ToolResult, repeated_run
from .timing import Measurement, TimingError, run_ab, run_wrk
from .usage import LOADGEN_BOUND, tool_bound
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


def load_manifest(files_dir: Path) -> dict:
    """The seed's manifest: `files`, and the seed's own wall time, `seconds`."""
    path = files_dir / "manifest.json"
    if not path.exists():
        raise SystemExit(f"bench: error: no manifest at {path}: the seed service has not completed")
    return json.loads(path.read_text())


class Phases:
    """Wall seconds of each phase of a run, in order, for results.phases."""
    def __init__(self, seconds: dict):
        self.seconds = seconds
        self._began = time.monotonic()

    def end(self, name: str, extra: float = 0.0) -> None:
        now_ = time.monotonic()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now_ - self._began + extra, 1)
        self._began = now_


def check_targets(cfg, files: list[dict], phases: Phases | None = None) -> list[TargetResult]:
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
    if phases:
        phases.end("verify")
    reference = next((t for t in checked if t.name == cfg.reference and t.verified), None)
    if reference is None:
        say(f"conformance not checked: the reference {cfg.reference} is not among the verified targets")
        return checked
    for target in checked:
        if target.verified:
            check_conformance(cfg, reference, target, files)
    return checked


def check_conformance(cfg, reference: TargetResult, target: TargetResult, files: list[dict]) -> None:
    """Judges every HTTP answer against the reference's; a target that fails
    is not timed unless BENCH_ALLOW_NONCONFORMING, and then its rows are marked."""
    cases = conformance.check(reference.url, target.url, files)
    target.conformance = [asdict(c) for c in cases]
    failed = [c for c in cases if not c.passed]
    target.conforming = not failed
    say(f"{target.name}: conformance {len(cases) - len(failed)} passed, {len(failed)} failed"
        + "".join(f"\n    FAIL {c.case}: expected {c.expected}; got {c.got}" for c in failed[:10]))
    if failed and not cfg.allow_nonconforming:
        target.verified = False
        target.error = (f"{len(failed)} of {len(cases)} conformance cases failed (first: {failed[0].case}); "
                        f"set BENCH_ALLOW_NONCONFORMING=1 to time it anyway")


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


def bound(m: Measurement, allowance: float) -> bool:
    """The tool was at its CPU limit in this run (its own rusage)."""
    return tool_bound(m.loadgen_cpu_seconds, m.seconds, m.threads, allowance)


PRIMER_REQUESTS = 10  # first requests to a (target, file): cold caches, first connections; not counted


def time_case(cfg, target: TargetResult, f: dict, c: int, run_dir: Path, monitor: Monitor | None,
              allowance: float) -> Run:
    url = f"{target.url}/files/{f['name']}"
    case = f"{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
    try:
        run_ab(url, cfg.warmup_requests, c)  # the warm-up: not counted
        window = start_window(monitor)
        reps = [run_ab(url, cfg.requests, c, run_dir, f"{case}-r{i}") for i in range(1, cfg.repetitions + 1)]
    except TimingError as e:
        say(f"{case}: ab failed: {e}")
        return Run(target.name, f["name"], f["size"], c, cfg.requests, cfg.requests,
                   0.0, 0.0, 0.0, 0.0, 0.0, f"{case}-r1.txt")
    run = repeated_run(target.name, f["name"], f["size"], c, cfg.requests, reps)
    measure(monitor, window, run, cfg.requests * len(reps), sum(m.seconds for m in reps),
            sum(m.loadgen_cpu_seconds for m in reps))
    if LOADGEN_BOUND not in run.flags and any(bound(m, allowance) for m in reps):
        run.flags.append(LOADGEN_BOUND)  # ab's own rusage says so, cAdvisor or not
    if target.conforming is False:
        run.flags.append("nonconforming")
    say(f"{case}: {run.rps:.0f} req/s (spread {run.spread['rps']['spread']:.1%} over {len(reps)}), "
        f"{run.time_per_request_ms:.3f} ms/request, p99 {run.p99_ms:.1f} ms, {run.failed} failed, "
        f"ab CPU {sum(m.loadgen_cpu_seconds for m in reps):.2f} s in {sum(m.seconds for m in reps):.1f} s"
        f"{cpu_note(run)}")
    return run


def compare_tools(cfg, target: TargetResult, f: dict, c: int, run_dir: Path, allowance: float) -> Comparison | None:
    """ab -k and wrk at the same connection count, repetitions interleaved
    so a drift in the server weighs on both; wrk runs as long as ab -k just did."""
    url = f"{target.url}/files/{f['name']}"
    case = f"{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
    ab_k, wrk = [], []
    try:
        for i in range(1, cfg.repetitions + 1):
            ab_k.append(run_ab(url, cfg.requests, c, run_dir, f"{case}-abk-r{i}", keepalive=True))
            wrk.append(run_wrk(url, c, math.ceil(ab_k[-1].seconds), run_dir, f"{case}-wrk-r{i}"))
    except TimingError as e:
        say(f"{case}: ab -k / wrk failed: {e}")
        return None
    flags = lambda ms: [LOADGEN_BOUND] if any(bound(m, allowance) for m in ms) else []  # noqa: E731
    comparison = Comparison(target.name, f["name"], f["size"], c, ToolResult.of(ab_k, flags(ab_k)),
                            ToolResult.of(wrk, flags(wrk)))
    say(f"{case}: ab -k {comparison.ab_keepalive.rps:.0f} req/s, wrk {comparison.wrk.rps:.0f} req/s "
        f"({comparison.difference:.1%} apart{', DISAGREE' if comparison.disagree else ''})")
    return comparison


def time_target(cfg, target: TargetResult, files: list[dict], run_dir: Path, results: Results,
                monitor: Monitor | None = None, allowance: float = 1.0) -> float:
    """Times every case of a target into results; returns the seconds spent
    on the ab -k / wrk comparison (a phase of its own)."""
    compared = 0.0
    for f in files:
        try:
            run_ab(f"{target.url}/files/{f['name']}", PRIMER_REQUESTS, 1)  # the primer: not counted
        except TimingError as e:
            say(f"{target.name} {f['name']}: primer failed: {e}")
        for c in cfg.concurrency:
            results.runs.append(time_case(cfg, target, f, c, run_dir, monitor, allowance))
            if "wrk" in cfg.tools:
                began = time.monotonic()
                comparison = compare_tools(cfg, target, f, c, run_dir, allowance)
                if comparison:
                    results.comparisons.append(comparison)
                else:
                    results.warnings.append(f"{target.name} {f['name']} c={c}: ab -k / wrk not compared "
                                            "(see bench's log)")
                compared += time.monotonic() - began
    return compared


def sweep_target(cfg, target: TargetResult, files: list[dict], run_dir: Path, allowance: float) -> list[SweepPoint]:
    """One run per level and tool, BENCH_SWEEP_REQUESTS requests (at least one
    per connection); the timed cases before it warmed every path."""
    points = []
    for f in files:
        url = f"{target.url}/files/{f['name']}"
        for c in cfg.sweep:
            name = f"sweep-{target.name}-{f['name'].removesuffix('.bin')}-c{c}"
            try:
                ms = [run_ab(url, max(cfg.sweep_requests, c), c, run_dir, name)]
                if "wrk" in cfg.tools:
                    ms.append(run_wrk(url, c, math.ceil(ms[0].seconds), run_dir, f"{name}-wrk"))
            except TimingError as e:
                say(f"{name}: failed: {e}")
                continue
            for m in ms:
                points.append(SweepPoint(target.name, f["name"], f["size"], c, m.tool, m.requests, m.failed,
                                         m.rps, m.p50_ms, m.p99_ms, round(m.loadgen_cores, 4), m.raw_output,
                                         [LOADGEN_BOUND] if bound(m, allowance) else []))
            say(f"{name}: " + ", ".join(f"{m.tool} {m.rps:.0f} req/s" + (" [loadgen-bound]" if bound(m, allowance)
                                                                         else "") for m in ms))
    return points


def cpu_note(run: Run) -> str:
    if not run.cpu or run.target not in run.cpu:
        return ""
    note = f"; CPU ms/request {run.target} {run.cpu[run.target]['cpu_ms_per_request']:.3f}"
    note += "".join(f" {role} {u['cpu_ms_per_request']:.3f}" for role, u in run.cpu.items() if role != run.target)
    return note + (f" [{', '.join(run.flags)}]" if run.flags else "")


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
    results.targets = check_targets(cfg, files, phases)
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
