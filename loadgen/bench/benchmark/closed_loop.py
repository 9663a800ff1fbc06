"""The closed loop, the run's first phase ("timed cases"): every (file,
concurrency) case with ab in shuffled rounds across the verified paths,
each round a paired ratio to the baseline; at the highest concurrency the
rounds go on until every interval is narrow or the budget says stop."""
import time

from ..measure import cache_log, rounds as rounds_mod
from ..measure.rounds import BASELINE, MIN_ROUNDS
from ..measure.flags import CACHE_MISSED, FEW_ROUNDS, NONCONFORMING
from ..progress import clock, say
from ..results import Run, TargetResult, failed_run, repeated_run
from ..settings import SLOW_CASE_STRETCH
from ..clients.timing import TimingError, run_ab
from .cases import Timer, case_name, case_seconds, few_rounds
from .costs import MEASURED_OVERHEAD_S, warm_up_seconds
from .phase import Phase, PhaseRun, Scope
from .schedule import WINDOW_WARM_UP_S, round_order
from . import same_moment


def rounds_seconds(cfg, targets: int, files: int) -> float:
    """One round of every case: each path's window, its short warm-up and
    the overhead, plus the idle reading before it (a case's first round
    also settles each path: see TimedCases.planned_seconds). Slow cases
    stretch their windows past BENCH_DURATION and the pace shows it.
    BENCH_CPU_DESIGN=same-moment adds a window per file (same_moment)."""
    window = cfg.duration + (WINDOW_WARM_UP_S if cfg.warmup else 0) + MEASURED_OVERHEAD_S
    return 2.5 + targets * files * len(cfg.concurrency) * window + same_moment.planned_seconds(cfg, files)


class TimedCases(Phase):
    """Rounds of every (file, concurrency) case across every verified path,
    the headline's (the highest concurrency) until its intervals are narrow
    or the budget says stop."""
    name = "timed cases"

    def enabled(self, cfg, scope: Scope) -> bool:
        return True

    def planned_seconds(self, cfg, scope: Scope) -> float:
        """The first round's settling warm-ups, then BENCH_REPETITIONS rounds
        (a budgeted run plans its budget instead)."""
        targets, files = len(scope.targets), len(scope.files)
        settle = targets * files * len(cfg.concurrency) * warm_up_seconds(cfg)
        return settle + cfg.repetitions * rounds_seconds(cfg, targets, files)

    def stretches(self, cfg) -> bool:
        return bool(cfg.target_width)

    def run(self, run: PhaseRun) -> None:
        cfg, results, targets, files = run.cfg, run.results, run.scope.targets, run.scope.files
        top = max(cfg.concurrency)
        rounds = rounds_seconds(cfg, len(targets), len(files))
        say(f"timing {len(targets)} targets x {len(files)} files x {len(cfg.concurrency)} concurrency levels in "
            f"rounds of {cfg.duration:g} s windows (slow cases up to {cfg.duration * SLOW_CASE_STRETCH:g} s), "
            f"about {clock(rounds)} a round; "
            + (f"c={top} until every interval is within x/÷{cfg.target_width:g} (at least "
               f"{max(cfg.repetitions, MIN_ROUNDS)} rounds) or the budget ends" if cfg.target_width
               else f"{cfg.repetitions} rounds")
            + ("; CPU per request from a same-moment window per size, every path at one rate"
               if same_moment.in_use(cfg) else "")
            + f"; expected about {clock(run.planned)}" + (" (the budget)" if run.budgeted else ""))
        deadline = run.deadline
        if deadline and deadline - time.monotonic() < max(cfg.repetitions,
                                                          MIN_ROUNDS if cfg.target_width else 1) * rounds:
            results.warnings.append(f"BENCH_BUDGET={cfg.budget_s / 60:g}m holds fewer than "
                                    f"{max(cfg.repetitions, MIN_ROUNDS)} rounds of about {clock(rounds)} after "
                                    f"the other phases' {clock(run.later_seconds)}: some ratios will have no "
                                    f"interval")
            say(f"WARNING: {results.warnings[-1]}")
        results.runs += time_rounds(run.timer, targets, [(f, c) for f in files for c in cfg.concurrency],
                                    headline=top, deadline=deadline)


def fixed_rounds(timer: Timer, targets: list[TargetResult], f: dict, c: int) -> list[Run]:
    """One case's rounds (BENCH_REPETITIONS of them, none judged for width)."""
    return time_rounds(timer, targets, [(f, c)])


def time_rounds(timer: Timer, targets: list[TargetResult], cases: list[tuple[dict, int]], headline: int | None = None,
                deadline: float | None = None) -> list[Run]:
    """Rounds of every case: in each, every path once, in a fresh order
    drawn from the run's seed, each counted window after its own short
    warm-up, so the machine's swing within a round falls on a path and
    the baseline alike and each round gives a paired ratio
    (bench.measure.rounds). A case at the `headline` concurrency goes on
    past BENCH_REPETITIONS rounds while a path's interval is wider than
    BENCH_TARGET_WIDTH, that path leaving once it is narrow (the
    baseline stays), until `deadline` (monotonic) would pass. After
    every round results.json holds the rounds so far: nothing measured
    is lost; the runs are returned at the end (the caller adds them)."""
    live = [t for t in targets if t.name not in timer.down]
    kept = list(timer.results.runs)
    state = [CaseRounds(f, c, f"{f['name']} c={c}", c == headline) for f, c in cases]
    for case in state:  # the first round's settling warm-up sizes each path's windows
        timer.measure_idle(live)
        case.settle(timer, targets)
    count = 0
    while True:
        count += 1
        began = time.monotonic()
        timer.measure_idle([t for t in targets if t.name not in timer.down])
        for case in state:
            case.round(timer, targets, count)
        for case in state:
            case.same_moment_window(timer, targets, count)
        for case in state:
            case.judge(timer.cfg, count)
        still_open = any(case.open(timer, targets) for case in state)
        took = time.monotonic() - began
        stopped = stop_reason(timer.cfg, still_open, count, took, deadline)
        if count == 1 and not stopped:
            say(rounds_outlook(timer.cfg, took, deadline))
        if stopped:
            break
        timer.results.runs = kept + [r for case in state for r in case.runs(timer, targets, final=False)]
        timer.results.rounds = rounds_record(timer.cfg, state, count, "running", timer.results.rounds)
        timer.results.write_json(timer.run_dir / "results.json")
    timer.results.runs = kept
    timer.results.rounds = rounds_record(timer.cfg, state, count, stopped, timer.results.rounds)
    say(f"rounds: {count} ({stopped})")
    return [r for case in state for r in case.runs(timer, targets)]


class CaseRounds:
    """One case (file, concurrency) across its rounds: each path's window
    length, counted windows, failure, and (headline cases) when its interval
    first met the width."""

    def __init__(self, f: dict, c: int, phase: str, headline: bool):
        self.f, self.c, self.phase, self.headline = f, c, phase, headline
        self.seconds: dict[str, float] = {}
        self.reps: dict[str, list[dict]] = {}
        self.errors: dict[str, str] = {}
        self.offsets: dict[str, int | None] = {}
        self.converged_at: dict[str, int] = {}
        self.done: set[str] = set()  # paths whose rounds are over (converged, or the fixed count reached)
        self.ratios: dict[str, dict] = {}
        # BENCH_CPU_DESIGN=same-moment (headline cases): the window's rate, fixed in
        # the first round, and each round's window (bench.measure.same_moment)
        self.cpu_rate: int | None = None
        self.cpu_windows: list[dict] = []

    def settle(self, timer: Timer, targets: list[TargetResult]) -> None:
        for t in targets:
            self.reps.setdefault(t.name, [])
            if t.name not in timer.down:
                timer.health(t)  # a dead target is found here, not by a tool waiting on it
            if t.name in timer.down:
                continue
            try:
                warm = timer.warm(self.phase, t.name, self.c,
                                  lambda s, t=t: run_ab(timer.url(t, self.f), s, self.c, expected_size=self.f["size"],
                                                        need_answers=False, workers=timer.cfg.loadgens))
                self.seconds[t.name] = case_seconds(timer.cfg, warm, self.c)
            except TimingError as e:
                self.errors[t.name] = f"warm-up failed: {e}"
                timer.health(t)
        # a caching path's log, from after its warm-up: the counted requests only
        self.offsets = {t.name: timer.cache_offset(t) for t in targets
                        if t.name not in timer.down and t.name not in self.errors}

    def taking_part(self, timer: Timer, targets: list[TargetResult]) -> list[str]:
        """This round's paths: every live one not done, with the baseline
        while any other still runs (alone when it is the only path)."""
        alive = [t.name for t in targets if t.name not in timer.down and t.name not in self.errors]
        if BASELINE not in alive or alive == [BASELINE]:
            return [n for n in alive if n not in self.done]
        others = [n for n in alive if n != BASELINE and n not in self.done]
        return [BASELINE, *others] if others else []

    def round(self, timer: Timer, targets: list[TargetResult], count: int) -> None:
        names = self.taking_part(timer, targets)
        if not names:
            return
        order = round_order(names, f"{timer.schedule.seed}:{self.phase}", count)
        timer.schedule.orders.setdefault(self.phase, []).append(order)
        by_name = {t.name: t for t in targets}
        for name in order:
            if name in timer.down or name in self.errors:
                continue
            t = by_name[name]
            case = f"{case_name(name, self.f['name'], self.c)}-r{count}"
            url = timer.url(t, self.f)
            try:
                # each window after its own short warm-up: a path's first
                # seconds after another's turn run 20-25% slow
                if timer.cfg.warmup:
                    run_ab(url, WINDOW_WARM_UP_S, self.c, expected_size=self.f["size"], need_answers=False,
                           workers=timer.cfg.loadgens)
                rep = timer.measured(name, lambda: run_ab(url, self.seconds[name], self.c, timer.run_dir, case,
                                                          expected_size=self.f["size"], workers=timer.cfg.loadgens))
                rep["round"] = count
                self.reps[name].append(rep)
                timer.results.order.append(f"{name} {self.f['name']} c={self.c} r={count}")
            except TimingError as e:
                self.errors[name] = f"round {count}: {e}"
                say(f"{case}: FAILED: {e}")
                timer.health(t)
            timer.progress.advance(self.seconds.get(name, timer.cfg.duration) + MEASURED_OVERHEAD_S
                                   + (WINDOW_WARM_UP_S if timer.cfg.warmup else 0))
            timer.progress.report(f"{case} done")

    def same_moment_window(self, timer: Timer, targets: list[TargetResult], count: int) -> None:
        """BENCH_CPU_DESIGN=same-moment, a headline case: after the round's
        closed-loop windows, one window of every path that took part, the
        baseline with them, at one rate: RATE_SHARE of the slowest one's
        whole-answer rate in the first round."""
        if not (self.headline and same_moment.in_use(timer.cfg)):
            return
        names = self.taking_part(timer, targets)
        if BASELINE not in names or len(names) < 2:
            return
        if self.cpu_rate is None:
            self.cpu_rate = same_moment.case_rate({n: self.reps.get(n) or [] for n in names})
        if self.cpu_rate is None:
            return
        self.cpu_windows.append(same_moment.time_window(timer, targets, names, self.f, self.cpu_rate, count))

    def cpu_source(self, cfg) -> list[dict] | None:
        """Where the path's own CPU ratio comes from: the same-moment windows
        (BENCH_CPU_DESIGN=same-moment, a headline case), else None: the
        rounds' closed-loop windows (bench.measure.rounds.metric_logs)."""
        return self.cpu_windows if self.headline and same_moment.in_use(cfg) else None

    def judge(self, cfg, count: int) -> None:
        """After a round: each path's ratios so far; which paths are done."""
        base = self.reps.get(BASELINE) or []
        for name, reps in self.reps.items():
            if name == BASELINE or not base:
                continue
            found = rounds_mod.ratios(reps, base, name, BASELINE, rounds_mod.QUANTILE_LEVEL, self.cpu_source(cfg))
            if (self.headline and cfg.target_width and name not in self.converged_at
                    and len(reps) >= max(cfg.repetitions, rounds_mod.MIN_ROUNDS)
                    and rounds_mod.converged(found, cfg.target_width)):
                self.converged_at[name] = count
            if name not in self.converged_at:  # not stopped on its width (so far): the plain 95% quantile
                found = rounds_mod.ratios(reps, base, name, BASELINE, cpu_windows=self.cpu_source(cfg))
            self.ratios[name] = {m: r.to_dict() for m, r in found.items()}
        fixed = not (self.headline and cfg.target_width and base and set(self.reps) - {BASELINE})
        for name, reps in self.reps.items():  # done: only a path counted in this round (a dead one never is)
            if reps and reps[-1]["round"] == count and ((fixed and count >= cfg.repetitions)
                                                        or name in self.converged_at):
                self.done.add(name)

    def open(self, timer: Timer, targets: list[TargetResult]) -> bool:
        """Another round would time a path."""
        return bool(self.taking_part(timer, targets))

    def runs(self, timer: Timer, targets: list[TargetResult], final: bool = True) -> list[Run]:
        """The case's Run per path; `final`: the last word (the cache log
        read, a line said), else the rounds so far, for results.json. A path
        that stopped answering fails the cases it had rounds left in."""
        f, c, runs = self.f, self.c, []
        for t in targets:
            reps = self.reps.get(t.name) or []
            why = self.errors.get(t.name) or (timer.down.get(t.name) if t.name not in self.done else None)
            if why is not None or not reps:
                runs.append(failed_run(t.name, f["name"], f["size"], c, why or "not run", reps))
                continue
            run = repeated_run(t.name, f["name"], f["size"], c, reps, self.seconds.get(t.name))
            if t.conforming is False:
                run.flags.append(NONCONFORMING)
            if few_rounds(run.requests, c):
                run.flags.append(FEW_ROUNDS)
            if final:
                run.cache = timer.cache_counts(t, self.offsets.get(t.name))
                if run.cache and (run.cache["hit_ratio"] or 0) < cache_log.HIT_RATIO_WANTED:
                    run.flags.append(CACHE_MISSED)
                say(describe(run))
            runs.append(run)
        return runs


def stop_reason(cfg, still_open: bool, count: int, last_round_s: float, deadline: float | None) -> str:
    """Why the rounds end after round `count` ("" while they go on): no path
    left to time, MAX_ROUNDS, or the budget, which another round as long as
    the last would pass."""
    if not still_open:
        return "every interval within the width" if cfg.target_width else "fixed count"
    if count >= rounds_mod.MAX_ROUNDS:
        return f"at most {rounds_mod.MAX_ROUNDS} rounds"
    if deadline is not None and time.monotonic() + last_round_s > deadline:
        return "budget"
    return ""


def rounds_outlook(cfg, took: float, deadline: float | None) -> str:
    """After the first round: how many more fit, and when the rounds end."""
    wanted = max(cfg.repetitions, rounds_mod.MIN_ROUNDS if cfg.target_width else 1) - 1
    if deadline is None:
        return f"round 1 took {clock(took)}: about {clock(wanted * took)} more for {wanted} more rounds"
    fit = max(0, int((deadline - time.monotonic()) // took)) if took > 0 else 0
    words = (f"round 1 took {clock(took)}: {fit} more fit the budget, so the rounds end within about "
             f"{clock(min(fit, rounds_mod.MAX_ROUNDS - 1) * took)}")
    if cfg.target_width:
        words += f" (sooner once every ratio is within x/÷{cfg.target_width:g}; rounds then shorten as paths leave)"
    if fit < wanted:
        words += f"; WARNING: fewer than the {wanted + 1} rounds an interval needs"
    return words


def rounds_record(cfg, cases: list[CaseRounds], count: int, stopped: str, earlier: dict) -> dict:
    # earlier: a previous call's record (a test's second round); its other cases' rows are kept
    """results.rounds: how the rounds ran and every path's ratios."""
    rows = [r for r in earlier.get("rows") or [] if (r["file"], r["concurrency"]) not in
            {(c.f["name"], c.c) for c in cases}]
    for case in cases:
        for name, found in case.ratios.items():
            rows.append({"target": name, "file": case.f["name"], "concurrency": case.c, "headline": case.headline,
                         "rounds": len(case.reps.get(name) or []), "converged_at": case.converged_at.get(name),
                         **found})
    return {"design": "shuffled rounds",
            "estimator": "geometric mean of the rounds' ratios, 95% t interval (the 96% quantile where a row "
                         "stopped on its width)",
            "baseline": BASELINE, "min_rounds": max(cfg.repetitions, rounds_mod.MIN_ROUNDS),
            "target_width": cfg.target_width, "quantile_level": rounds_mod.QUANTILE_LEVEL,
            "rounds": count,
            "stopped": stopped, "rows": rows, **same_moment_record(cfg, cases)}


def same_moment_record(cfg, cases: list[CaseRounds]) -> dict:
    """BENCH_CPU_DESIGN=same-moment's part of results.rounds ({} otherwise:
    the record as before): the design, each file's rate, every window."""
    if not same_moment.in_use(cfg):
        return {}
    headline = [c for c in cases if c.headline]
    return {"cpu_design": same_moment.SAME_MOMENT,
            "cpu_rates": {c.f["name"]: c.cpu_rate for c in headline if c.cpu_rate is not None},
            "cpu_windows": [w for c in headline for w in c.cpu_windows]}


def describe(run: Run) -> str:
    if not run.ok:
        return f"{case_name(run.target, run.file, run.concurrency)}: FAILED: {run.error}"
    note = ""
    if run.cpu and run.target in run.cpu and run.cpu[run.target].get("cpu_ms_per_request") is not None:
        note = f"; CPU ms/request {run.target} {run.cpu[run.target]['cpu_ms_per_request']:.3f}"
        note += "".join(f" {role} {u['cpu_ms_per_request']:.3f}" for role, u in run.cpu.items()
                        if role != run.target and u.get("cpu_ms_per_request") is not None)
    spread = f" ±{run.spread['half_range']:.1%}" if run.spread and len(run.repetitions) > 1 else ""
    if run.cache:
        note += f"; cache hit ratio {run.cache['hit_ratio']}"
    if run.refused:
        note += f"; {run.refused} of {run.answers} answers not 2xx ({run.refused_share:.0%}: shed)"
    return (f"{case_name(run.target, run.file, run.concurrency)}: {run.rps:.0f} req/s{spread} over "
            f"{len(run.repetitions)} x {run.duration_s or 0:.1f} s, p99 {run.p99_ms:.1f} ms{note}"
            + (f" [{', '.join(run.flags)}]" if run.flags else ""))

