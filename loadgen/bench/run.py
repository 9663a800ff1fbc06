"""Orchestrates a bench run: wait, verify, check conformance, time, sweep,
chart, write results/<run-id>/."""
import json
import signal
import sys
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path

from . import environment, settings as settings_mod
from .benchmark.change import (WINDOW_STRETCH, DUET, RESTART_S, ChangeRun, admitting_seconds, metrics_of,
                               sizing_seconds)
from .measure.paired import blocks_for_a_verdict
from .benchmark.cases import Timer
from .benchmark.costs import MEASURED_OVERHEAD_S, warm_up_seconds
from .benchmark.phase import Phase, PhaseRun, Scope
from .benchmark.phases import PHASES, Plan
from .checks.before_timing import check_all_conformance, verify_targets
from .benchmark.cpu_windows import connect_monitor
from .clients.link import LinkError, measure_link
from .progress import Progress, clock, say
from .measure.calibration import calibration_for
from .report.change import last_calibration, render_change
from .report.markdown import render_markdown
from .results import Results
from .run_dir import (RESULTS_NOT_WRITABLE, VOLUME_NOT_WRITABLE, load_manifest, new_run_dir, not_writable, now,
                      point_latest)


class PhaseClock:
    """Wall seconds of each phase of a run, in order, for results.phases."""
    def __init__(self, seconds: dict):
        self.seconds = seconds
        self._began = time.monotonic()

    def end(self, name: str, extra: float = 0.0) -> None:
        now_ = time.monotonic()
        self.seconds[name] = round(self.seconds.get(name, 0.0) + now_ - self._began + extra, 1)
        self._began = now_


def write_figures(results: Results, run_dir: Path) -> None:
    """report.md's charts, the page's (report/svg.py), as the SVG files it
    links, beside it; a rendering failure never costs the results."""
    try:
        from .report.change import change_report
        from .report.sections import head, sections
        from .report.svg import figure_files
        report = change_report(results) if results.ab else None
        for name, svg in figure_files(report.head + report.sections if report else
                                      head(results) + sections(results)).items():
            (run_dir / name).write_text(svg, encoding="utf-8")
    except Exception as e:  # noqa: BLE001 - whatever broke in rendering
        results.warnings.append(f"charts not written: {type(e).__name__}: {e}")


def write_pages(results: Results, run_dir: Path, results_dir: Path) -> None:
    """index.html, the exports (CSV, Bencher, github-action-benchmark) and
    results/index.html; like the charts, a rendering failure never costs
    the results, already written."""
    try:
        from .report.exports import write_exports
        from .report.html import write_page
        from .report.run_index import write_index
    except Exception as e:  # noqa: BLE001 - a broken renderer module costs its pages only
        say(f"index.html and exports not written: {type(e).__name__}: {e}")
        return
    for what, write in (("exports", lambda: write_exports(results, run_dir)),
                        ("index.html", lambda: write_page(run_dir, results, all_runs=True)),
                        ("results/index.html", lambda: write_index(results_dir))):
        try:
            write()
        except Exception as e:  # noqa: BLE001 - whatever broke in rendering
            say(f"{what} not written: {type(e).__name__}: {e}")


def open_loop_words(cfg) -> str:
    if not cfg.open_loop:
        return "off"
    if cfg.open_loop_curve:
        return (f"at {', '.join(format(s, '.0%') for s in cfg.open_loop_curve)} of capacity "
                f"(the headline's {cfg.open_loop:.0%})")
    return f"at {cfg.open_loop:.0%} of capacity"


class Interrupted(Exception):
    """SIGTERM (docker compose stop) or Ctrl-C: stop timing, keep what was measured."""


def _interrupt(signum, _frame):
    raise Interrupted(signal.Signals(signum).name)


def hold_stops_for_the_report() -> None:
    """From here on SIGTERM and Ctrl-C are let pass: a second `docker compose
    stop` or Ctrl-C no longer cuts the report in half. Docker's SIGKILL,
    after its grace period, still ends the process."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)


def time_everything(cfg, results: Results, scope: Scope, run_dir: Path, monitor, allowance: float,
                    phase_clock: PhaseClock, started: float, phases: tuple[Phase, ...] = PHASES) -> None:
    """Every phase of `phases` (bench.benchmark.phases.PHASES) the settings hold, in
    order: the rounds of every case (the headline's until its intervals are
    narrow or the budget, less the later phases' planned seconds, says
    stop), ab -k against wrk, latency at a fixed rate, the sweep, the
    working set, then seed 002's store benchmark. results.json is
    rewritten after every phase: nothing measured is lost."""
    # the budget is for the whole run, seed to report: the seed's seconds are spent already
    budget_end = started + cfg.budget_s - results.phases.get("seed", 0.0) if cfg.budget_s else None
    plan = Plan.of(cfg, scope, budget_end, phases)
    planned = plan.planned(cfg, time.monotonic())
    budgeted = plan.budgeted(cfg)
    results.timing["planned_seconds"] = round(planned, 1)
    progress = Progress(planned, ends_at=budget_end if budgeted else None)
    timer = Timer(cfg, run_dir, results, monitor, allowance, progress)

    def run_phase(phase: Phase) -> None:
        phase.run(PhaseRun(timer, scope, planned, plan.later_seconds(phase), plan.deadline(phase), budgeted))
        results.write_json(run_dir / "results.json")
        phase_clock.end(phase.name)

    for phase in plan.in_plan:
        run_phase(phase)
    results.timing["actual_seconds"] = round(time.monotonic() - progress.began, 1)
    for phase in plan.own_pace:
        run_phase(phase)
    for target, why in timer.down.items():
        results.warnings.append(f"{target} stopped answering during the run ({why}); its later cases are failed")


def time_change(cfg, results: Results, files: list[dict], run_dir: Path, monitor, allowance: float,
            phase_clock: PhaseClock) -> None:
    """An A/B run: only A against its twin B, block by block (benchmark/change.py),
    in windows of AB_WINDOW seconds after at most AB_WARMUP of warm-up."""
    ab = cfg.ab
    cfg = replace(cfg, duration=ab.window, warmup=ab.warmup)
    results.timing.update(duration_s=cfg.duration, warmup_s=cfg.warmup, max_duration_s=cfg.duration * WINDOW_STRETCH)
    cases = len(ab.files) * len(ab.concurrency)
    sizing = sizing_seconds(cfg, ab)  # per case
    # a duet's block is one window of both sides at once, the blocks design's two
    windows = 1 if ab.design == DUET else 2
    window = cfg.duration + MEASURED_OVERHEAD_S + warm_up_seconds(cfg)
    restart = RESTART_S if ab.restart_twins else 0.0
    planned = cases * (sizing + ab.blocks * (windows * window + restart))
    # a slow case (1 MB on the stand-in) stretches each window to hold its
    # requests, and warms up longer, and one past what its paths admit is
    # sized again (benchmark/change.py): the plan says how far that can go
    longest = cases * (sizing + admitting_seconds(cfg, ab)
                       + ab.blocks * (windows * (cfg.duration * WINDOW_STRETCH + MEASURED_OVERHEAD_S + cfg.warmup)
                                      + restart))
    shape = ("one window of A and B at once" if ab.design == DUET
             else "two windows, A's then B's (or B's then A's)")
    say(f"{ab.kind} {ab.a} against {ab.b}{' (' + ab.change + ')' if ab.change else ''}: {cases} cases "
        f"({' '.join(ab.files)} at c={' '.join(map(str, ab.concurrency))}) x {ab.blocks} blocks of {shape} "
        f"of at least {cfg.duration} s, each after its warm-up"
        f"{', both twins restarted before each block' if ab.restart_twins else ''}; "
        f"expected about {clock(planned)}, up to "
        f"{clock(longest)} if every case is slow (the time left follows the pace)")
    results.timing["planned_seconds"] = round(planned, 1)
    tests = cases * len(metrics_of(ab.design))
    needed = blocks_for_a_verdict(tests)
    if ab.blocks < needed:
        results.warnings.append(f"AB_BLOCKS={ab.blocks} is too few for {tests} case-metrics: even "
                                f"if every block agrees, no verdict can be faster or slower once adjusted "
                                f"for the table; {needed} blocks can")
        say(f"WARNING: {results.warnings[-1]}")
    progress = Progress(planned)
    timer = Timer(cfg, run_dir, results, monitor, allowance, progress)
    ChangeRun(cfg, timer, results, cfg.cache_upstream).run(files)
    results.ab["calibration"] = last_calibration(Path(cfg.results_dir), results)
    results.ab["calibration_set"] = calibration_for(Path(cfg.results_dir), {"run_id": results.run_id, **results.ab})
    results.timing["actual_seconds"] = round(time.monotonic() - progress.began, 1)
    phase_clock.end("A/B blocks")


def measure_the_link(link: tuple[str, int], shaping: str, results: Results) -> None:
    """The link to the paths' host, before timing: the bound of link-bound."""
    try:
        results.environment["link"] = found = {**measure_link(*link), "shaped": shaping}
    except LinkError as e:
        results.warnings.append(f"the link was not measured, so no row was judged link-bound: {e}")
        say(f"WARNING: {results.warnings[-1]}")
        return
    say(f"link to {link[0]}: {found['bits_per_second'] / 1e6:.1f} Mbit/s received over {found['seconds']:g} s "
        f"(iperf3, paths' host to bench's)")


def main() -> int:
    started = time.monotonic()
    try:
        cfg = settings_mod.from_env()
    except settings_mod.SettingsError as e:
        print(f"bench: error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _interrupt)
    results_dir = Path(cfg.results_dir)
    problems = [not_writable(results_dir, RESULTS_NOT_WRITABLE)]
    if cfg.write:
        problems.append(not_writable(Path(cfg.write_dir), VOLUME_NOT_WRITABLE, volume="writes"))
    for problem in filter(None, problems):
        print(f"bench: error: {problem}", file=sys.stderr)
    if any(problems):
        return 2
    manifest = load_manifest(Path(cfg.files_dir))
    files = manifest["files"]
    file_set = manifest.get("file_set")
    run_dir = new_run_dir(results_dir)
    results = Results(run_id=run_dir.name, started_at=now(),
                      parameters=settings_mod.recorded_parameters(), timing=settings_mod.effective(cfg))
    if manifest.get("seconds") is not None:
        results.phases["seed"] = manifest["seconds"]
    if cfg.ab:
        say(f"run {run_dir.name}: {cfg.ab.kind} of {cfg.ab.a} against {cfg.ab.b}; verified: {' '.join(cfg.targets)}")
    else:
        say(f"run {run_dir.name}: targets {' '.join(cfg.targets)}; files "
            f"{' '.join(f['name'] for f in files)}; concurrency {cfg.concurrency}; profile {cfg.profile}: "
            f"{cfg.repetitions} x {cfg.duration:g} s per case after up to {cfg.warmup:g} s of warm-up; "
            f"tools {' '.join(cfg.tools)}; "
            f"open loop {open_loop_words(cfg)}; "
            f"sweep {' '.join(map(str, cfg.sweep)) or 'off'}; working set "
            f"{file_set['spec'] if file_set and cfg.working_set else 'off'}; store writes "
            + (f"{cfg.write_files} x {cfg.write_size:,} bytes, 1 and {cfg.write_threads} threads" if cfg.write
               else "off"))
    monitor = None
    try:
        results.environment = environment.describe(cfg.mongo_uri, cfg.gridfs_db)
        allowance = results.environment["loadgen_allowance_cores"]
        say(f"database: {results.environment['server']}; load generator allowance {allowance:g} cores")
        phase_clock = PhaseClock(results.phases)
        results.targets = verify_targets(cfg, files)
        phase_clock.end("verify")
        check_all_conformance(cfg, results.targets, files)
        phase_clock.end("conformance")
        results.write_json(run_dir / "results.json")
        monitor = connect_monitor(cfg, started + cfg.startup_timeout, results)
        if cfg.link:
            measure_the_link(cfg.link, cfg.link_shaping, results)
        if cfg.ab:
            time_change(cfg, results, files, run_dir, monitor, allowance, phase_clock)
        else:
            time_everything(cfg, results, Scope([t for t in results.targets if t.verified], files,
                                                  file_set, results.run_id),
                                run_dir, monitor, allowance, phase_clock, started)
        results.status = "complete"
    except (Interrupted, KeyboardInterrupt) as e:
        results.status = "interrupted"
        results.warnings.append(f"the run was interrupted ({e or 'Ctrl-C'}): this report holds what was "
                                "measured until then")
    except Exception as e:  # noqa: BLE001 - whatever broke, what was measured is written
        results.status = f"crashed: {type(e).__name__}: {e}"
        results.warnings.append(f"bench stopped early on an error ({type(e).__name__}: {e}); this report "
                                "holds what was measured until then")
        traceback.print_exc()
    finally:
        hold_stops_for_the_report()
        finish(cfg, results, run_dir, results_dir, monitor, started)
    if results.status != "complete":
        say(f"INCOMPLETE: {results.status}")
        return 1
    if results.failed:
        say("FAILED: a target failed verification or conformance, or a case failed (see the report)")
        return 1
    return 0


def finish(cfg, results: Results, run_dir: Path, results_dir: Path, monitor, started: float) -> None:
    """Charts, results.json, report.md, index.html and the exports, whatever
    happened before."""
    phase_clock = PhaseClock(results.phases)
    if monitor:
        monitor.stop_sampling()
        results.cpu_samples = monitor.serialised_samples()
        if monitor.sample_errors:
            results.warnings.append(f"{monitor.sample_errors} of cAdvisor's once-a-second samples failed: "
                                    "cpu_samples have gaps there (the timed windows do not depend on them)")
    write_figures(results, run_dir)
    phase_clock.end("charts")
    results.warnings += ([f"{c.target} {c.file} c={c.concurrency}: {t.tool} counted {t.failed} failed requests"
                          for c in results.comparisons for t in (c.ab_keepalive, c.wrk) if t.failed]
                         + [f"sweep {p.target} {p.file} c={p.concurrency}: {p.tool} counted {p.failed} failed "
                            "requests" for p in results.sweep if p.failed])
    results.finished_at = now()
    results.environment["duration_seconds"] = round(time.monotonic() - started, 1)
    results.phases["bench total"] = results.environment["duration_seconds"]
    results.write_json(run_dir / "results.json")
    report = render_markdown(results) if not results.ab else render_change(results)
    if results.ab:  # an A/B run's own files; report.md is the same page
        (run_dir / "ab.md").write_text(report)
        (run_dir / "ab.json").write_text(json.dumps({"run_id": results.run_id, "status": results.status, **results.ab,
                                                     "runs": [asdict(r) for r in results.runs if r.variant]},
                                                    indent=2) + "\n")
    (run_dir / "report.md").write_text(report)
    if results.status == "complete":
        point_latest(results_dir, run_dir)  # an interrupted run never becomes "latest"
    write_pages(results, run_dir, results_dir)
    print(report, flush=True)
    say("phases (wall seconds): " + ", ".join(f"{k} {v:g}" for k, v in results.phases.items()))
    planned = results.timing.get("planned_seconds")
    actual = results.timing.get("actual_seconds")
    if planned and actual:
        say(f"timed phases took {clock(actual)} against {clock(planned)} expected")
    say(f"wrote {run_dir}/ (results.json, report.md, index.html, exports, raw outputs) in "
        f"{results.environment['duration_seconds']:.0f} s")
