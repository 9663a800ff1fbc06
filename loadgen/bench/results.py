"""The one results model of a bench run. results.json is its serialisation;
report.md (and any later rendering) is made from it, never from raw output."""
import json
from dataclasses import dataclass, field, fields, asdict
from pathlib import Path

from .measure.stats import relative_difference, spread_of, TOOLS_DISAGREE
from .measure import verdicts
from .measure.bottleneck import bottleneck
from .measure.flags import LOADGEN_BOUND, NOISY, REFUSED  # noqa: F401 (NOISY: results.NOISY)
from .measure.usage import LOADGEN

# results.json's layout, its first key. A newer bench may add keys: a reader
# ignores those it does not know (from_known), so an older report still
# renders a newer run; a key renamed or changed in meaning raises SCHEMA.
SCHEMA = 1


def known_fields(cls, data: dict) -> dict:
    """The items of `data` that are fields of the dataclass `cls`."""
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


def from_known(cls, data: dict):
    """The dataclass `cls` from a results.json dict, its unknown keys left out."""
    return cls(**known_fields(cls, data))


@dataclass
class TargetResult:
    name: str
    url: str
    verified: bool
    error: str | None = None
    server_header: str | None = None
    # The conformance suite's cases, {case, expected, got, passed}, judged
    # against the reference target; conforming is None when not checked.
    conformance: list[dict] = field(default_factory=list)
    conforming: bool | None = None
    # What it serves from, as its container declares it (compose label
    # lab.store, read through cAdvisor); None when not recorded (no cAdvisor,
    # a path without the label, a run from before bench recorded it).
    store: str | None = None


# The store the report prints for a path whose store the run did not record.
STORE_NOT_RECORDED = "not recorded"

# wrk 4.1 prints no percentile of its answers' own times: after the run it
# takes the run's seconds over its requests per connection as an interval
# and, for every answer slower than two intervals, adds a synthetic sample
# at each interval below that answer's time (src/wrk.c, stats_correct: a
# coordinated-omission correction); its mean and percentiles count them,
# only its max is an answer's. Against nginx's own log (nginx-gridfs, 1 MB,
# c=100) wrk printed a mean of 149 ms where the answers took 77. A row or
# repetition timed by wrk keeps them as p50_ms..p99_ms; no table shows them
# and the exports name them wrk_corrected_*: latency is the open loop's.
CORRECTED_LATENCY_TOOLS = ("wrk",)


def own_latency(tool: str | None) -> bool:
    """Whether a tool's percentiles are its answers' own times (ab's,
    vegeta's), not wrk's corrected ones."""
    return tool not in CORRECTED_LATENCY_TOOLS


OK, FAILED = "ok", "failed"


@dataclass
class Run:
    """One (target, size, concurrency) case, timed by ab (seed 000's tool,
    HTTP/1.0, a connection per request) for BENCH_REPETITIONS repetitions of
    a few seconds each. The row's figures, CPU and flags are those of ONE
    repetition, the median by requests per second, so no row mixes
    repetitions; every repetition is in `repetitions`. A case that failed
    (target gone, tool aborted or killed, failed requests) has status
    "failed" and an error, and renders as failed, never as a number."""
    target: str
    file: str
    size_bytes: int
    concurrency: int
    status: str = OK
    error: str | None = None
    requests: int = 0    # completed in the row's repetition
    failed: int = 0      # over every repetition: requests with no answer, or a 2xx answer cut short
    seconds: float = 0.0  # the row's repetition, by ab's own timer
    rps: float = 0.0
    time_per_request_ms: float = 0.0  # ab's mean across all concurrent requests: 1000 / rps
    transfer_kbps: float = 0.0
    # the row's repetition's: ab's own per-request times (closed loop); wrk's
    # corrected ones where wrk timed it (CORRECTED_LATENCY_TOOLS)
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    raw_output: str | None = None  # the row's repetition's ab report, beside results.json
    # CPU and memory of the row's repetition, by role (the target's compose
    # service, the database's, "bench"): cpu_seconds, cores, cpu_ms_per_request,
    # peak_memory_bytes, ... (see bench.measure.usage). None when cAdvisor was not read.
    cpu: dict | None = None
    flags: list[str] = field(default_factory=list)  # see bench.measure.usage and report's legend
    cpu_window: dict | None = None  # the row's repetition's window (bench.measure.usage.window's figures)
    # Every counted repetition: a bench.clients.timing.Measurement as a dict, plus
    # its own cpu, flags and cpu_window.
    repetitions: list[dict] = field(default_factory=list)
    # Of requests per second over the repetitions: {median, min, max,
    # half_range, mad, width, noisy}, half_range = (max - min) / 2 / median,
    # printed ±; mad: the median absolute deviation over the median; width:
    # the x/÷ half-width of their 95% interval, which noisy is judged by.
    spread: dict | None = None
    duration_s: float | None = None  # what each repetition was asked to last
    # A caching path's own count over the counted repetitions (bench.measure.cache_log):
    # {hits, misses, other, requests, hit_ratio}; None for paths without a cache log.
    cache: dict | None = None
    # An A/B run's rows: "A" (the service as it is) or "B" (its twin); their
    # repetitions are the windows of the blocks, in `results.ab`'s pairs.
    variant: str | None = None
    # The resource that bound the row (bench.measure.bottleneck); None for a failed row
    bottleneck: str | None = None
    # Over every repetition: answers that were not 2xx (flagged refused; rps
    # counts the 2xx ones), beside the answers in all
    refused: int = 0
    answers: int = 0

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def noisy(self) -> bool:
        return bool(self.spread and self.spread.get("noisy"))

    @property
    def database_role(self) -> str | None:
        """The database that served the row: of the roles in cpu that are
        neither the target nor the load generator (mongo, postgres), the one
        that spent the most CPU in it."""
        roles = [role for role in self.cpu or {} if role not in (self.target, LOADGEN)]
        return max(roles, key=lambda r: self.cpu[r].get("cpu_seconds") or 0, default=None)

    @property
    def refused_share(self) -> float:
        return self.refused / self.answers if self.answers else 0.0

    @property
    def tool(self) -> str | None:
        """What timed the row, as its repetitions say: ab for the timed
        cases, wrk for the working set's and an A/B run's; None without one."""
        return self.repetitions[0].get("tool") if self.repetitions else None


def median_repetition(reps: list[dict]) -> dict:
    """The repetition whose requests per second is the median (the lower
    middle one of an even count)."""
    return sorted(reps, key=lambda r: r["rps"])[(len(reps) - 1) // 2]


def repeated_run(target: str, file: str, size_bytes: int, concurrency: int, reps: list[dict],
                 duration_s: float | None = None) -> Run:
    """A Run from its repetitions (Measurement dicts, each with its cpu,
    flags and cpu_window): the median one's figures, the total of failures."""
    row = median_repetition(reps)
    spread = spread_of([r["rps"] for r in reps])
    failed = sum(r["failed"] for r in reps)
    refused = sum(r.get("refused") or 0 for r in reps)
    run = Run(target, file, size_bytes, concurrency, OK, None, row["requests"], failed, row["seconds"],
              row["rps"], row["time_per_request_ms"], row["transfer_kbps"], row["p50_ms"], row["p90_ms"],
              row["p99_ms"], row["raw_output"], cpu=row.get("cpu"), flags=list(row.get("flags") or []),
              cpu_window=row.get("cpu_window"), repetitions=reps, spread=spread, duration_s=duration_s,
              refused=refused, answers=sum(r["requests"] for r in reps))
    run.flags += verdicts.flags_of_any_repetition(run.flags, reps)
    if verdicts.noisy(spread, len(reps)):
        run.flags.append(NOISY)
    if refused:
        run.flags.append(REFUSED)
    run.bottleneck = bottleneck(run.flags, run.cpu, target)
    error = verdicts.failure(reps, refused, run.answers)
    if error is not None:
        run.status, run.error = FAILED, error
    return run


def failed_run(target: str, file: str, size_bytes: int, concurrency: int, error: str,
               reps: list[dict] = ()) -> Run:
    return Run(target, file, size_bytes, concurrency, FAILED, error, repetitions=list(reps))


@dataclass
class ToolResult:
    """One tool's repetitions of a case in the ab -k / wrk comparison; the
    figures are the median repetition's, `failed` the total; wrk's
    p50..p99 are its corrected ones (CORRECTED_LATENCY_TOOLS)."""
    tool: str
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    failed: int
    spread: dict         # of rps: {median, min, max, half_range, mad, width, noisy}
    repetitions: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # "loadgen-bound" when the tool was at its CPU limit
    refused: int = 0     # answers not 2xx over every repetition (rps counts the 2xx ones)

    @classmethod
    def of(cls, reps: list[dict], flags: list[str] = ()) -> "ToolResult":
        row = median_repetition(reps)
        refused = sum(r.get("refused") or 0 for r in reps)
        return cls(row["tool"], row["rps"], row["p50_ms"], row["p90_ms"], row["p99_ms"], row["max_ms"],
                   failed=sum(r["failed"] for r in reps), spread=spread_of([r["rps"] for r in reps]),
                   repetitions=reps, flags=list(flags) + ([REFUSED] if refused and REFUSED not in flags else []),
                   refused=refused)


@dataclass
class Comparison:
    """ab with keep-alive against wrk at the same connection count."""
    target: str
    file: str
    size_bytes: int
    concurrency: int
    ab_keepalive: ToolResult
    wrk: ToolResult

    @property
    def difference(self) -> float:
        return relative_difference(self.ab_keepalive.rps, self.wrk.rps)

    @property
    def disagree(self) -> bool:
        return self.difference > TOOLS_DISAGREE

    @property
    def bound(self) -> bool:
        return any(LOADGEN_BOUND in t.flags for t in (self.ab_keepalive, self.wrk))

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        return cls(**{**known_fields(cls, data), "ab_keepalive": from_known(ToolResult, data["ab_keepalive"]),
                      "wrk": from_known(ToolResult, data["wrk"])})


@dataclass
class OpenLoop:
    """Latency at a fixed request rate (vegeta), a share of the case's
    keep-alive capacity (vegeta keeps its connections alive), so p99 is
    response time, not queueing in a saturated server. The percentiles are
    order statistics of every request's latency."""
    target: str
    file: str
    size_bytes: int
    rate: float          # asked for, requests/s
    status: str = OK
    error: str | None = None
    sent_rate: float = 0.0  # vegeta's own: requests over first to last sent
    requests: int = 0    # sent, each a latency sample
    failed: int = 0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    raw_output: str | None = None
    flags: list[str] = field(default_factory=list)
    capacity: float = 0.0     # requests/s the rate is a share of
    capacity_from: str = ""   # which measurement that was
    seconds: float = 0.0      # what vegeta was asked to last
    p999_ms: float = 0.0
    # p99's distribution-free 95% interval (bench.measure.latency); None for
    # a bound too few answers can give
    p99_interval_ms: list | None = None
    # [[upper edge ms, count], ...] of the non-empty log-spaced buckets (bench.measure.latency.histogram)
    latency_histogram: list = field(default_factory=list)
    max_workers: int = 0
    bottleneck: str | None = None  # bench.measure.bottleneck, from the run's flags and CPU
    share: float = 0.0   # of capacity (0 in runs from before it was recorded: the headline's)
    refused: int = 0     # answers whose status was not 2xx or 3xx
    status_codes: dict | None = None  # vegeta's count of answers by status ("0": no answer)

    @property
    def ok(self) -> bool:
        return self.status == OK


@dataclass
class SweepPoint:
    """One concurrency level of the sweep: a single run, fewer requests
    (a wrk point's p50 and p99 are its corrected ones: CORRECTED_LATENCY_TOOLS)."""
    target: str
    file: str
    size_bytes: int
    concurrency: int
    tool: str
    requests: int
    failed: int
    rps: float
    p50_ms: float
    p99_ms: float
    loadgen_cores: float
    raw_output: str | None
    flags: list[str] = field(default_factory=list)
    refused: int = 0     # answers not 2xx (rps counts the 2xx ones)


WRITE, READ = "write", "read"


@dataclass
class StorePass:
    """Seed 002's benchmark, one row: one store (gridfs, postgres,
    filesystem), one operation (write, or read back), one thread count,
    BENCH_REPETITIONS passes over the same WRITE_FILES files. The figures
    are the median pass's by files per second, so no row mixes passes;
    every pass is in `passes` (a bench.clients.timing.Measurement as a dict, with
    its cpu, flags and cpu_window: requests are files, p50..max the
    seconds of one file in ms). A pass that failed fails the row."""
    store: str
    operation: str
    threads: int
    order: str           # "in order" (writes, 1-thread reads) or "random" (reads by many threads)
    files: int
    file_bytes: int
    status: str = OK
    error: str | None = None
    seconds: float = 0.0       # the median pass's wall time for all the files
    files_per_s: float = 0.0
    mb_per_s: float = 0.0      # 10^6 bytes a second, as seed 002's sizes are decimal
    # role (bench, and the store's service) -> CPU seconds per GB (10^9
    # bytes) moved, over the median pass: its cores over the pass's interval
    # times the pass's seconds, per GB
    cpu_s_per_gb: dict = field(default_factory=dict)
    cpu: dict | None = None    # the median pass's cpu by role (bench.measure.usage.container_usage)
    flags: list[str] = field(default_factory=list)
    passes: list[dict] = field(default_factory=list)
    spread: dict | None = None  # of files per second over the passes (stats.spread_of)
    # Writes: every file read back after the passes and matched its sha256
    # (None: not checked, the passes failed); what the store used on disk for
    # them: {"bytes", "ratio" (to the bytes written), "detail"}; what made a
    # write durable there (the server's own settings).
    verified: bool | None = None
    disk: dict | None = None
    durability: dict | None = None
    # Reads: "warm" (after a pass that is not counted: the store's and the
    # OS's caches hold what they will) or "cold" (every file dropped from
    # the caches bench can reach before each pass); None for writes.
    cache_state: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def total_bytes(self) -> int:
        return self.files * self.file_bytes

    @classmethod
    def of(cls, store: str, operation: str, threads: int, order: str, files: int, file_bytes: int,
           passes: list[dict], service: str | None) -> "StorePass":
        row = median_repetition(passes)
        gigabytes = files * file_bytes / 1e9
        cpu = row.get("cpu") or {}
        per_gb = {role: round(used["cores"] * row["seconds"] / gigabytes, 3) for role, used in cpu.items()
                  if used.get("cores") is not None and (role == LOADGEN or role == service)}
        result = cls(store, operation, threads, order, files, file_bytes, seconds=row["seconds"],
                     files_per_s=row["rps"], mb_per_s=round(files * file_bytes / 1e6 / row["seconds"], 3),
                     cpu_s_per_gb=per_gb, cpu=row.get("cpu"), flags=list(row.get("flags") or []), passes=passes,
                     spread=spread_of([p["rps"] for p in passes]))
        result.flags += verdicts.flags_of_any_repetition(result.flags, passes)
        if result.spread["noisy"]:
            result.flags.append(NOISY)
        return result


@dataclass
class WorkingSet:
    """The seed's FILE_SET (many files of random sizes) requested in random
    order over HTTP, one Run per serving path (file: "set <spec>",
    size_bytes: the mean file size), at the highest concurrency. Beside
    them, the set's bytes and each container's memory limit, so a reader
    sees whether the set fits in a cache."""
    spec: str
    count: int
    total_bytes: int
    concurrency: int
    runs: list[Run] = field(default_factory=list)
    memory_limits: dict = field(default_factory=dict)  # role -> bytes, as cAdvisor reports the container's limit

    @classmethod
    def from_dict(cls, data: dict) -> "WorkingSet":
        return cls(**{**known_fields(cls, data), "runs": [from_known(Run, r) for r in data.get("runs", [])]})


@dataclass
class Results:
    run_id: str
    started_at: str
    finished_at: str | None = None
    parameters: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    targets: list[TargetResult] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # shown at the top of report.md
    # role -> [[timestamp_ns, cpu_total_ns, working_set_bytes], ...], cAdvisor's
    # stats about once a second through the run.
    cpu_samples: dict = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)  # when BENCH_TOOLS has wrk
    open_loop: list[OpenLoop] = field(default_factory=list)  # p99 at a fixed rate, per target and size
    # The order the counted repetitions ran in ("target file c=N r=i"), as
    # run; `schedule` has how it was chosen (bench.benchmark.schedule: the
    # design, the seed, each phase's orders and each target's warm-up).
    order: list[str] = field(default_factory=list)
    schedule: dict = field(default_factory=dict)
    # The timed cases' rounds (bench.benchmark.closed_loop.rounds_record): how many,
    # why they stopped, each path's ratio to the baseline with its interval.
    rounds: dict = field(default_factory=dict)
    # "complete", or "interrupted"/"crashed: <why>" when the run stopped early.
    status: str = "running"
    timing: dict = field(default_factory=dict)  # the timing knobs as applied (bench.settings.effective)
    sweep: list[SweepPoint] = field(default_factory=list)
    # Wall seconds of the whole run and of each phase (seed, verify,
    # conformance, timed cases, sweep, charts), in order: what a run costs.
    phases: dict = field(default_factory=dict)
    # Seed 002's store benchmark: each store written with 1 thread and with
    # WRITE_THREADS (`writes`), then read back (`reads`); the settings and
    # facts they share (`store_setup`: files, size, threads, the stores'
    # errors).
    writes: list[StorePass] = field(default_factory=list)
    reads: list[StorePass] = field(default_factory=list)
    store_setup: dict = field(default_factory=dict)
    working_set: WorkingSet | None = None
    # An A/B run (bench.benchmark.change): the two services, the change, every
    # case's paired blocks, and one judged row per case and metric.
    ab: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return (any(not t.verified for t in self.targets) or any(not r.ok for r in self.runs)
                or any(not o.ok for o in self.open_loop) or any(not p.ok for p in self.writes + self.reads)
                or any(p.verified is False for p in self.writes)
                or bool(self.working_set and any(not r.ok for r in self.working_set.runs)))

    def store_of(self, target: str) -> str:
        """The store a path serves from, as the run recorded it: what the
        report groups by and prints beside it."""
        found = next((t.store for t in self.targets if t.name == target), None)
        return found or STORE_NOT_RECORDED

    def run_for(self, target: str, file: str, concurrency: int) -> Run | None:
        for r in self.runs:
            if (r.target, r.file, r.concurrency) == (target, file, concurrency):
                return r
        return None

    def to_dict(self) -> dict:
        data = {"schema": SCHEMA, **asdict(self)}
        for c, out in zip(self.comparisons, data["comparisons"]):
            out["difference"] = round(c.difference, 4)  # derived, kept for readers of the JSON
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Results":
        values = known_fields(cls, data)
        # Results written before a field existed load with its default; a
        # newer bench's keys are left out (the schema's promise).
        values["targets"] = [from_known(TargetResult, t) for t in data.get("targets", [])]
        values["runs"] = [from_known(Run, r) for r in data.get("runs", [])]
        values["comparisons"] = [Comparison.from_dict(c) for c in data.get("comparisons", [])]
        values["sweep"] = [from_known(SweepPoint, p) for p in data.get("sweep", [])]
        values["open_loop"] = [from_known(OpenLoop, o) for o in data.get("open_loop", [])]
        values["writes"] = [from_known(StorePass, p) for p in data.get("writes", [])]
        values["reads"] = [from_known(StorePass, p) for p in data.get("reads", [])]
        values["working_set"] = WorkingSet.from_dict(data["working_set"]) if data.get("working_set") else None
        return cls(**values)

    def write_json(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Results":
        return cls.from_dict(json.loads(Path(path).read_text()))
