"""The concurrency sweep ("sweep"): one short run per BENCH_SWEEP level and
tool on every path and file, for requests/s against concurrency (a
chart, not a judged figure)."""
from ..measure import usage
from ..measure.usage import LOADGEN_BOUND, tool_bound
from ..progress import say
from ..results import SweepPoint, TargetResult
from ..clients.timing import TimingError, run_ab, run_wrk
from .cases import Timer, case_name
from .costs import OVERHEAD_S
from .phase import Phase, PhaseRun, Scope


class Sweep(Phase):
    name = "sweep"

    def enabled(self, cfg, scope: Scope) -> bool:
        return bool(cfg.sweep)

    def planned_seconds(self, cfg, scope: Scope) -> float:
        per_file = len(cfg.sweep) * len(cfg.tools) * (cfg.sweep_duration + OVERHEAD_S)
        return len(scope.targets) * len(scope.files) * per_file

    def run(self, run: PhaseRun) -> None:
        for t in run.scope.targets:
            run.results.sweep += time_sweep(run.timer, t, run.scope.files)


def time_sweep(timer: Timer, target: TargetResult, files: list[dict]) -> list[SweepPoint]:
    """One run per level and tool, BENCH_SWEEP_DURATION seconds each; the
    timed cases before it warmed every path."""
    points = []
    for f in files:
        for c in timer.cfg.sweep:
            name = f"sweep-{case_name(target.name, f['name'], c)}"
            if target.name in timer.down:
                break
            try:
                ms = [run_ab(timer.url(target, f), timer.cfg.sweep_duration, c, timer.run_dir, name,
                             expected_size=f["size"], workers=timer.cfg.loadgens)]
                if "wrk" in timer.cfg.tools:
                    ms.append(run_wrk(timer.url(target, f), c, timer.cfg.sweep_duration, timer.run_dir,
                                      f"{name}-wrk"))
            except TimingError as e:
                say(f"{name}: failed: {e}")
                timer.health(target)
                continue
            finally:
                timer.progress.advance(len(timer.cfg.tools) * (timer.cfg.sweep_duration + OVERHEAD_S))
            for m in ms:
                bound = tool_bound(m.loadgen_cores, m.threads, timer.allowance)
                flags = ([LOADGEN_BOUND] if bound else []) + ([usage.REFUSED] if m.refused else [])
                points.append(SweepPoint(target.name, f["name"], f["size"], c, m.tool, m.requests, m.failed,
                                         m.rps, m.p50_ms, m.p99_ms, round(m.loadgen_cores, 4), m.raw_output,
                                         flags, refused=m.refused))
            say(f"{name}: " + ", ".join(f"{m.tool} {m.rps:.0f} req/s" for m in ms))
            timer.progress.report(f"{name} done")
    return points
