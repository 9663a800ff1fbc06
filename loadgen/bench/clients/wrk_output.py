"""Pure parser for wrk's report (run with --latency). No I/O, so it is
unit-tested on captured outputs."""
import re
from dataclasses import dataclass, field

_TIME_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0}
_SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "TB": 1024 ** 4}


class WrkOutputError(ValueError):
    pass


@dataclass(frozen=True)
class WrkSummary:
    requests: int
    seconds: float
    rps: float
    transfer_bytes_per_s: float
    # As wrk printed them: its mean and percentiles count the samples it adds
    # for slow answers (a coordinated-omission correction, results.py's
    # CORRECTED_LATENCY_TOOLS), so they are not its answers' own; the max is.
    latency_avg_ms: float
    latency_max_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    non_2xx_3xx: int
    socket_errors: int   # connect + read + write + timeout
    # each kind: a read error is also an answer cut short (the connection
    # closed before its body was whole), a timeout one slower than --timeout
    socket_error_kinds: dict = field(default_factory=dict)


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if not m:
        raise WrkOutputError(f"not a wrk duration: {text!r}")
    return float(m.group(1)) * _TIME_UNITS[m.group(2)]


def _bytes(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(B|KB|MB|GB|TB)", text)
    if not m:
        raise WrkOutputError(f"not a wrk size: {text!r}")
    return float(m.group(1)) * _SIZE_UNITS[m.group(2)]


def _search(text: str, pattern: str) -> re.Match:
    m = re.search(pattern, text, re.MULTILINE)
    if m is None:
        raise WrkOutputError(f"wrk output has no line matching {pattern!r}")
    return m


# wrk prints each thread statistic right-aligned in a fixed width and cuts
# it to that width (wrk.c, print_stats: "    %-10s", then columns of 8, 10
# and 9), so a field that fills its column touches its neighbour and splitting
# on blanks can shift them: read by column.
_AVG, _MAX = slice(14, 22), slice(32, 41)


def _latency(text: str) -> tuple[float, float]:
    """The thread statistics' Latency line: average and maximum, in ms."""
    line = _search(text, r"^    Latency .*$").group(0)
    try:
        return _ms(line[_AVG].strip()), _ms(line[_MAX].strip())
    except WrkOutputError as e:
        raise WrkOutputError(f"{e} in wrk's line {line.strip()!r}") from None


def parse(text: str) -> WrkSummary:
    latency_avg_ms, latency_max_ms = _latency(text)
    totals = _search(text, r"^\s+(\d+) requests in ([\d.]+)(\w+),")
    # wrk pads a short unit ("1.14s ") to the width of "ms": trailing blanks.
    percentiles = {int(p): _ms(v) for p, v in re.findall(r"^\s+(\d+)%\s+(\S+)\s*$", text, re.MULTILINE)}
    if not {50, 90, 99} <= percentiles.keys():
        raise WrkOutputError("wrk output has no latency distribution (run it with --latency)")
    non_2xx = re.search(r"^\s+Non-2xx or 3xx responses: (\d+)", text, re.MULTILINE)
    errors = re.search(r"^\s+Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                       text, re.MULTILINE)
    return WrkSummary(
        requests=int(totals.group(1)),
        seconds=_ms(totals.group(2) + totals.group(3)) / 1000,
        rps=float(_search(text, r"^Requests/sec:\s+([\d.]+)").group(1)),
        transfer_bytes_per_s=_bytes(_search(text, r"^Transfer/sec:\s+(\S+)").group(1)),
        latency_avg_ms=latency_avg_ms,
        latency_max_ms=latency_max_ms,
        p50_ms=percentiles[50], p90_ms=percentiles[90], p99_ms=percentiles[99],
        non_2xx_3xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(g) for g in errors.groups()) if errors else 0,
        socket_error_kinds=dict(zip(("connect", "read", "write", "timeout"),
                                    (int(g) for g in errors.groups()) if errors else (0, 0, 0, 0))),
    )
