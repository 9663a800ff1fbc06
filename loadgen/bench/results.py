"""The one results model of a bench run. results.json is its serialisation;
report.md (and any later rendering) is made from it, never from raw output."""
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


@dataclass
class TargetResult:
    name: str
    url: str
    verified: bool
    error: str | None = None
    server_header: str | None = None


@dataclass
class Run:
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
    raw_output: str      # file name of ab's report, beside results.json
    # CPU and memory of the window, by role (the target's compose service,
    # the database's, "bench" for the load generator): cpu_seconds, cores,
    # cpu_ms_per_request, peak_memory_bytes, ... (see bench.usage). None when
    # cAdvisor could not be read.
    cpu: dict | None = None
    flags: list[str] = field(default_factory=list)  # e.g. "loadgen-bound", "throttled"
    # The window itself: cAdvisor start/end stamps, ab_seconds, and every
    # container's and the host's CPU seconds in it (see bench.usage.window).
    cpu_window: dict | None = None


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

    @property
    def failed(self) -> bool:
        return any(not t.verified for t in self.targets) or any(r.failed for r in self.runs)

    def run_for(self, target: str, file: str, concurrency: int) -> Run | None:
        for r in self.runs:
            if (r.target, r.file, r.concurrency) == (target, file, concurrency):
                return r
        return None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "Results":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["targets"] = [TargetResult(**t) for t in data.get("targets", [])]
        # Results written before a field existed load with its default.
        values["runs"] = [Run(**r) for r in data.get("runs", [])]
        return cls(**values)

    def write_json(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, path: Path) -> "Results":
        return cls.from_dict(json.loads(Path(path).read_text()))
