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
admitted, Little's law on the sizing: whole answers a second x their mean
latency, the smaller of the twins', rounded down, at least 1, at most the
level as set (admitted_concurrency; AB_ADMITTED=off times the level as
set). The case keeps the level as set in its label, so runs, the gate and a
calibration compare case by case; ab.json records both, and the page and the
console say why.
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
from types import SimpleNamespace
from urllib.parse import urlsplit

from ..checks.verify import VerificationError, wait_until_healthy
from ..clients.timing import Measurement, TimingError, run_wrk, run_wrk_together, whole_answers, whole_rate
from ..environment import machine_of
from ..measure import paired
from .cpu_windows import database_services
from ..measure.flags import DISTURBED, IDLE_CORES, TWIN_BUSY
from ..progress import say
from ..results import Results, TargetResult, failed_run, repeated_run
from .cases import case_name, case_seconds
from .costs import MEASURED_OVERHEAD_S, OVERHEAD_S
from .schedule import Rate, repetition_orders
from .twins import Restarter, TwinRestartError

# A slow case's windows last at most this many AB_WINDOWs (timed cases: 4).
# At 4, flask's A/A at two sizes took 10m03s here (1 MB windows of 12 s, the
# stand-in serving about 20 whole answers a second); at 3 its 1 MB windows of
# 9 s still hold about 180, and one A/B of a path at two sizes fits 10 minutes.
WINDOW_STRETCH = 3
# Both twins restarted and answering /health again, here: flask's 1.9-4.0 s
# (gunicorn stops gracefully), nginx-gridfs's 0.6-1.0 s; the plan counts
# this much per block.
RESTART_S = 2.5

# A twin whose sizing shed more than this share of its answers (refused or
# lost) was loaded past what its path admits, and the case is timed at what
# both admitted (admitted_concurrency). 5%: a case below its paths' limits
# sheds none (flask-postgres at 1 MB, c=100; nginx-gridfs at 1 MB, c=8), one
# past them most (nginx-gridfs at 1 MB, c=100: 97.6-97.8%), so the share
# only has to tell them apart; and a lottery over more than AB_THRESHOLD's
# default 5% of a window's answers could move its whole answers as far as
# the change a verdict is asked to find.
ADMITTED_SHED = 0.05

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
    return max(min(case_seconds(cfg, rate, concurrency), cfg.duration * WINDOW_STRETCH) for rate in sizing)


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


def sizing_figures(m: Measurement) -> dict:
    """What ab.json keeps of a twin's sizing window: its answers, its rate
    (answers not refused a second), and what Little's law on it needs."""
    return {"requests": m.requests, "rps": round(m.rps, 3), "refused": m.refused, "failed": m.failed,
            "seconds": m.seconds, "latency_mean_ms": m.latency_mean_ms}


def shed_of(figures: dict) -> float:
    """The share of a sizing window's answers not served whole."""
    answers = figures.get("requests") or 0
    if not answers:
        return 0.0
    return 1 - whole_answers(answers, figures.get("failed") or 0, figures.get("refused") or 0) / answers


def admitted_concurrency(sizing: dict[str, dict], configured: int) -> dict | None:
    """The concurrency a case is timed at when its sizing (sizing_figures
    per twin) shed more than ADMITTED_SHED of either twin's answers, and
    why, in words; None when neither did, or the sizing lacks what Little's
    law needs. Each twin admitted L = whole answers a second x their mean
    latency (Little's law); the case is timed at the smaller L, rounded
    down, at least 1, at most `configured`. wrk does not tell a whole
    answer's latency from a refusal's: its mean over every answer stands in
    (at 1 MB, c=100, nginx-gridfs's captured windows: 16-17 whole answers
    a second x 0.57-0.60 s, about 9, where c=8 shed nothing). Refusals
    quicker than whole answers make it read low (the blocks then shed less,
    at a level below the limit), refusals at the deadline high."""
    shed = {name: shed_of(f) for name, f in sizing.items()}
    if not shed or max(shed.values()) <= ADMITTED_SHED:
        return None
    admitted = {}
    for name, f in sizing.items():
        if not f.get("seconds") or f.get("latency_mean_ms") is None:
            return None
        whole_rps = whole_answers(f["requests"], f.get("failed") or 0, f.get("refused") or 0) / f["seconds"]
        admitted[name] = (whole_rps * f["latency_mean_ms"] / 1000, whole_rps, f["latency_mean_ms"] / 1000)
    by = min(admitted, key=lambda name: admitted[name][0])
    little, whole_rps, latency_s = admitted[by]
    timed = max(1, min(configured, math.floor(little)))
    over = [name for name in shed if shed[name] > ADMITTED_SHED]
    shares = sorted(shed[name] for name in over)
    who = (f"both twins shed {_share_span(shares)}" if len(over) == len(shed) > 1
           else f"{over[0]} shed {shares[0]:.0%}")
    why = f"{whole_rps:.0f} whole answers/s x {latency_s:.2f} s"
    said = (f"{who} in sizing; timed at c={timed} (what they admitted: {why})" if timed < configured
            else f"{who} in sizing; timed at c={configured} as set (they admitted as many: {why})")
    return {"configured": configured, "timed": timed, "shed": {name: round(v, 4) for name, v in shed.items()},
            "whole_rps": round(whole_rps, 2), "latency_s": round(latency_s, 3), "by": by, "said": said}


def _share_span(shares: list[float]) -> str:
    low, high = f"{shares[0]:.0%}", f"{shares[-1]:.0%}"
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
        sizing = self.sizing(phase, url, c, errors)
        figures = {name: sizing_figures(m) for name, m in sizing.items()}
        admitted = admitted_concurrency(figures, c) if self.ab.admitted and not errors else None
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
            restarted = self.fresh_twins(sides, block, errors)
            if restarted:
                restarts.append(restarted)

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
                "sizing": figures,
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

    def fresh_twins(self, sides: dict[str, TargetResult], block: int, errors: dict[str, str]) -> dict | None:
        """Both twins restarted before a block (AB_RESTART_TWINS, see
        twins.py for why) and answering again; None when they are not
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
                errors[name] = f"restarting {' and '.join(sides)} before block {block}: {e}"
            say(f"A/B: FAILED restarting {' and '.join(sides)} before block {block}: {e}")
            return None
        finally:
            self.timer.progress.advance(RESTART_S)
        return {"block": block, "seconds": round(time.monotonic() - began, 2),
                "started_at": answer.get("started_at") or {}}

    def sizing(self, phase: str, url: dict[str, str], c: int, errors: dict[str, str]) -> dict[str, Measurement]:
        """One AB_WINDOW of wrk on each side (not counted), which sizes the
        case's windows and says whether its level is past what its paths
        admit (none when BENCH_MIN_REQUESTS is 0: nothing to hold, and the
        case is timed as set). With AB_ADMITTED on, after the warm-up a
        block's window has: unwarmed, the window read what the twins kept
        from the case before (nginx-gridfs at 1 MB, c=100: A refused none of
        73 answers, B 34% of 96, where every window refused 97.6-97.8%). A
        side whose sizing fails is an error."""
        if not self.cfg.min_requests:
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
