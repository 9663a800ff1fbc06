"""Pure judgement of make overload's checks (tools/overload.py): a serving
path under far more clients than the lab's timed cases use, or serving a
file far larger than its memory limit. No I/O.

Right is: no OOM kill (of the container or of any process in it), the
container still running, and every answer whole or a clean HTTP error (a
503 that sheds load); wrong is a kill, a connection cut mid-answer, a hang."""
from dataclasses import asdict, dataclass

from ..clients.wrk_output import WrkSummary

MIB = 1024 ** 2


@dataclass(frozen=True)
class ContainerAfter:
    """What Docker and the kernel said of the path's container over the load."""
    oom_kills: int            # Docker's `oom` events in the window
    status: str               # docker inspect State.Status afterwards
    oom_killed: bool          # State.OOMKilled: the container's main process was killed
    exit_code: int
    peak_bytes: int | None    # highest anonymous + tmpfs memory sampled (None: cgroup not found)
    limit_bytes: int          # HostConfig.Memory (0: none)
    kernel_peak_bytes: int | None = None  # the cgroup's own peak usage, page cache included
    kernel_oom_kills: int | None = None   # the cgroup's own OOM kill count over the load

    @property
    def kills(self) -> int:
        """OOM kills as Docker's events or the kernel's count say, whichever saw more."""
        return max(self.oom_kills, self.kernel_oom_kills or 0)

    def describe(self) -> str:
        if self.oom_killed:
            return "OOM-killed"
        if self.status != "running":
            return f"{self.status} (exit {self.exit_code})"
        return "running"


@dataclass(frozen=True)
class OverloadRow:
    check: str                # "clients" or "large file"
    path: str
    load: str                 # what was asked, in words
    answers: int
    whole: int               # 2xx answers read to their end
    clean_errors: int         # non-2xx answers (shed load)
    broken: dict              # answers that were neither: kind -> count
    oom_kills: int
    container: str
    peak_mib: float | None
    limit_mib: float | None
    verdict: str
    kernel_peak_mib: float | None = None  # the cgroup's own peak, page cache included

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "OverloadRow":
        return cls(**d)


def _verdict(after: ContainerAfter, broken: dict) -> str:
    problems = []
    if after.kills:
        problems.append(f"{after.kills} OOM kills")
    if after.describe() != "running":
        problems.append(f"container {after.describe()}")
    problems += [f"{n} x {kind}" for kind, n in broken.items()]
    return "; ".join(problems) if problems else "ok"


def _mib(value: int | None) -> float | None:
    return None if not value else round(value / MIB, 1)


def clients_row(path: str, load: str, wrk: WrkSummary, after: ContainerAfter) -> OverloadRow:
    """wrk at high concurrency: a read error is a connection closed before
    its answer was whole (wrk counts an early EOF so), a timeout an answer
    slower than wrk's --timeout; connect and write errors are connections the
    path would not take or dropped."""
    broken = {f"{kind} error" if kind != "timeout" else "client timeout": n
              for kind, n in wrk.socket_error_kinds.items() if n}
    return OverloadRow(
        check="clients", path=path, load=load, answers=wrk.requests,
        whole=wrk.requests - wrk.non_2xx_3xx, clean_errors=wrk.non_2xx_3xx, broken=broken,
        oom_kills=after.kills, container=after.describe(), peak_mib=_mib(after.peak_bytes),
        limit_mib=_mib(after.limit_bytes), verdict=_verdict(after, broken),
        kernel_peak_mib=_mib(after.kernel_peak_bytes))


def large_file_row(path: str, load: str, fetched: dict, after: ContainerAfter) -> OverloadRow:
    """`python -m bench fetch`'s outcomes: whole, a status (clean when 5xx:
    the path refused the work), or a break."""
    outcomes = dict(fetched["outcomes"])
    whole = outcomes.pop("whole", 0)
    clean = {k: n for k, n in outcomes.items() if k.isdigit() and k.startswith("5")}
    broken = {k: n for k, n in outcomes.items() if k not in clean}
    return OverloadRow(
        check="large file", path=path, load=load, answers=int(fetched["clients"]), whole=whole,
        clean_errors=sum(clean.values()), broken=broken, oom_kills=after.kills, container=after.describe(),
        peak_mib=_mib(after.peak_bytes), limit_mib=_mib(after.limit_bytes), verdict=_verdict(after, broken),
        kernel_peak_mib=_mib(after.kernel_peak_bytes))
