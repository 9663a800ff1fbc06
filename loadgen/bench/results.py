"""The one results model of a bench run. results.json is its serialisation;
report.md (and any later rendering) is made from it, never from raw output."""
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from .stats import relative_difference, spread_of, TOOLS_DISAGREE

NOISY = "noisy"        # the repetitions' requests per second spread more than stats.NOISY_SPREAD


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


@dataclass
class Run:
    """One (target, size, concurrency) case, timed by ab (seed 000's tool,
    HTTP/1.0, a connection per request) BENCH_REPETITIONS times. The seed-style
    figures are medians across the repetitions; `failed` is their total."""
    target: str
    file: str
    size_bytes: int
    concurrency: int
    requests: int
    failed: int          # ab's failed requests plus non-2xx responses
    rps: float
    time_per_request_ms: float  # ab's mean across all concurrent requests (seed 000's column)
    transfer_kbps: float
    p50_ms: float
    p99_ms: float
    raw_output: str      # file name of the median repetition's ab report, beside results.json
    # CPU and memory of the window, by role (the target's compose service,
    # the database's, "bench" for the load generator): cpu_seconds, cores,
    # cpu_ms_per_request, peak_memory_bytes, ... (see bench.usage). None when
    # cAdvisor could not be read.
    cpu: dict | None = None
    flags: list[str] = field(default_factory=list)  # e.g. "loadgen-bound", "throttled"
    # The window itself: cAdvisor start/end stamps, ab_seconds, and every
    # container's and the host's CPU seconds in it (see bench.usage.window).
    cpu_window: dict | None = None
    # Every counted repetition (a bench.timing.Measurement as a dict: rps,
    # time_per_request_ms, p50/p90/p99/max_ms, seconds, loadgen_cpu_seconds,
    # raw_output...), and per metric {median, min, max, spread, noisy} with
    # spread = (max - min) / median. Empty/None in results from before them.
    repetitions: list[dict] = field(default_factory=list)
    spread: dict | None = None

    @property
    def noisy(self) -> bool:
        return bool(self.spread and self.spread["rps"]["noisy"])


SPREAD_METRICS = ("rps", "time_per_request_ms", "p50_ms", "p99_ms")


def repeated_run(target: str, file: str, size_bytes: int, concurrency: int, requests: int,
                 repetitions: list) -> Run:
    """A Run from its repetitions (bench.timing.Measurement): medians, the
    total of failures, the median repetition's raw output."""
    reps = [asdict(m) for m in repetitions]
    spread = {k: spread_of([r[k] for r in reps]) for k in SPREAD_METRICS}
    spread["transfer_kbps"] = spread_of([r["transfer_kbps"] for r in reps])
    by_rps = sorted(reps, key=lambda r: r["rps"])
    run = Run(target, file, size_bytes, concurrency, requests, sum(r["failed"] for r in reps),
              spread["rps"]["median"], spread["time_per_request_ms"]["median"], spread["transfer_kbps"]["median"],
              spread["p50_ms"]["median"], spread["p99_ms"]["median"], by_rps[(len(by_rps) - 1) // 2]["raw_output"],
              repetitions=reps, spread=spread)
    if run.noisy:
        run.flags.append(NOISY)
    return run


@dataclass
class ToolResult:
    """One tool's repetitions of a case in the ab -k / wrk comparison; the
    figures are medians, `failed` the total."""
    tool: str
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    failed: int
    spread: dict         # of rps: {median, min, max, spread, noisy}
    repetitions: list[dict] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)  # "loadgen-bound" when the tool was at its CPU limit

    @classmethod
    def of(cls, repetitions: list, flags: list[str] = ()) -> "ToolResult":
        reps = [asdict(m) for m in repetitions]
        mid = {k: spread_of([r[k] for r in reps])["median"] for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms")}
        rps = spread_of([r["rps"] for r in reps])
        return cls(reps[0]["tool"], rps["median"], failed=sum(r["failed"] for r in reps), spread=rps,
                   repetitions=reps, flags=list(flags), **mid)


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

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        return cls(**{**data, "ab_keepalive": ToolResult(**data["ab_keepalive"]), "wrk": ToolResult(**data["wrk"])})


@dataclass
class SweepPoint:
    """One concurrency level of the sweep: a single run, fewer requests."""
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
    # stats about once a second through the run, for the charts.
    cpu_samples: dict = field(default_factory=dict)
    charts: dict = field(default_factory=dict)  # target -> PNG file name beside results.json
    comparisons: list[Comparison] = field(default_factory=list)  # when BENCH_TOOLS has wrk
    sweep: list[SweepPoint] = field(default_factory=list)
    sweep_charts: dict = field(default_factory=dict)  # target -> PNG of requests/s against concurrency
    # Wall seconds of the whole run and of each phase (seed, verify,
    # conformance, timed cases, sweep, charts), in order: what a run costs.
    phases: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(not t.verified for t in self.targets) or any(r.failed for r in self.runs)

    def run_for(self, target: str, file: str, concurrency: int) -> Run | None:
        for r in self.runs:
            if (r.target, r.file, r.concurrency) == (target, file, concurrency):
                return r
        return None

    def to_dict(self) -> dict:
        data = asdict(self)
        for c, out in zip(self.comparisons, data["comparisons"]):
            out["difference"] = round(c.difference, 4)  # derived, kept for readers of the JSON
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "Results":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["targets"] = [TargetResult(**t) for t in data.get("targets", [])]
        # Results written before a field existed load with its default.
        values["runs"] = [Run(**r) for r in data.get("runs", [])]
        values["comparisons"] = [Comparison.from_dict({k: v for k, v in c.items() if k != "difference"})
                                 for c in data.get("comparisons", [])]
        values["sweep"] = [SweepPoint(**p) for p in data.get("sweep", [])]
        return cls(**values)

    def write_json(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Results":
        return cls.from_dict(json.loads(Path(path).read_text()))
