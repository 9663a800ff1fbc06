"""The working set over HTTP: the seed's FILE_SET (many files of random
sizes) requested in random order by wrk (working_set.lua) from every serving
path, at the highest concurrency, repetitions rotating through the targets
like every case. Each path first serves a sample of the set byte for byte;
wrk then counts any answer that is not 2xx as refused (a row all refused
fails), as in every timed case."""
import http.client
import random
import tempfile
from pathlib import Path

from ..measure import cache_log
from .cases import case_seconds, few_rounds
from ..progress import say
from ..results import Run, TargetResult, WorkingSet, failed_run, repeated_run
from ..clients.timing import TimingError, run_wrk
from ..measure.usage import CACHE_MISSED, FEW_ROUNDS
from ..checks.verify import VerificationError, verify_target
from .costs import MEASURED_OVERHEAD_S, warm_up_seconds
from .phase import Phase, PhaseRun, Scope
from .schedule import PHASE_REPETITIONS

SCRIPT = Path(__file__).with_name("working_set.lua")
SAMPLE = 24  # files of the set each path must serve byte for byte before it is timed


def sample(file_set: dict) -> list[dict]:
    """The same few files of the set every run: its first, its last, and some between."""
    files = file_set["files"]
    if len(files) <= SAMPLE:
        return list(files)
    between = random.Random(f"gridfs-lab-set-sample:{file_set['spec']}").sample(files[1:-1], SAMPLE - 2)
    return [files[0], *between, files[-1]]


def label(file_set: dict) -> str:
    return f"set {file_set['spec']}"


class WorkingSetTiming(Phase):
    """With BENCH_WORKING_SET on and a seeded FILE_SET: one Run per path at
    the highest concurrency."""
    name = "working set"

    def enabled(self, cfg, scope: Scope) -> bool:
        return bool(cfg.working_set and scope.file_set)

    def planned_seconds(self, cfg, scope: Scope) -> float:
        per_path = warm_up_seconds(cfg) + min(cfg.repetitions, PHASE_REPETITIONS) * (cfg.duration
                                                                                    + MEASURED_OVERHEAD_S)
        return len(scope.targets) * per_path

    def run(self, run: PhaseRun) -> None:
        file_set, top = run.scope.file_set, max(run.cfg.concurrency)
        say(f"working set: {file_set['count']} files, {file_set['total_bytes'] / 2**20:.1f} MiB "
            f"({file_set['spec']}), random order, c={top}")
        run.results.working_set = time_working_set(run.timer, run.scope.targets, file_set, top)


def time_working_set(timer, targets: list[TargetResult], file_set: dict, concurrency: int) -> WorkingSet:
    """One Run per target: warm-up, then BENCH_REPETITIONS runs of wrk in
    the schedule's order."""
    cfg = timer.cfg
    result = WorkingSet(file_set["spec"], file_set["count"], file_set["total_bytes"], concurrency)
    if timer.monitor is not None:
        result.memory_limits = {role: limit for role, limit in timer.monitor.memory_limits.items() if limit}
    name_of = label(file_set)
    mean_size = file_set["total_bytes"] // max(1, file_set["count"])
    with tempfile.TemporaryDirectory(prefix="working-set-") as tmp:
        names = Path(tmp) / "names.txt"
        names.write_text("".join(f"{f['name']}\n" for f in file_set["files"]))

        def wrk(t: TargetResult, seconds: float, out: str | None = None):
            return run_wrk(f"{t.url}/", concurrency, seconds, timer.run_dir if out else None, out,
                           script=SCRIPT, script_args=(str(names),))

        by_name = {t.name: t for t in targets}
        errors: dict[str, str] = {}
        seconds: dict[str, float] = {}
        for t in targets:
            if t.name not in timer.down:
                timer.health(t)
            if t.name in timer.down:
                continue
            try:
                verify_target(t.url, sample(file_set))
                warm = timer.warm(name_of, t.name, concurrency, lambda s: wrk(t, s))
                seconds[t.name] = case_seconds(cfg, warm, concurrency)
            except (VerificationError, OSError, http.client.HTTPException) as e:
                errors[t.name] = f"the working set not served right: {e}"
                say(f"{t.name} {name_of}: FAILED: {errors[t.name]}")
            except TimingError as e:
                errors[t.name] = f"warm-up failed: {e}"
                timer.health(t)
        live = [t for t in targets if t.name not in timer.down and t.name not in errors]
        offsets = {t.name: timer.cache_offset(t) for t in live}
        reps: dict[str, list[dict]] = {t.name: [] for t in targets}

        def repetition(name: str, i: int) -> None:
            out = f"{name}-set-c{concurrency}-r{i}"
            try:
                reps[name].append(timer.measured(name, lambda: wrk(by_name[name], seconds[name], out)))
                timer.results.order.append(f"{name} {name_of} c={concurrency} r={i}")
            except TimingError as e:
                errors[name] = f"repetition {i}: {e}"
                say(f"{out}: FAILED: {e}")
                timer.health(by_name[name])
            timer.progress.advance(cfg.duration + MEASURED_OVERHEAD_S)
            timer.progress.report(f"{out} done")

        timer.schedule.repeat(f"{name_of} c={concurrency}", [t.name for t in live], repetition,
                              skip=lambda name: name in timer.down or name in errors)
    for t in targets:
        why = errors.get(t.name) or timer.down.get(t.name)
        if why is not None or not reps[t.name]:
            result.runs.append(failed_run(t.name, name_of, mean_size, concurrency, why or "not run", reps[t.name]))
            continue
        run = repeated_run(t.name, name_of, mean_size, concurrency, reps[t.name], seconds.get(t.name))
        if few_rounds(run.requests, concurrency):
            run.flags.append(FEW_ROUNDS)
        run.cache = timer.cache_counts(t, offsets.get(t.name))
        if run.cache and (run.cache["hit_ratio"] or 0) < cache_log.HIT_RATIO_WANTED:
            run.flags.append(CACHE_MISSED)
        result.runs.append(run)
        say(describe(run))
    return result


def describe(run: Run) -> str:
    if not run.ok:
        return f"{run.target} {run.file}: FAILED: {run.error}"
    cpu = run.cpu or {}
    own = (cpu.get(run.target) or {}).get("cpu_ms_per_request")
    return (f"{run.target} {run.file} c={run.concurrency}: {run.rps:.0f} req/s over {len(run.repetitions)} x "
            f"{run.duration_s or 0:.0f} s"  # no p99: wrk's is corrected, not its answers' own (results.own_latency)
            + (f", CPU ms/request {own:.3f}" if own is not None else "")
            + (f" [{', '.join(run.flags)}]" if run.flags else ""))
