"""Pure parsers of vegeta's output: `vegeta report -type=json` (the open-loop
run's latency percentiles, nanoseconds in the JSON, its achieved rate and its
successes) and `vegeta encode -to=json` (one answer a line, for make
resilience). No I/O, so they are unit-tested on captured outputs."""
import base64
import hashlib
import json
from dataclasses import dataclass
from datetime import datetime


class VegetaOutputError(ValueError):
    pass


@dataclass(frozen=True)
class VegetaSummary:
    requests: int
    successes: int       # answers with a 2xx or 3xx status
    seconds: float       # from the first request sent to the last answer
    rate: float          # requests sent per second: the fixed rate, if vegeta kept it
    throughput: float    # successful answers per second
    bytes_in: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    status_codes: dict[str, int]
    errors: list[str]


def parse(text: str) -> VegetaSummary:
    try:
        data = json.loads(text)
        latencies = data["latencies"]
        requests = int(data["requests"])
        return VegetaSummary(
            requests=requests,
            successes=round(float(data["success"]) * requests),
            seconds=(int(data["duration"]) + int(data["wait"])) / 1e9,
            rate=float(data["rate"]),
            throughput=float(data["throughput"]),
            bytes_in=int(data["bytes_in"]["total"]),
            p50_ms=latencies["50th"] / 1e6, p90_ms=latencies["90th"] / 1e6, p99_ms=latencies["99th"] / 1e6,
            max_ms=latencies["max"] / 1e6,
            status_codes={str(k): int(v) for k, v in (data.get("status_codes") or {}).items()},
            errors=[str(e) for e in data.get("errors") or []],
        )
    except (ValueError, KeyError, TypeError) as e:
        raise VegetaOutputError(f"not a vegeta JSON report: {e}") from e


@dataclass(frozen=True)
class Answer:
    """One request of `vegeta encode -to=json`."""
    sent: float          # Unix time the request left, seconds
    latency: float       # seconds to the whole answer (or to the error)
    code: int            # HTTP status; 0 when no answer came (refused, timeout)
    bytes_in: int
    body_sha256: str     # of the body vegeta read ("" without one)
    error: str           # vegeta's error ("" for a 2xx/3xx read whole)

    @property
    def done(self) -> float:
        return self.sent + self.latency


def _unix_seconds(stamp: str) -> float:
    """RFC 3339 with nanoseconds (Go's format) to Unix seconds; Python's
    fromisoformat takes at most microseconds."""
    head, dot, rest = stamp.partition(".")
    if not dot:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    digits = rest.rstrip("Z")
    zone = ""
    for sign in "+-":
        if sign in digits:
            digits, zone = digits.split(sign, 1)
            zone = sign + zone
            break
    whole = datetime.fromisoformat(head + (zone or "+00:00")).timestamp()
    return whole + int(digits) / 10 ** len(digits)


def parse_result(line: str) -> Answer:
    """One line of `vegeta encode -to=json`. A status of 0 is no answer, or
    one cut short: vegeta reads the whole body (even with -max-body=0, which
    only keeps none of it) before it records the status, so a connection
    closed mid-body is code 0 with the reader's error ("unexpected EOF")."""
    try:
        r = json.loads(line)
        body = base64.b64decode(r["body"]) if r.get("body") else b""
        return Answer(
            sent=_unix_seconds(r["timestamp"]), latency=int(r["latency"]) / 1e9, code=int(r["code"]),
            bytes_in=int(r["bytes_in"]), body_sha256=hashlib.sha256(body).hexdigest() if body else "",
            error=str(r.get("error") or ""))
    except (ValueError, KeyError, TypeError) as e:
        raise VegetaOutputError(f"not a vegeta JSON result: {e}") from e


def parse_results(text: str) -> list[Answer]:
    """`vegeta encode -to=json` lines as Answers, in the order sent."""
    answers = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            answers.append(parse_result(line))
        except VegetaOutputError as e:
            raise VegetaOutputError(f"line {number}: {e}") from e
    return sorted(answers, key=lambda a: a.sent)


def completion_times(answers: list[Answer]) -> list[tuple[float, float, int]]:
    """When each answer completed, in parse_completions' shape: [(earliest,
    latest, requests)], exact here (errors included: they cost the path
    too)."""
    return [(a.done, a.done, 1) for a in answers]
