"""Pure parser for `vegeta report -type=json`: the open-loop run's latency
percentiles (nanoseconds in the JSON), its achieved rate and its successes.
No I/O, so it is unit-tested on captured outputs."""
import json
from dataclasses import dataclass


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
