"""ab -k against wrk ("ab -k vs wrk"): the two tools at the same
connection count and duration on the same case, so that a figure one tool
gives is checked against the other's (and open loop's capacity is the
faster keep-alive rate)."""
from ..measure.usage import LOADGEN_BOUND
from ..progress import say
from ..results import Comparison, TargetResult, ToolResult
from ..settings import EVERY_CASE
from ..clients.timing import TimingError, run_ab, run_wrk
from .cases import Timer, case_name
from .costs import MEASURED_OVERHEAD_S, warm_up_seconds
from .phase import Phase, PhaseRun, Scope
from .schedule import PHASE_REPETITIONS, seeded_start


def tool_check_cases(cfg, targets: list, files: list[dict], seed: str) -> list[tuple[dict, list]]:
    """ab -k against wrk: (file, targets) pairs. Every case at the highest
    concurrency (BENCH_PROFILE=full), or one file per path, the files dealt
    out from the run's seed so that over runs every path meets every size."""
    if "wrk" not in cfg.tools or not targets or not files:
        return []
    if cfg.tool_check == EVERY_CASE:
        return [(f, targets) for f in files]
    first = seeded_start(seed, len(files))
    dealt = {i: [t for k, t in enumerate(targets) if (k + first) % len(files) == i] for i in range(len(files))}
    return [(files[i], ts) for i, ts in dealt.items() if ts]


class ToolCheck(Phase):
    """At the highest concurrency, on tool_check_cases' cases."""
    name = "ab -k vs wrk"

    def cases(self, cfg, scope: Scope) -> list[tuple[dict, list]]:
        return tool_check_cases(cfg, scope.targets, scope.files, scope.seed)

    def enabled(self, cfg, scope: Scope) -> bool:
        return bool(self.cases(cfg, scope))

    def planned_seconds(self, cfg, scope: Scope) -> float:
        """Each (path, file) case's pairs of windows, each pair after its warm-up."""
        checked = sum(len(ts) for _, ts in self.cases(cfg, scope))
        pairs = min(cfg.repetitions, PHASE_REPETITIONS) if cfg.tool_check == EVERY_CASE else 1
        return checked * pairs * (2 * (cfg.duration + MEASURED_OVERHEAD_S) + warm_up_seconds(cfg))

    def run(self, run: PhaseRun) -> None:
        cfg = run.cfg
        for f, ts in self.cases(cfg, run.scope):
            run.results.comparisons += compare_round(run.timer, ts, f, max(cfg.concurrency),
                                                     repetitions=1 if cfg.tool_check != EVERY_CASE else None)


def tools_in_turn(repetition: int) -> tuple[str, str]:
    """ab -k first in odd repetitions, wrk first in even ones."""
    return ("ab -k", "wrk") if repetition % 2 else ("wrk", "ab -k")


def compare_round(timer: Timer, targets: list[TargetResult], f: dict, c: int,
                  repetitions: int | None = None) -> list[Comparison]:
    """ab -k and wrk at the same connection count and duration, their
    repetitions interleaved, the targets in the schedule's order. Each
    pair starts after the schedule's warm-up with wrk on the path, not
    counted, and which tool goes first alternates by repetition: the
    first run on node after the other paths' turns was 20-25% slower than
    the second, in either order (run 20261125T141036Z)."""
    by_name = {t.name: t for t in targets}
    reps: dict[str, dict[str, list[dict]]] = {t.name: {"ab -k": [], "wrk": []} for t in targets}
    failed: set[str] = set()

    def pair(name: str, i: int) -> None:
        t = by_name[name]
        case = case_name(name, f["name"], c)
        seconds = timer.case_duration(name, f["name"], c)
        runs = {
            "ab -k": lambda: run_ab(timer.url(t, f), seconds, c, timer.run_dir, f"{case}-abk-r{i}",
                                    keepalive=True, expected_size=f["size"], workers=timer.cfg.loadgens),
            "wrk": lambda: run_wrk(timer.url(t, f), c, seconds, timer.run_dir, f"{case}-wrk-r{i}"),
        }
        try:
            timer.warm(f"{f['name']} c={c} ab -k / wrk r={i}", name, c,
                       lambda s: run_wrk(timer.url(t, f), c, s))
            for tool in tools_in_turn(i):
                reps[name][tool].append(timer.measured(name, runs[tool]))
                timer.results.order.append(f"{name} {f['name']} c={c} {tool} r={i}")
        except TimingError as e:
            failed.add(name)
            timer.results.warnings.append(f"{case}: ab -k / wrk not compared: {e}")
            say(f"{case}: ab -k / wrk FAILED: {e}")
            timer.health(t)
        timer.progress.advance(2 * (timer.cfg.duration + MEASURED_OVERHEAD_S))
        timer.progress.report(f"{case} ab -k / wrk r{i} done")

    timer.schedule.repeat(f"{f['name']} c={c} ab -k / wrk", [t.name for t in targets], pair,
                         skip=lambda name: name in timer.down or name in failed, repetitions=repetitions)
    comparisons = []
    for t in targets:
        if t.name in failed or t.name in timer.down or not reps[t.name]["wrk"]:
            continue
        tools = [ToolResult.of(rs, [LOADGEN_BOUND] if any(LOADGEN_BOUND in r["flags"] for r in rs) else [])
                 for rs in (reps[t.name]["ab -k"], reps[t.name]["wrk"])]
        comparison = Comparison(t.name, f["name"], f["size"], c, *tools)
        comparisons.append(comparison)
        say(f"{case_name(t.name, f['name'], c)}: ab -k {tools[0].rps:.0f} req/s, wrk {tools[1].rps:.0f} req/s "
            f"({comparison.difference:.1%} apart{', DISAGREE' if comparison.disagree else ''})")
    return comparisons

