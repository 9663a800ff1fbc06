"""The same-moment CPU window of a round (BENCH_CPU_DESIGN=same-moment):
after a headline case's closed-loop windows, every path still taking part,
nginx-static with them, gets the same fixed rate at the same moments from
one vegeta each, and each path's own CPU per whole answer is read over
that one window (bench.measure.same_moment has the rules and log ratios,
bench.measure.rounds takes the CPU ratio's rounds from them)."""
from ..clients.timing import TimingError, run_vegeta_together, whole_answers, whole_rate
from ..measure import same_moment
from ..measure.same_moment import BEHIND, NO_CPU, NO_WHOLE, NOT_RUN
from ..measure.usage import behind_schedule
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


def first_round_rate(reps: list[dict]) -> float | None:
    """A path's whole answers a second in its first counted round (a
    closed-loop window: bench.benchmark.closed_loop's reps)."""
    first = min(reps, key=lambda r: r.get("round") or 0, default=None)
    if first is None:
        return None
    return whole_rate(first.get("rps") or 0.0, first.get("requests") or 0, first.get("failed") or 0,
                      first.get("refused") or 0)


def case_rate(reps: dict[str, list[dict]]) -> int | None:
    """A size's window rate from the taking-part paths' closed-loop windows
    (name -> reps): bench.measure.same_moment.window_rate of each one's
    first round."""
    return same_moment.window_rate([first_round_rate(r) or 0.0 for r in reps.values()])


def target_figures(rep: dict | None, rate: float, target: str) -> dict:
    """One target's record of a window from its measured vegeta run (a
    Timer.measured_together dict; None: the window did not run): whole
    answers, its own container's CPU seconds and CPU ms per whole answer
    (bench.measure.usage.container_usage: the window's CPU over the whole
    answers completed inside it), whether vegeta fell behind, and why no
    figure counts (`excluded`, None when it does)."""
    if rep is None:
        return {"whole": 0, "cpu_seconds": None, "cpu_ms_per_request": None, "behind_schedule": False,
                "excluded": NOT_RUN}
    used = (rep.get("cpu") or {}).get(target) or {}
    whole = whole_answers(rep.get("requests") or 0, rep.get("failed") or 0, rep.get("refused") or 0)
    behind = behind_schedule(rate, rep.get("sent_rate") or 0.0)
    per_request = used.get("cpu_ms_per_request")
    excluded = (NO_WHOLE if not whole else BEHIND if behind else NO_CPU if not per_request else None)
    return {"whole": whole, "requests": rep.get("requests") or 0, "sent_rate": rep.get("sent_rate"),
            "cpu_seconds": used.get("cpu_seconds"), "requests_in_window": used.get("requests_in_window"),
            "cpu_ms_per_request": per_request, "behind_schedule": behind, "excluded": excluded}


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
    record["targets"] = {n: target_figures(reps.get(n), rate, n) for n in names}
    excluded = {n: t["excluded"] for n, t in record["targets"].items() if t["excluded"]}
    say(f"{f['name']} same-moment window, round {count}: {len(names)} paths at {rate} req/s for {seconds:g} s"
        + (f"; no CPU figure for {', '.join(f'{n} ({why})' for n, why in excluded.items())}" if excluded else ""))
    timer.progress.advance(same_moment.MIN_WINDOW_S + MEASURED_OVERHEAD_S)  # as planned
    return record
