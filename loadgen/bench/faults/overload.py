"""Pure judgement of make overload's checks (tools/lab/overload.py): a serving
path's goodput when offered load open-loop past its capacity, then under
far more clients than the lab's timed cases use, or serving a file far
larger than its memory limit. No I/O.

Goodput (judged): each path's capacity, its best whole-answer rate over
closed-loop concurrencies 1, 2, 4 ..., then WINDOWS windows at each of
MULTIPLES times it, open loop, interleaved; a path holds when the median
window keeps HOLDS_SHARE of its capacity as whole answers per second at
every multiple, its refusals (503) come back within REFUSAL_P99_MS at p99,
and nothing failed (a cut, a client timeout, any other status) or was
OOM-killed. A window whose load generator could get no more CPU, or
shared a core that saturated, is named and not judged (loadgen_starved);
a saturated core that only the path and its database share is the path's
own limit, judged.

The other checks (reported; the clients check not judged: its clients ask
again at once on every refusal): no OOM kill (of the container or of any
process in it), the container still running, and every answer whole or a
clean HTTP error (a 503 that sheds load); wrong is a kill, a connection cut
mid-answer, a hang."""
import re
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

from ..clients.vegeta_output import Answer
from ..clients.wrk_output import WrkSummary
from ..measure import usage
from ..measure.bottleneck import LOADGEN_CPU, SHARED_CORE, bottleneck
from ..measure.flags import CORE_SATURATED_SHARE
from ..measure.latency import order_statistic

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


# --- goodput: capacity, then open-loop load at multiples of it ---

MULTIPLES = (3, 10)      # offered load, in multiples of the path's capacity
WINDOWS = 3              # windows per condition (path x multiple), judged on their median
HOLDS_SHARE = 0.8        # of its capacity, the whole answers per second a path keeps at every multiple
REFUSAL_P99_MS = 100.0   # a refusal slower than this at p99 spent the work it was meant to save
CAPACITY_GAIN = 1.05     # a doubled concurrency climbs on only when it beat the best rate so far by this
REFUSED = 503
# vegeta's workers at most in an open-loop window: each holds a connection.
# Enough for 10x a capacity of 1,000/s whose answers take up to a second;
# past it vegeta falls behind its schedule and the window says so.
OPEN_LOOP_WORKERS = 10000


def request_timeout(seconds: float) -> float:
    """Each request's timeout in a window: the window's length (at least a
    second). An answer later than that is no goodput, its client has left;
    and no window drains for longer than it loaded."""
    return max(1.0, seconds)


@dataclass(frozen=True)
class Window:
    """One vegeta run's answers, tallied. Whole: a 2xx read to its end
    (vegeta checks the body against the framing: a cut one is status 0)."""
    rate: float              # requests/s asked (0: closed loop)
    workers: int | None      # closed loop: its clients; open loop: vegeta's cap (None: not recorded, see from_dict)
    seconds: float           # the attack's duration asked
    sent: int
    sent_rate: float         # requests over first to last sent
    whole: int
    whole_rate: float        # whole answers per second (whole_rate())
    refused: int             # 503s
    failures: dict           # what was neither whole nor refused: kind -> count
    refused_p50_ms: float | None
    refused_p99_ms: float | None
    admitted_p99_ms: float | None  # of the whole answers
    first_sent: float        # Unix seconds
    last_done: float

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Window":
        """A window as results.json keeps it; without `workers` in the runs
        tools/lab/keep_evidence.py slimmed before it kept that number (None:
        not recorded; goodput_windows finds a capacity step's elsewhere)."""
        return cls(**{"workers": None, **d})


def failure_kind(answer: Answer) -> str | None:
    """None for a whole answer or a refusal; else what went wrong, in words."""
    if 200 <= answer.code < 300 or answer.code == REFUSED:
        return None
    if answer.code:
        return f"status {answer.code}"
    error = answer.error.lower()
    if "timeout" in error or "deadline exceeded" in error:
        return "client timeout"
    if "refused" in error:
        return "connection refused"
    if "eof" in error or "reset" in error or "broken pipe" in error:
        return "cut"
    return "no answer"


def _quantile(ordered: list[float], q: float) -> float | None:
    return round(order_statistic(ordered, q), 3) if ordered else None


def whole_rate(whole: int, seconds: float, first_sent: float, last_whole_done: float) -> float:
    """Whole answers per second over the window: from the first request sent
    to the last whole answer, never shorter than the duration asked. A path
    that keeps serving at its capacity while its backlog drains reads at its
    capacity, closed loop and open loop alike."""
    span = max(seconds, last_whole_done - first_sent)
    return whole / span if span > 0 else 0.0


def tally(answers: Iterable[Answer], rate: float, workers: int, seconds: float) -> Window:
    """One pass over a window's answers (a stream: a window at 10x a fast
    path's capacity holds hundreds of thousands)."""
    refused_ms, whole_ms, failures = [], [], {}
    sent = whole = 0
    first = last_sent = last_done = last_whole = None
    for a in answers:
        sent += 1
        first = a.sent if first is None else min(first, a.sent)
        last_sent = a.sent if last_sent is None else max(last_sent, a.sent)
        last_done = a.done if last_done is None else max(last_done, a.done)
        kind = failure_kind(a)
        if kind:
            failures[kind] = failures.get(kind, 0) + 1
        elif a.code == REFUSED:
            refused_ms.append(a.latency * 1000)
        else:
            whole += 1
            whole_ms.append(a.latency * 1000)
            last_whole = a.done if last_whole is None else max(last_whole, a.done)
    refused_ms.sort()
    whole_ms.sort()
    first = first or 0.0
    sent_span = (last_sent or 0.0) - first
    return Window(
        rate=rate, workers=workers, seconds=seconds, sent=sent,
        sent_rate=round((sent - 1) / sent_span, 3) if sent > 1 and sent_span > 0 else 0.0,
        whole=whole, whole_rate=round(whole_rate(whole, seconds, first, last_whole or first), 3),
        refused=len(refused_ms), failures=failures, refused_p50_ms=_quantile(refused_ms, 0.5),
        refused_p99_ms=_quantile(refused_ms, 0.99), admitted_p99_ms=_quantile(whole_ms, 0.99),
        first_sent=first, last_done=last_done or first)


def climbing(rates: list[float]) -> bool:
    """Whether to measure the next, doubled concurrency: the one just
    measured beat the best before it by CAPACITY_GAIN."""
    return len(rates) < 2 or rates[-1] > CAPACITY_GAIN * max(rates[:-1])


def loadgen_starved(bottleneck: str, cpu: dict, busy: dict[str, float]) -> bool:
    """Whether a window says nothing of the path: its load generator could
    get no more CPU (LOADGEN_CPU: its allowance, a core full of other work,
    behind its schedule), or a core it is pinned to saturated with another
    container's work on it (SHARED_CORE there): it then reads its answers
    late, refusals and timeouts included. A saturated core that only the
    path and its database share (make overload's placement on two cores) is
    the path's own limit, judged. A window kept without its figures cannot
    tell whose core saturated: not judged."""
    if bottleneck == LOADGEN_CPU:
        return True
    if bottleneck != SHARED_CORE:
        return False
    if not cpu or not busy:
        return True
    saturated = {c for c in usage.shared_cpus(cpu) if busy.get(f"cpu{c}", 0.0) > CORE_SATURATED_SHARE}
    return bool(saturated & set((cpu.get(usage.LOADGEN) or {}).get("cpuset") or ()))


def window_flags(cpu: dict, target: str, tool_cores: float | None, tool_limit: float | None,
                 busy: dict[str, float], rate: float, sent_rate: float) -> tuple[list[str], str]:
    """A window's flags and bottleneck, decided where the lab decides them
    for every timed row (measure.usage.flags, measure.bottleneck); an open
    loop sent below its rate fell behind its schedule (usage.behind_schedule)."""
    found = usage.flags(cpu, target, tool_cores, tool_limit, busy)
    if usage.behind_schedule(rate, sent_rate):
        found.append(usage.BEHIND_SCHEDULE)
    return found, bottleneck(found, cpu, target)


@dataclass(frozen=True)
class Measured:
    """One window as make overload ran it: which, and how far to trust it,
    with the figures its flags were decided on (a timed row's cpu and
    busy_shares; none in runs before they were kept)."""
    path: str
    multiple: int            # 0: a capacity step (closed loop)
    round: int
    window: Window
    flags: list[str] = field(default_factory=list)
    bottleneck: str = ""
    cpu: dict = field(default_factory=dict)          # role -> usage.container_usage, bench's with its tool_cores
    busy_shares: dict = field(default_factory=dict)  # /proc/stat's busy share of each CPU over the window

    @property
    def judged(self) -> bool:
        return not loadgen_starved(self.bottleneck, self.cpu, self.busy_shares)

    @property
    def name(self) -> str:
        workers = self.window.workers
        what = f"{self.multiple}x" if self.multiple else "c not recorded" if workers is None else f"c={workers}"
        return f"{what} #{self.round}"

    def to_dict(self) -> dict:
        return {"path": self.path, "multiple": self.multiple, "round": self.round, "window": self.window.to_dict(),
                "flags": self.flags, "bottleneck": self.bottleneck, "judged": self.judged, "cpu": self.cpu,
                "busy_shares": self.busy_shares}

    @classmethod
    def from_dict(cls, d: dict) -> "Measured":
        return cls(d["path"], d["multiple"], d["round"], Window.from_dict(d["window"]), d["flags"], d["bottleneck"],
                   d.get("cpu") or {}, d.get("busy_shares") or {})


def goodput_windows(doc: dict) -> list[Measured]:
    """Pure: a results.json's goodput windows. A capacity step kept without
    its `workers` (Window.from_dict) takes them from its path's row, whose
    steps name each one, "c=N: R/s", in the order the windows are kept;
    only where that step's rate is the window's own."""
    steps = {row["path"]: row.get("steps") or [] for row in doc.get("goodput") or []}
    seen: dict[str, int] = {}
    found = []
    for d in doc.get("goodput_windows") or []:
        window = d["window"]
        if d["multiple"] == 0:
            k = seen[d["path"]] = seen.get(d["path"], -1) + 1
            named = steps.get(d["path"], [])
            step = re.fullmatch(r"c=(\d+): (\S+)/s", named[k]) if k < len(named) else None
            if "workers" not in window and step and step[2] == f"{window['whole_rate']:g}":
                d = {**d, "window": {**window, "workers": int(step[1])}}
        found.append(Measured.from_dict(d))
    return found


def capacity(steps: list[Measured]) -> Measured | None:
    """The capacity step: the best whole-answer rate of the closed-loop steps."""
    return max(steps, key=lambda m: m.window.whole_rate, default=None)


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


@dataclass(frozen=True)
class Condition:
    """A path at one multiple of its capacity: its windows' medians (of the
    judged ones) and range."""
    multiple: int
    offered_rps: float
    windows: int
    judged: int
    share: float | None      # median goodput share: whole answers/s over capacity
    share_low: float | None
    share_high: float | None
    whole_rps: float | None
    sent_rps: float | None
    refused: int             # over every window
    refused_p50_ms: float | None
    refused_p99_ms: float | None
    admitted_p99_ms: float | None
    not_judged: list[str]    # "3x #2: load generator", ...


def condition(multiple: int, cap: float, windows: list[Measured]) -> Condition:
    judged = [m.window for m in windows if m.judged]
    shares = sorted(w.whole_rate / cap for w in judged) if cap > 0 else []
    return Condition(
        multiple=multiple, offered_rps=round(multiple * cap, 3), windows=len(windows), judged=len(judged),
        share=_median(shares), share_low=round(shares[0], 3) if shares else None,
        share_high=round(shares[-1], 3) if shares else None, whole_rps=_median([w.whole_rate for w in judged]),
        sent_rps=_median([w.sent_rate for w in judged]), refused=sum(m.window.refused for m in windows),
        refused_p50_ms=_median([w.refused_p50_ms for w in judged]),
        refused_p99_ms=_median([w.refused_p99_ms for w in judged]),
        admitted_p99_ms=_median([w.admitted_p99_ms for w in judged]),
        not_judged=[f"{m.name}: {m.bottleneck}" for m in windows if not m.judged])


@dataclass(frozen=True)
class GoodputRow:
    path: str
    capacity_rps: float
    capacity_workers: int
    capacity_flags: list[str]    # the capacity step's
    steps: list[str]             # each concurrency climbed: "c=4: 120.5/s"
    conditions: list[dict]       # Condition, one per multiple
    failures: dict               # over the capacity steps and the judged windows
    oom_kills: int
    container: str
    verdict: str
    # the capacity step was not judged (its load generator starved): the rate is a floor of the path's
    capacity_floor: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "GoodputRow":
        return cls(**d)


def goodput_row(path: str, steps: list[Measured], windows: list[Measured], after: ContainerAfter) -> GoodputRow:
    """The verdict: "holds", or what did not hold, in words."""
    return judged_row(path, steps, windows, after.kills, after.describe())


def judged_row(path: str, steps: list[Measured], windows: list[Measured], oom_kills: int,
               container: str) -> GoodputRow:
    """A path's row from its windows, judged by the rule in force (a kept
    run's too: its report says what its windows show today, not what the
    rule of its day said); the container as ContainerAfter described it."""
    best = capacity(steps)
    cap = best.window.whole_rate if best else 0.0
    conditions = [condition(m, cap, [w for w in windows if w.multiple == m])
                  for m in sorted({w.multiple for w in windows})]
    failures: dict[str, int] = {}
    # a starved load generator reads answers late: its windows' timeouts are not the path's
    for m in steps + [w for w in windows if w.judged]:
        for kind, n in m.window.failures.items():
            failures[kind] = failures.get(kind, 0) + n
    problems, unjudged = [], []
    if cap <= 0:
        problems.append("no whole answer at any concurrency")
    for c in conditions:
        if not c.judged:
            unjudged.append(f"{c.multiple}x")
            continue
        if c.share is not None and c.share < HOLDS_SHARE:
            problems.append(f"{c.multiple}x keeps {c.share:.0%}")
        if c.refused_p99_ms is not None and c.refused_p99_ms >= REFUSAL_P99_MS:
            problems.append(f"{c.multiple}x refusals' p99 {c.refused_p99_ms:.0f} ms")
    problems += [f"{n} x {kind}" for kind, n in sorted(failures.items())]
    if oom_kills:
        problems.append(f"{oom_kills} OOM kills")
    if container != "running":
        problems.append(f"container {container}")
    if unjudged:
        problems.append(f"{', '.join(unjudged)} not judged: every window's load generator saturated or shared a "
                        "saturated core")
    return GoodputRow(
        path=path, capacity_rps=round(cap, 3), capacity_workers=best.window.workers if best else 0,
        capacity_flags=list(best.flags) if best else [], capacity_floor=bool(best) and not best.judged,
        steps=[f"c={m.window.workers}: {m.window.whole_rate:g}/s" for m in steps],
        conditions=[asdict(c) for c in conditions], failures=failures, oom_kills=oom_kills,
        container=container, verdict="; ".join(problems) or "holds")


def rejudged(doc: dict) -> list[GoodputRow]:
    """A results.json's goodput rows, each judged again from its kept
    windows (judged_row), its OOM kills and container state as kept: the
    table, the verdict and the flagged windows then follow one rule."""
    windows = goodput_windows(doc)
    rows = []
    for kept in map(GoodputRow.from_dict, doc.get("goodput") or []):
        own = [m for m in windows if m.path == kept.path]
        if not own:  # a row without its windows: as kept
            rows.append(kept)
            continue
        rows.append(judged_row(kept.path, [m for m in own if not m.multiple], [m for m in own if m.multiple],
                               kept.oom_kills, kept.container))
    return rows
