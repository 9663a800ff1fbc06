"""Pure analysis of one resilience case (make resilience): a serving path
under a steady, fixed-rate load while its database is restarted or paused.
From vegeta's answers and the instants the fault began and ended it counts
what went wrong, what the path answered while the database was away, and how
soon it served again. No I/O, so it is unit-tested on captured answers.

Right, under a fault, is a clean error soon (nginx-gridfs: 503 within its
timeouts) and good answers again soon after the database is back; wrong is a
hang (an answer slower than BOUND_S), a truncated 200, or no recovery.
Recovered means the rate before the fault holds again with no error for
RATE_BACK_HOLD seconds, not one good answer: a path still failing four
requests in five after the database returned is not recovered, whenever
its first good answer came.

Every figure counts from the return of the command that brought the
database back. Beside them, when the database answered again (the load
container probes it on fresh connections): a server that starts slowly
explains a slow recovery, but a probe can also be late (PostgreSQL's was,
by about 4 s, in a run where flask-postgres served within 0.1 s), so it
moves no figure and cannot make a path look faster."""
import math
from collections import Counter
from dataclasses import asdict, dataclass

from ..clients.vegeta_output import Answer

BOUND_S = 5.0            # an answer slower than this, or a recovery later than this, is wrong
RATE_BACK_SHARE = 0.9    # "back at its level": good answers/s at 90% of the level before the fault
RATE_BACK_HOLD = 3       # ... for this many whole seconds in a row


@dataclass(frozen=True)
class Fault:
    kind: str       # "restart" or "pause"
    database: str   # the compose service taken away
    began: float    # Unix seconds: the command that took it away was issued
    down: float     # ... it returned: the database is gone (stopped) or frozen (paused)
    back: float     # the command that brought it back returned
    answering: float | None = None  # the database answered the load container's probe again (None: not probed)


def answering_again(events: list[tuple[str, float]], began: float) -> float | None:
    """From the probe's changes [(state, Unix seconds)] in order: when the
    database answered again after the fault took it away (the first
    "answering" after the last "silent" since the fault began), or None if
    the probe never saw it silent then."""
    silent = [i for i, (state, at) in enumerate(events) if state == "silent" and at >= began - 1]
    if not silent:
        return None
    return next((at for state, at in events[silent[-1]:] if state == "answering"), None)


@dataclass(frozen=True)
class ResilienceRow:
    path: str
    fault: str
    database: str
    rate: float                   # requests/s asked for
    requests: int
    good: int                     # 200s carrying the file's exact bytes
    errors: int                   # every other answer, over the whole run
    truncated: int                # 200s whose body is not the file
    outage_s: float               # from began to back
    outage_answers: dict          # what requests sent during the outage got: status or error -> count
    outage_slowest_ms: float | None
    level_before: float | None    # good answers/s before the fault
    first_good_s: float | None    # from back to the first good answer to a request sent after it
    rate_back_s: float | None     # from back to the end of the first second of RATE_BACK_HOLD at the level
    verdict: str
    errors_after_back: int = 0    # answers to requests sent after the database was back that were not good
    recovered_s: float | None = None  # ... to the end of the first second of RATE_BACK_HOLD at the level, no error
    trial: int = 1                # of RESILIENCE_TRIALS, each with its fault at another moment
    fault_at_s: float | None = None  # seconds into the load the fault began (jittered per trial)
    # from the command that brought the database back to its answering the probe
    # (None: not probed); shown beside the figures above, which count from back
    answering_after_s: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ResilienceRow":
        return cls(**d)


def outcome(answer: Answer, expected_sha256: str) -> str:
    """What one request got, as the table counts it."""
    if answer.code == 200:
        return "200" if answer.body_sha256 == expected_sha256 and not answer.error else "200 truncated"
    if answer.code:
        return str(answer.code)
    error = answer.error.lower()
    if "timeout" in error or "deadline exceeded" in error:
        return "client timeout"
    if "refused" in error:
        return "connection refused"
    if "reset" in error or "eof" in error or "broken pipe" in error:
        return "connection reset"
    return "client error"


def good_per_second(answers: list[Answer], expected_sha256: str, start: float, seconds: int) -> list[int]:
    """Good answers completed in each whole second from start."""
    counts = [0] * max(seconds, 0)
    for a in answers:
        if outcome(a, expected_sha256) == "200":
            i = math.floor(a.done - start)
            if 0 <= i < len(counts):
                counts[i] += 1
    return counts


def level_before(answers: list[Answer], expected_sha256: str, fault: Fault) -> float | None:
    """Mean good answers/s over the whole seconds between the load's first
    second (a ramp) and the fault."""
    if not answers:
        return None
    start = answers[0].sent + 1
    counts = good_per_second(answers, expected_sha256, start, int(fault.began - start))
    # nothing good before the fault: no level to come back to
    return sum(counts) / len(counts) if len(counts) >= 2 and any(counts) else None


def errors_per_second(answers: list[Answer], expected_sha256: str, start: float, seconds: int) -> list[int]:
    """Requests sent in each whole second from start that did not get a good answer."""
    counts = [0] * max(seconds, 0)
    for a in answers:
        i = math.floor(a.sent - start)
        if 0 <= i < len(counts) and outcome(a, expected_sha256) != "200":
            counts[i] += 1
    return counts


def rate_back_after(answers: list[Answer], expected_sha256: str, fault: Fault, level: float | None,
                    clean: bool = False) -> float | None:
    """Seconds from back to the end of the first whole second from which good
    answers/s stay at RATE_BACK_SHARE of the level for RATE_BACK_HOLD seconds
    (clean: and no request sent in those seconds failed); None when that never
    happens before the load ends."""
    if level is None or not answers:
        return None
    last_sent = max(a.sent for a in answers)
    seconds = int(last_sent - fault.back)
    counts = good_per_second(answers, expected_sha256, fault.back, seconds)
    errors = errors_per_second(answers, expected_sha256, fault.back, seconds) if clean else [0] * len(counts)
    floor = RATE_BACK_SHARE * level
    for i in range(len(counts) - RATE_BACK_HOLD + 1):
        held = range(i, i + RATE_BACK_HOLD)
        if all(counts[k] >= floor and not errors[k] for k in held):
            return float(i + 1)
    return None


def verdict(row_outage: Counter, slowest_ms: float | None, truncated: int, first_good_s: float | None,
            recovered_s: float | None = None, errors_after: int = 0, sent_after: int = 0) -> str:
    problems = []
    if truncated:
        problems.append(f"{truncated} truncated 200s")
    if slowest_ms is not None and slowest_ms > BOUND_S * 1000:
        problems.append(f"hangs: an outage answer took {slowest_ms / 1000:.1f} s")
    # 503 is the contract's answer while the store is away; a 200 is fine
    # (a cache, or an answer the database gave before it went)
    others = {k: n for k, n in row_outage.items() if k not in ("200", "503", "200 truncated")}
    if others:
        problems.append("during the outage " + ", ".join(f"{n} x {k}" for k, n in others.items()))
    if first_good_s is None:
        problems.append("no good answer after the database was back")
    elif first_good_s > BOUND_S:
        problems.append(f"first good answer {first_good_s:.1f} s after the database was back")
    if first_good_s is not None and recovered_s is None:
        share = f" ({errors_after / sent_after:.0%} of those sent)" if sent_after else ""
        problems.append(f"not recovered: {errors_after} errors after the database was back{share}, and the rate "
                        f"before the fault never held {RATE_BACK_HOLD} s with no error")
    elif recovered_s is not None and recovered_s > BOUND_S:
        problems.append(f"recovered only {recovered_s:.0f} s after the database was back")
    if problems:
        return "; ".join(problems)
    return (f"recovered in {recovered_s:.0f} s (first good answer after {first_good_s:.2f} s; "
            f"{errors_after} errors after the return)")


def analyse(path: str, rate: float, answers: list[Answer], expected_sha256: str, fault: Fault) -> ResilienceRow:
    outcomes = [outcome(a, expected_sha256) for a in answers]
    # from the command that took it away: requests in flight as it goes are the telling ones
    back = fault.back
    during = [a for a in answers if fault.began <= a.sent < back]
    outage = Counter(outcome(a, expected_sha256) for a in during)
    slowest = max((a.latency for a in during), default=None)
    first_good = min((a.done for a, o in zip(answers, outcomes) if o == "200" and a.sent >= back),
                     default=None)
    first_good_s = None if first_good is None else first_good - back
    level = level_before(answers, expected_sha256, fault)
    truncated = outcomes.count("200 truncated")
    slowest_ms = None if slowest is None else slowest * 1000
    after = [o for a, o in zip(answers, outcomes) if a.sent >= back]
    errors_after = sum(1 for o in after if o != "200")
    recovered = rate_back_after(answers, expected_sha256, fault, level, clean=True)
    return ResilienceRow(
        path=path, fault=fault.kind, database=fault.database, rate=rate, requests=len(answers),
        good=outcomes.count("200"), errors=len(answers) - outcomes.count("200"), truncated=truncated,
        outage_s=back - fault.began, outage_answers=dict(sorted(outage.items())),
        outage_slowest_ms=slowest_ms, level_before=level, first_good_s=first_good_s,
        rate_back_s=rate_back_after(answers, expected_sha256, fault, level),
        verdict=verdict(outage, slowest_ms, truncated, first_good_s, recovered, errors_after, len(after)),
        errors_after_back=errors_after, recovered_s=recovered,
        answering_after_s=None if fault.answering is None else round(fault.answering - fault.back, 3))


def _median(values: list[float]) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarise(rows: list[ResilienceRow]) -> list[dict]:
    """One line per path and fault over its trials: how many recovered, the
    median and the maximum of the first good answer, of the recovery (the
    rate held with no error) and of the slowest outage answer. A driver's
    recovery depends on where the fault falls in its heartbeat cycle, which
    one trial cannot show; the maximum is what a user may meet."""
    out = []
    for key in dict.fromkeys((r.path, r.fault, r.database) for r in rows):
        trials = [r for r in rows if (r.path, r.fault, r.database) == key]
        ok = [r for r in trials if r.verdict.startswith("recovered in")]
        recovered = [r.recovered_s for r in trials if r.recovered_s is not None]
        first = [r.first_good_s for r in trials if r.first_good_s is not None]
        slowest = [r.outage_slowest_ms for r in trials if r.outage_slowest_ms is not None]
        answering = [r.answering_after_s for r in trials if r.answering_after_s is not None]
        never = len(trials) - len(recovered)
        verdict = (f"right in all {len(trials)} trials" if len(ok) == len(trials) else
                   f"wrong in {len(trials) - len(ok)} of {len(trials)} trials"
                   + (f" ({never} not recovered)" if never else ""))
        out.append({"path": key[0], "fault": key[1], "database": key[2], "trials": len(trials),
                    "right": len(ok),
                    "first_good_median_s": _median(first), "first_good_max_s": max(first, default=None),
                    "recovered_median_s": _median(recovered), "recovered_max_s": max(recovered, default=None),
                    "slowest_outage_median_ms": _median(slowest), "slowest_outage_max_ms": max(slowest, default=None),
                    "answering_median_s": _median(answering), "answering_max_s": max(answering, default=None),
                    "verdict": verdict})
    return out
