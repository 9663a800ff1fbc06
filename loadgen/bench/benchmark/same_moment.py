"""The same-moment CPU window of a round (BENCH_CPU_DESIGN=same-moment):
after a headline case's closed-loop windows, every path still taking part,
nginx-static with them, gets the same fixed rate at the same moments from
one vegeta each, and each path's own CPU per whole answer is read over
that one window (bench.measure.same_moment has the rules and figures,
bench.measure.rounds takes the CPU ratio's rounds from them)."""
from ..clients.timing import TimingError, run_vegeta_together
from ..measure import same_moment
from ..progress import say
from ..results import TargetResult
from ..settings import Settings
from .cases import Timer, case_name
from .costs import MEASURED_OVERHEAD_S

SAME_MOMENT = "same-moment"  # settings.CPU_DESIGNS' word for this design


def in_use(cfg: Settings) -> bool:
    return cfg.cpu_design == SAME_MOMENT


def planned_seconds(cfg: Settings, files: int) -> float:
    """A round's same-moment windows as planned: each at its shortest
    (MIN_WINDOW_S) and a measured run's overhead; a slow size's window runs
    longer (fewer requests a second) and the pace shows it, as a slow
    case's does."""
    return files * (same_moment.MIN_WINDOW_S + MEASURED_OVERHEAD_S) if in_use(cfg) else 0.0


def time_window(timer: Timer, targets: list[TargetResult], names: list[str], f: dict, rate: int,
                count: int) -> dict:
    """One window of round `count` at `rate` against the paths `names`, as
    its record: rate, seconds, and per target its figures (target_figures),
    or why it has none."""
    seconds = same_moment.window_seconds(rate)
    by_name = {t.name: t for t in targets}
    record = {"round": count, "file": f["name"], "rate": rate, "seconds": seconds}
    reps: dict[str, dict] = {}
    if timer.monitor is None:
        record["error"] = "no cAdvisor: no CPU to read"
    else:
        urls = [timer.url(by_name[n], f) for n in names]
        runs = [f"{case_name(n, f['name'])}-same-moment-r{count}" for n in names]
        try:
            found = timer.measured_together(names, lambda: run_vegeta_together(urls, rate, seconds, timer.run_dir,
                                                                              runs))
            reps = dict(zip(names, found))
        except TimingError as e:
            record["error"] = str(e)
            say(f"{f['name']} same-moment window, round {count}: FAILED: {e}")
    record["targets"] = {n: same_moment.target_figures(reps.get(n), rate, n) for n in names}
    excluded = {n: t["excluded"] for n, t in record["targets"].items() if t["excluded"]}
    say(f"{f['name']} same-moment window, round {count}: {len(names)} paths at {rate} req/s for {seconds:g} s"
        + (f"; no CPU figure for {', '.join(f'{n} ({why})' for n, why in excluded.items())}" if excluded else ""))
    timer.progress.advance(same_moment.MIN_WINDOW_S + MEASURED_OVERHEAD_S)  # as planned
    return record
