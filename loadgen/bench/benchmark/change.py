"""An A/B run: B, a twin of service A with one thing changed (its image, its
build, a CPU quota; or nothing, for an A/A calibration), timed against A in
the same run, on the same core, database and files.

Each case (size, concurrency) runs AB_BLOCKS blocks. In the duet design (the
default) a block is one window in which A and B take load at once, each from
its own wrk at the case's concurrency, after a warm-up of both, not counted:
the machine's own swings (this one's speed moves about 9% over seconds) and
the database's befall both sides in the same window, so the ratio within a
window leaves them out. In the blocks design a block is one window of A and
one of B in the schedule's order (A B, B A, A B, ...: the ABBA blocks of a
Williams design for two), each window after its own warm-up, never at once.
Every window of a case, A's and B's, is as long as the slower side needs
(case_window_seconds), decided once before the blocks.
Before the blocks, a sizing window of both (after their warm-up, as a
block's window follows one) sizes the windows; its figures also say whether
the case's level is past what its paths admit. A twin that shed more than
ADMITTED_SHED of its sizing answers (503s, lost answers) is past it: which
answers then come whole is a lottery of the two twins' admission limits,
which no pairing removes (nginx-gridfs at 1 MB, c=100, on the FerretDB
stand-in: 97.6-97.8% refused a twin, a detectable change of 5.7-11.6%; at
c=8, nothing refused, 1.8%). Such a case is timed at the concurrency both
admitted (AB_ADMITTED=off times the level as set): one closed-loop window
of vegeta at the level as set (both twins at once in a duet, as the sizing)
reads how many whole answers each held in flight (whole_in_flight); the
smaller, rounded down, at least 1, at most the level as set, is verified
by sizing again there, and halved while a twin still sheds
(next_level). The case keeps the level as set in its label, so runs, the
gate and a calibration compare case by case; ab.json records both and
every step, and the page and the console say why.
A block gives one paired sample per metric, log(B/A): requests per second,
the path's own CPU per request, and the total CPU per request of what
serves it (the path, its databases, its upstream), each read by bench
itself at the window's edges where it can (bench.measure.cgroup_cpu: over
exactly the window, not between cAdvisor's stamps 1-2 s apart). Pairing
within a block cancels what drifts over the run (the machine, its
neighbours, the database's caches), which is what a test on two separate
runs mistakes for a change. The statistics are bench.measure.paired's.

"change", not "ab" (ApacheBench here, clients/ab_output.py): one change
timed against its base in one run; `bench compare` (report/compare.py) sets
two separate runs side by side and never judges a change significant."""
import math
import time
from collections.abc import Iterable
from types import SimpleNamespace
from urllib.parse import urlsplit

from ..checks.verify import VerificationError, wait_until_healthy
from ..clients.timing import (Measurement, TimingError, run_vegeta_closed, run_wrk, run_wrk_together,
                              whole_answers, whole_rate)
from ..clients.vegeta_output import Answer
from ..environment import machine_of
from ..measure import paired
from .cpu_windows import database_services
from ..measure.flags import DISTURBED, IDLE_CORES, TWIN_BUSY
from ..progress import say
from ..results import Results, TargetResult, failed_run, repeated_run
from .cases import case_name, case_seconds
from .costs import MEASURED_OVERHEAD_S, OVERHEAD_S, warm_up_seconds
from .schedule import Rate, repetition_orders
from .twins import Restarter, TwinRestartError

# A slow case's windows last at most this many AB_WINDOWs (timed cases: 4).
# At 3 (9 s) one A/B of a path the stand-in serves slowly fits 10 minutes at
# two sizes. Longer ones did not resolve more: nginx-gridfs's twins' CPU per
# 1 MB answer differed per block as much in windows of 14-15 s (sd of log
# B/A 0.072, and A/As resolving 6.1-6.8%) as in 9 s (median 0.063), while
# without restarts one A/A resolved 1.2%: each restart draws a process whose
# CPU per answer is its own, and only more draws (blocks) narrow that.
WINDOW_STRETCH = 3
# Both twins restarted and answering /health again, here: flask's 1.9-4.0 s
# (gunicorn stops gracefully), nginx-gridfs's 0.6-1.0 s; the plan counts
# this much per block.
RESTART_S = 2.5

# A twin whose sizing shed more than this share of its answers (refused or
# lost) was loaded past what its path admits, and the case is timed at what
# both admitted (whole_in_flight, next_level). 5%: a case below its paths' limits
# sheds none (flask-postgres at 1 MB, c=100; nginx-gridfs at 1 MB, c=8), one
# past them most (nginx-gridfs at 1 MB, c=100: 97.6-97.8%), so the share
# only has to tell them apart; and a lottery over more than AB_THRESHOLD's
# default 5% of a window's answers could move its whole answers as far as
# the change a verdict is asked to find.
ADMITTED_SHED = 0.05
# A level estimated from the closed loop that still sheds is halved and
# sized again at most this many times (9, 4, 2, 1: from what nginx-gridfs
# admitted at 1 MB to one client); past them the case is timed at the last.
ADMITTED_STEPS = 3

# metric key, what it is, higher is better, (words when better, when worse)
METRICS = (
    ("rps", "requests per second", True, ("faster", "slower")),
    ("cpu_path", "CPU per request, the path's own", False, ("cheaper", "costlier")),
    ("cpu_total", "CPU per request, path + database + upstream", False, ("cheaper", "costlier")),
)
# AB_DESIGN: "duet", A and B take load at the same moments, each from its
# own wrk, so what the machine does in a window befalls both; "blocks", one
# window of A then one of B, never at once. In a duet the database and the
# upstream serve both twins at once: their CPU is no one side's, so the
# total is judged in blocks only.
DUET, BLOCKS = "duet", "blocks"
DESIGNS = (DUET, BLOCKS)


def metrics_of(design: str) -> tuple:
    return METRICS if design == BLOCKS else tuple(m for m in METRICS if m[0] != "cpu_total")


def case_window_seconds(cfg, sizing: list[Rate | None], concurrency: int) -> float:
    """The one length of every window of a case, A's and B's alike: what the
    slower side needs to hold its requests (cases.case_seconds, from a sizing
    run of each side), at most WINDOW_STRETCH x AB_WINDOW. One length, because a
    window's start reads low (every client starts at once, the first answers
    come a round later): a side given shorter windows would read lower for
    it, a bias no pairing removes. `sizing` None: not sized (BENCH_MIN_REQUESTS 0)."""
    return max(case_seconds(cfg, rate, concurrency, WINDOW_STRETCH) for rate in sizing)


def upstream_of(service: str, env_upstream: str) -> str | None:
    """nginx-cache's upstream (CACHE_UPSTREAM, e.g. nginx-gridfs:8080), shared
    by A and its twin: its CPU is part of what serves them."""
    if not service.startswith("nginx-cache") or not env_upstream:
        return None
    return urlsplit(f"//{env_upstream}").hostname


def window_metrics(rep: dict, target: str, supporting: list[str]) -> dict:
    """One window's figures over the answers served whole: req/s, the path's
    CPU ms per request, and the total over the path and what it leans on
    (None where not measured). A 503 from a deadline is quick and cheap: a
    B that sheds more must not read as faster or cheaper, so neither a
    refused nor a failed answer counts. The CPU figures are already per
    whole answer (usage.container_usage divides, once)."""
    requests, failed, refused = rep.get("requests") or 0, rep.get("failed") or 0, rep.get("refused") or 0
    cpu = rep.get("cpu") or {}
    own = (cpu.get(target) or {}).get("cpu_ms_per_request")
    total = None
    if own is not None:
        total = own + sum((cpu.get(role) or {}).get("cpu_ms_per_request") or 0.0 for role in supporting)
    shed = 1 - whole_answers(requests, failed, refused) / requests if requests else 0.0
    return {"rps": whole_rate(rep["rps"], requests, failed, refused) if requests else rep["rps"],
            "cpu_path": own, "cpu_total": total, "refused": refused, "failed": failed, "shed": round(shed, 4),
            "whole": whole_answers(requests, failed, refused), "answers": requests}


def sizing_seconds(cfg, ab) -> float:
    """What the plan counts for one sizing of a case: the twins' restart
    (AB_RESTART_TWINS) and a window of each side (of both at once in a
    duet), each after its warm-up with AB_ADMITTED on; none when
    BENCH_MIN_REQUESTS is 0 (nothing sized)."""
    if not cfg.min_requests:
        return 0.0
    windows = 1 if ab.design == DUET else 2
    restart = RESTART_S if ab.restart_twins else 0.0
    return restart + windows * (cfg.duration + OVERHEAD_S + (warm_up_seconds(cfg) if ab.admitted else 0.0))


def admitting_seconds(cfg, ab) -> float:
    """The most a case past what its paths admit adds to the plan: the
    closed-loop window of each side (of both in a duet) and every sizing
    that verifies a level (ChangeRun.admit). Counted as they run, not in
    the plan: most cases shed nothing."""
    if not (cfg.min_requests and ab.admitted):
        return 0.0
    windows = 1 if ab.design == DUET else 2
    return windows * (cfg.duration + OVERHEAD_S) + (ADMITTED_STEPS + 1) * sizing_seconds(cfg, ab)


def sizing_figures(m: Measurement) -> dict:
    """What ab.json keeps of a twin's sizing window: its answers and its
    rate (answers not refused a second)."""
    return {"requests": m.requests, "rps": round(m.rps, 3), "refused": m.refused, "failed": m.failed,
            "seconds": m.seconds}


def shed_of(figures: dict) -> float:
    """The share of a sizing window's answers not served whole."""
    answers = figures.get("requests") or 0
    if not answers:
        return 0.0
    return 1 - whole_answers(answers, figures.get("failed") or 0, figures.get("refused") or 0) / answers


def sizing_step(c: int, figures: dict[str, dict]) -> dict:
    """One sizing as ab.json's `admitted` keeps it: its level, each twin's shed."""
    return {"c": c, "shed": {name: round(shed_of(f), 4) for name, f in figures.items()}}


def sheds(step: dict) -> bool:
    """A twin of this sizing shed more than ADMITTED_SHED of its answers."""
    return bool(step["shed"]) and max(step["shed"].values()) > ADMITTED_SHED


def whole_in_flight(answers: Iterable[Answer], seconds: float) -> dict:
    """What a path admitted, from a closed-loop window of vegeta `seconds`
    long: the time-average number of whole answers in flight, the sum of
    the whole (2xx) answers' latencies over the window's seconds (Little's
    law as an integral); with the window's answers and whole answers. One
    pass: the answers may be a stream.
    Not wrk's mean latency x its rate: wrk 4.1 corrects its latency
    histogram for coordinated omission (stats_correct in its src/wrk.c adds
    samples for every answer slower than the run's time per answer per
    connection), so its figures are not the answers' own: nginx-gridfs at
    1 MB, c=100, on the FerretDB stand-in, wrk printed a mean of 149 ms over
    11,552 answers, 191 in flight from 100 connections, where nginx's access
    log of the same seconds read 77 ms over 11,652, 99.4 in flight. Nor a
    mean over every answer: it mixes 50 ms refusals with whole answers of
    0.7-1.2 s; a path admitted the whole answers it held at once (there,
    vegeta's closed loop 29.8, nginx's log 29.7; at c=8, nothing refused:
    8.08 and 8.02). An answer still in flight at the window's end counts
    whole (vegeta waits for it): a little high, by at most those answers'
    latencies over the window."""
    answers_seen = whole = 0
    busy = 0.0
    for a in answers:
        answers_seen += 1
        if 200 <= a.code < 300:
            whole += 1
            busy += a.latency
    return {"in_flight": round(busy / seconds, 3) if seconds > 0 else 0.0, "answers": answers_seen, "whole": whole}


def admitted_level(in_flight: dict[str, float], configured: int) -> int:
    """The level both twins admitted: the smaller of their whole answers in
    flight, rounded down, at least 1, at most the level as set."""
    return max(1, min(configured, math.floor(min(in_flight.values()))))


def next_level(steps: list[dict], estimate: int) -> int | None:
    """The level to size next, or None when the last step's is the one to
    time at. steps: the sizings so far (sizing_step), the first at the level
    as set. The estimate is sized first (unless it is the level as set:
    its own sizing stands), then halved, at least 1, while a twin sheds
    more than ADMITTED_SHED, at most ADMITTED_STEPS times."""
    checked = steps if estimate == steps[0]["c"] else steps[1:]
    if not checked:
        return estimate
    last = checked[-1]
    if not sheds(last) or last["c"] == 1 or len(checked) > ADMITTED_STEPS:
        return None
    return max(1, last["c"] // 2)


def admitted_record(configured: int, in_flight: dict[str, dict], estimate: int, steps: list[dict]) -> dict:
    """ab.json's `admitted` of a case past what its paths admit: the level
    as set, what each twin held in flight in the closed loop
    (whole_in_flight), the estimate, every sizing (sizing_step, the first
    at the level as set), the level timed, whether a twin still sheds
    there, and all of it in one line."""
    first, last = steps[0], steps[-1]
    over = [name for name, v in first["shed"].items() if v > ADMITTED_SHED]
    who = (f"both twins shed {_shed_span(first['shed'])}" if len(over) == len(first["shed"]) > 1
           else f"{over[0]} shed {first['shed'][over[0]]:.0%}")
    held = " and ".join(f"{v:.1f}" for v in sorted(f["in_flight"] for f in in_flight.values()))
    tried = "".join(f"c={s['c']} shed {_shed_span(s['shed'])}; " for s in steps[1:-1])
    outcome = (f"c={last['c']} still shed {_shed_span(last['shed'])}: timed there" if sheds(last)
               else f"timed at c={last['c']}, shedding {_shed_span(last['shed'])} there")
    said = (f"{who} in sizing at c={configured}; vegeta's closed loop held {held} whole answers in flight; "
            f"{tried}{outcome}")
    return {"configured": configured, "in_flight": in_flight, "estimate": estimate, "steps": steps,
            "timed": last["c"], "still_shed": sheds(last), "said": said}


def _shed_span(shed: dict[str, float]) -> str:
    """Each twin's share, the lower first: "0%", "97% and 98%"."""
    low, high = f"{min(shed.values()):.0%}", f"{max(shed.values()):.0%}"
    return low if low == high else f"{low} and {high}"


class ChangeRun:
    """Times A against B for every case of cfg.ab and judges the table."""

    def __init__(self, cfg, timer, results: Results, cache_upstream: str = ""):
        self.cfg, self.ab, self.timer, self.results = cfg, cfg.ab, timer, results
        upstream = upstream_of(self.ab.a, cache_upstream)
        self.supporting = database_services(cfg) + ([upstream] if upstream else [])
        self.restarter = Restarter(timer.run_dir, [self.ab.a, self.ab.b], cfg.startup_timeout) \
            if self.ab.restart_twins else None
        self.restarts_asked = 0
        # whose CPU bench reads itself at each window's edges
        self.read_cpu = (self.ab.a, self.ab.b, *self.supporting)

    def cases(self, files: list[dict]) -> list[tuple[dict, int]]:
        by_size = {f["name"].removesuffix(".bin"): f for f in files}
        missing = [size for size in self.ab.files if size not in by_size]
        if missing:
            raise ValueError(f"AB_FILES={' '.join(self.ab.files)!r}: {' '.join(missing)} not loaded by the seed "
                             f"(FILE_SIZES has {' '.join(by_size)})")
        return [(by_size[size], c) for size in self.ab.files for c in self.ab.concurrency]

    def run(self, files: list[dict]) -> None:
        ab = self.ab
        targets = {t.name: t for t in self.results.targets}
        self.results.ab = {"a": ab.a, "b": ab.b, "kind": ab.kind, "change": ab.change, "blocks": ab.blocks,
                           "threshold": ab.threshold, "supporting": self.supporting,
                           "restart_twins": ab.restart_twins, "design": ab.design, "admitted": ab.admitted,
                           "window": ab.window, "warmup": ab.warmup, "files": list(ab.files),
                           "concurrency": list(ab.concurrency),
                           "machine": machine_of(self.results.environment), "cases": [], "rows": []}
        unready = [n for n in (ab.a, ab.b) if not (n in targets and targets[n].verified)]
        if unready:
            why = "; ".join(f"{n}: {targets[n].error if n in targets else 'not a target'}" for n in unready)
            self.results.ab["error"] = f"not timed: {why}"
            say(f"A/B: {self.results.ab['error']}")
            return
        self.results.ab["cpu_counters"] = self.cpu_counters()
        try:
            for f, c in self.cases(files):
                self.results.ab["cases"].append(self.case(targets[ab.a], targets[ab.b], f, c))
                self.results.write_json(self.timer.run_dir / "results.json")
        finally:
            if self.restarter:
                self.restarter.close()
        self.results.ab["rows"] = judge(self.results.ab["cases"], ab.threshold, metrics_of(ab.design))
        for row in self.results.ab["rows"]:
            say(f"A/B {row['case']} {row['metric']}: {row['headline']}")

    def case(self, a: TargetResult, b: TargetResult, f: dict, c: int) -> dict:
        """AB_BLOCKS blocks of one (file, concurrency): the windows of each
        side as ordinary Runs (variant A and B), and the paired samples."""
        phase = f"A/B {f['name']} c={c}"
        sides = {a.name: a, b.name: b}
        reps: dict[str, list[dict]] = {a.name: [], b.name: []}
        errors: dict[str, str] = {}
        url = {name: f"{target.url}/files/{f['name']}" for name, target in sides.items()}
        sizing = self.sizing(phase, sides, url, c, errors)
        admitted = None
        if self.ab.admitted and sizing and not errors and sheds(sizing_step(c, figures_of(sizing))):
            admitted, sizing = self.admit(phase, sides, url, c, sizing, errors)
            if admitted:
                say(f"{f['name'].removesuffix('.bin')} c={c}: {admitted['said']}")
        configured, c = c, admitted["timed"] if admitted else c  # c: the level the blocks are timed at
        seconds = case_window_seconds(self.cfg, list(sizing.values()) or [None], c) if sizing \
            else float(self.cfg.duration)
        # the plan counted windows of AB_WINDOW: a stretched case's time left now says its length
        windows = 1 if self.ab.design == DUET else 2  # a block's windows
        self.timer.progress.planned += self.ab.blocks * windows * (seconds - self.cfg.duration)
        if not errors:
            say(f"{phase}: windows of {seconds:g} s, A's and B's alike"
                + (f" (sized by {', '.join(f'{n} {r.rps:.1f} req/s' for n, r in sizing.items())})" if sizing else ""))

        def window(name: str, block: int) -> None:
            out = f"{case_name(name, f['name'], c)}-ab{block}"
            try:
                self.timer.warm(f"{phase} b={block}", name, c, lambda s: run_wrk(url[name], c, s))
                rep = self.timer.measured(name, lambda: run_wrk(url[name], c, seconds, self.timer.run_dir, out),
                                          self.read_cpu)
            except TimingError as e:
                errors[name] = f"block {block}: {e}"
                say(f"{out}: FAILED: {e}")
                return
            finally:
                self.timer.progress.advance(seconds + MEASURED_OVERHEAD_S)
                self.timer.progress.report(f"{out} done")
            other = b.name if name == a.name else a.name
            idle = ((rep.get("cpu") or {}).get(other) or {}).get("cores")
            if idle is not None and idle > IDLE_CORES:
                rep["flags"].append(TWIN_BUSY)  # the resting side was not idle: this window is not clean
            rep["block"] = block
            reps[name].append(rep)
            self.results.order.append(f"{name} {f['name']} c={c} block={block}")

        def duet(order: list[str], block: int) -> None:
            outs = [f"{case_name(name, f['name'], c)}-ab{block}" for name in order]
            try:
                self.timer.warm(f"{phase} b={block}", "+".join(order), c,
                                lambda s: together(run_wrk_together([url[n] for n in order], c, s)))
                found = self.timer.measured_together(order, lambda: run_wrk_together(
                    [url[n] for n in order], c, seconds, self.timer.run_dir, outs), self.read_cpu)
            except TimingError as e:
                for name in order:
                    errors[name] = f"block {block}: {e}"
                say(f"{phase} b={block}: FAILED: {e}")
                return
            finally:
                self.timer.progress.advance(seconds + MEASURED_OVERHEAD_S)
                self.timer.progress.report(f"{phase} b={block} done")
            for name, rep in zip(order, found):
                rep["block"] = block
                reps[name].append(rep)
            self.results.order.append(f"{' + '.join(order)} {f['name']} c={c} block={block}")

        restarts: list[dict] = []

        def fresh(block: int) -> None:
            restarted = self.fresh_twins(sides, f"block {block}", errors)
            if restarted:
                restarts.append({"block": block, **restarted})

        def run_blocks(name: str, count: int, first: int) -> None:
            if self.ab.design == DUET:
                # which wrk starts first (microseconds apart) alternates, A B then B A, from a seeded start
                orders = repetition_orders([a.name, b.name], count, f"{self.timer.schedule.seed}:{name}")
                self.timer.schedule.orders[name] = orders
                for block, order in enumerate(orders, first):
                    if not errors:
                        fresh(block)
                    if not errors:
                        duet(order, block)
            else:
                self.timer.schedule.repeat(name, [a.name, b.name], lambda n, block: window(n, first - 1 + block),
                                           repetitions=count, skip=lambda n: bool(errors),
                                           before=lambda block: fresh(first - 1 + block))

        run_blocks(phase, self.ab.blocks, 1)
        # A block that shared the machine with something outside the lab is
        # not a paired sample: it is run again, up to half as many more blocks
        spoiled = disturbed_blocks(reps[a.name] + reps[b.name])
        if spoiled and not errors:
            again = min(len(spoiled), max(1, self.ab.blocks // 2))
            say(f"{phase}: block{'s' if len(spoiled) > 1 else ''} {', '.join(map(str, sorted(spoiled)))} "
                f"disturbed by work outside the lab; {again} more")
            run_blocks(f"{phase} again", again, self.ab.blocks + 1)
        for variant, name in (("A", a.name), ("B", b.name)):
            if errors.get(name) or not reps[name]:
                run = failed_run(name, f["name"], f["size"], c, errors.get(name, "not run"), reps[name])
            else:
                run = repeated_run(name, f["name"], f["size"], c, reps[name])
            run.variant = variant
            self.results.runs.append(run)
        return {"file": f["name"], "size_bytes": f["size"], "concurrency": configured, "timed_concurrency": c,
                "admitted": admitted, "error": "; ".join(errors.values()), "window_s": seconds, "restarts": restarts,
                "sizing": figures_of(sizing),
                "blocks": blocks(reps[a.name], reps[b.name], a.name, b.name, self.supporting)}

    def cpu_counters(self) -> dict:
        """Whose CPU bench reads itself at the windows' edges, and whose it
        takes from cAdvisor's stamps instead, and why (said, when a twin's)."""
        monitor = self.timer.monitor
        if monitor is None:
            return {"read_by_bench": [], "from_cadvisor": {}}
        fallback = monitor.find_counters(self.cfg.cgroup_dir, list(self.read_cpu))
        for role in (self.ab.a, self.ab.b):
            if role in fallback:
                say(f"A/B: CPU of {role} from cAdvisor's stamps, 1-2 s apart, not the windows' edges: "
                    f"{fallback[role]}")
        return {"read_by_bench": [r for r in self.read_cpu if r not in fallback], "from_cadvisor": fallback}

    def fresh_twins(self, sides: dict[str, TargetResult], before: str, errors: dict[str, str]) -> dict | None:
        """Both twins restarted before a block or a sizing (AB_RESTART_TWINS,
        see twins.py for why) and answering again; None when they are not
        restarted. A restart that fails ends the case, named."""
        if self.restarter is None or errors:
            return None
        self.restarts_asked += 1
        began = time.monotonic()
        try:
            answer = self.restarter.restart(str(self.restarts_asked))
            deadline = time.monotonic() + self.cfg.startup_timeout
            for target in sides.values():
                wait_until_healthy(target.url, deadline, interval=0.1)  # each poll is time the block waits
        except (TwinRestartError, VerificationError, OSError) as e:
            for name in sides:
                errors[name] = f"restarting {' and '.join(sides)} before {before}: {e}"
            say(f"A/B: FAILED restarting {' and '.join(sides)} before {before}: {e}")
            return None
        finally:
            self.timer.progress.advance(RESTART_S)
        return {"seconds": round(time.monotonic() - began, 2), "started_at": answer.get("started_at") or {}}

    def admit(self, phase: str, sides: dict[str, TargetResult], url: dict[str, str], configured: int,
              sizing: dict[str, Measurement], errors: dict[str, str]) -> tuple[dict | None, dict[str, Measurement]]:
        """A case whose sizing at the level as set shed: what each twin
        admitted, from one closed-loop window of vegeta at that level
        (whole_in_flight), and the level the case settles on, each sized
        again with wrk (next_level), which also sizes its windows at the
        level timed. The record (None when the closed loop failed) and the
        last sizing. A tool that fails is the case's error, as in sizing."""
        steps = [sizing_step(configured, figures_of(sizing))]
        in_flight = self.closed_loop(phase, url, configured, errors)
        if errors:
            return None, sizing
        estimate = admitted_level({name: f["in_flight"] for name, f in in_flight.items()}, configured)
        while (level := next_level(steps, estimate)) is not None:
            self.timer.progress.planned += sizing_seconds(self.cfg, self.ab)  # counted as the plan counts a sizing
            sizing = self.sizing(f"{phase} at c={level}", sides, url, level, errors)
            if errors:
                break
            steps.append(sizing_step(level, figures_of(sizing)))
        return admitted_record(configured, in_flight, estimate, steps), sizing

    def closed_loop(self, phase: str, url: dict[str, str], c: int, errors: dict[str, str]) -> dict[str, dict]:
        """One AB_WINDOW of vegeta's closed loop at `c` on each side (both
        at once in a duet, as the sizing; one after the other in blocks),
        not counted: each side's whole_in_flight. A side whose window fails
        is an error."""
        seconds = float(self.cfg.duration)
        together = [list(url)] if self.ab.design == DUET else [[name] for name in url]
        found: dict[str, dict] = {}
        for names in together:
            self.timer.progress.planned += seconds + OVERHEAD_S  # counted as a sizing's window
            try:
                found.update(zip(names, run_vegeta_closed([url[n] for n in names], c, seconds,
                                                          lambda answers: whole_in_flight(answers, seconds))))
            except TimingError as e:
                for name in names:
                    errors[name] = f"what it admitted (vegeta's closed loop at c={c}): {e}"
                say(f"{phase}: {' and '.join(names)}: FAILED in vegeta's closed loop: {e}")
                break
            finally:
                self.timer.progress.advance(seconds + OVERHEAD_S)
        return found

    def sizing(self, phase: str, sides: dict[str, TargetResult], url: dict[str, str], c: int,
               errors: dict[str, str]) -> dict[str, Measurement]:
        """One AB_WINDOW of wrk on each side (not counted), which sizes the
        case's windows and says whether its level is past what its paths
        admit (none when BENCH_MIN_REQUESTS is 0: nothing to hold, and the
        case is timed as set). On fresh twins (AB_RESTART_TWINS) and, with
        AB_ADMITTED on, after the warm-up, as a block's window follows both:
        unwarmed, the window read what the twins kept from the case before
        (nginx-gridfs at 1 MB, c=100: A refused none of 73 answers, B 34% of
        96, where every window refused 97.6-97.8%); warmed but not restarted,
        nginx-gridfs at 1 MB after 1 KB held 43-80 answers in flight in the
        closed loop where fresh twins held 12-16, and in 16 of 28 A/As its
        sizings read a level of c=21-48 shedding at most 5% where its
        blocks, each after a restart, then shed 78-96% (docs/ab.md). A side
        whose sizing fails is an error."""
        if not self.cfg.min_requests:
            return {}
        self.fresh_twins(sides, f"sizing {phase}", errors)
        if errors:
            return {}
        sizing = {}
        if self.ab.design == DUET:  # sized as timed: both at once
            try:
                if self.ab.admitted:
                    self.timer.warm(f"{phase} sizing", "+".join(url), c,
                                    lambda s: together(run_wrk_together(list(url.values()), c, s)))
                sizing = dict(zip(url, run_wrk_together(list(url.values()), c, self.cfg.duration)))
            except TimingError as e:
                for name in url:
                    errors[name] = f"sizing the windows: {e}"
                say(f"{' and '.join(url)}: FAILED sizing the windows: {e}")
            finally:
                self.timer.progress.advance(self.cfg.duration + OVERHEAD_S)
            return sizing
        for name, where in url.items():
            try:
                if self.ab.admitted:
                    self.timer.warm(f"{phase} sizing", name, c, lambda s: run_wrk(where, c, s))
                sizing[name] = run_wrk(where, c, self.cfg.duration)
            except TimingError as e:
                errors[name] = f"sizing the windows: {e}"
                say(f"{name}: FAILED sizing the windows: {e}")
            finally:
                self.timer.progress.advance(self.cfg.duration + OVERHEAD_S)
        return sizing


def figures_of(sizing: dict[str, Measurement]) -> dict[str, dict]:
    return {name: sizing_figures(m) for name, m in sizing.items()}


def together(found: list) -> Rate:
    """Both sides of a duet's warm-up window as one rate for the warm-up's
    rule (settled when two windows agree): their sum, over the fewer
    requests."""
    return SimpleNamespace(requests=min(m.requests for m in found), rps=sum(m.rps for m in found))


def disturbed_blocks(reps: list[dict]) -> set[int]:
    """Blocks with a window that work outside the lab's containers shared."""
    return {r["block"] for r in reps if DISTURBED in r.get("flags", [])}


def blocks(a_reps: list[dict], b_reps: list[dict], a: str, b: str, supporting: list[str]) -> list[dict]:
    """The paired samples: block by block, A's and B's figures and the flags
    of either window; a disturbed block is kept for the record, `counted`
    false, and judged on by nothing."""
    by_block = {r["block"]: r for r in b_reps}
    paired_blocks = []
    for ra in a_reps:
        rb = by_block.get(ra["block"])
        if rb is None:
            continue
        flags = sorted(set(ra.get("flags", [])) | set(rb.get("flags", [])))
        paired_blocks.append({"block": ra["block"], "a": window_metrics(ra, a, supporting),
                              "b": window_metrics(rb, b, supporting), "flags": flags,
                              "counted": DISTURBED not in flags})
    return paired_blocks


def judge(cases: list[dict], threshold: float, metrics: tuple = METRICS) -> list[dict]:
    """One row per case and metric: the paired log-ratios, the Hodges-
    Lehmann ratio with its exact 95% interval, the signed-rank p-value
    adjusted with Holm's method across the whole table (see
    bench.measure.paired for why), and the verdict."""
    rows = []
    for case in cases:
        counted = [blk for blk in case["blocks"] if blk.get("counted", True)]
        for key, what, higher_is_better, words in metrics:
            a = [blk["a"][key] for blk in counted]
            b = [blk["b"][key] for blk in counted]
            d = paired.log_ratios(a, b)
            rows.append({"case": f"{case['file'].removesuffix('.bin')} c={case['concurrency']}",
                         "file": case["file"], "concurrency": case["concurrency"],
                         "timed_concurrency": case.get("timed_concurrency", case["concurrency"]),
                         "metric": key, "what": what,
                         "higher_is_better": higher_is_better, "words": list(words), "log_ratios": d,
                         "n": len(d), "p": paired.signed_rank_p(d) if d else 1.0,
                         "shed": shed_share(counted), "detectable": _rounded(paired.detectable_change(d)),
                         "rho": _rounded(paired.log_correlation(a, b)),
                         # what counting whole answers can resolve at all: one in N a window
                         "counting_floor": _rounded(paired.counting_floor(
                             [blk["a"].get("whole") for blk in counted], [blk["b"].get("whole") for blk in counted]))
                         if key == "rps" else None})
    for row, adjusted in zip(rows, paired.holm([r["p"] for r in rows])):
        interval = paired.hodges_lehmann(row["log_ratios"]) if row["n"] else paired.Interval(0.0, None, None, 0.0)
        row["p_adjusted"] = adjusted
        row["ratio"] = round(math.exp(interval.estimate), 4)
        row["low"] = round(math.exp(interval.low), 4) if interval.low is not None else None
        row["high"] = round(math.exp(interval.high), 4) if interval.high is not None else None
        row["coverage"] = interval.coverage
        row["verdict"] = paired.verdict(interval, adjusted, row["higher_is_better"], threshold)
        row["gate_fails"] = paired.beyond_threshold_worse(interval, row["higher_is_better"], threshold)
        row["gate_passes"] = paired.within_threshold_worse(interval, row["higher_is_better"], threshold)
        row["headline"] = headline(row, threshold)
    return rows


def _rounded(value: float | None) -> float | None:
    return round(value, 4) if value is not None else None


def shed_share(counted: list[dict]) -> float | None:
    """The larger of A's and B's median share of answers not served whole."""
    sides = [sorted(blk[side]["shed"] for blk in counted if blk[side].get("shed") is not None) for side in "ab"]
    return max((v[len(v) // 2] for v in sides if v), default=None)


def headline(row: dict, threshold: float) -> str:
    """The verdict in words: "B faster by 12% [8%, 16%]", "no change beyond
    +-5% [-2%, 3%]", or "inconclusive [-4%, 9%]"."""
    if row["low"] is None:
        return f"inconclusive: {row['n']} blocks give no 95% interval (at least 6 needed)"
    span = f"[{_signed(row['low'])}, {_signed(row['high'])}]"
    better, worse = row["words"]
    change = abs(row["ratio"] - 1) * 100
    if row["verdict"] == paired.BETTER:
        return f"B {better} by {change:.1f}% {span}"
    if row["verdict"] == paired.WORSE:
        return f"B {worse} by {change:.1f}% {span}"
    if row["verdict"] == paired.SAME:
        return f"no change beyond ±{threshold * 100:g}% {span}"
    return f"inconclusive {span} (ratio {row['ratio']:.3f}, adjusted p {row['p_adjusted']:.2g})"


def _signed(ratio: float) -> str:
    return f"{(ratio - 1) * 100:+.1f}%"
