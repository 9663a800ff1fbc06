"""Pure parsers for ApacheBench output: the text report and the -e CSV of
percentiles. No I/O, so they are unit-tested on captured outputs."""
import re
from dataclasses import dataclass


class AbOutputError(ValueError):
    pass


@dataclass(frozen=True)
class AbSummary:
    complete: int
    failed: int          # ab's "Failed requests" (connect, receive, length, exceptions)
    non_2xx: int         # "Non-2xx responses", absent when all were 2xx
    rps: float
    time_per_request_ms: float            # mean, across all concurrent requests
    time_per_request_concurrent_ms: float  # mean per request at this concurrency
    transfer_kbps: float
    document_length: int
    seconds: float
    body_bytes: int      # "HTML transferred": the bodies of every answer, whole or not
    # The failed requests' kinds, printed under "Failed requests" when there
    # are any. A length failure is an answer whose body's length differs from
    # the first answer's, whatever its status: a 503's short body is one.
    failed_connect: int = 0
    failed_receive: int = 0
    failed_length: int = 0
    failed_exceptions: int = 0

    @property
    def socket_failures(self) -> int:
        """Requests that got no answer: a connection refused, a read error or
        an exception. Length failures are judged by short_answers instead."""
        return self.failed_connect + self.failed_receive + self.failed_exceptions


def _field(text: str, pattern: str, convert=float, required: bool = True):
    m = re.search(pattern, text, re.MULTILINE)
    if m is None:
        if required:
            raise AbOutputError(f"ab output has no line matching {pattern!r}")
        return None
    return convert(m.group(1))


def parse_summary(text: str) -> AbSummary:
    """ab prints no rates when no request completed (with -t it can stop
    while every answer is still arriving): they read as 0."""
    complete = _field(text, r"^Complete requests:\s+(\d+)", int)
    rates = complete > 0
    failed = _field(text, r"^Failed requests:\s+(\d+)", int)
    kinds = re.search(r"^\s+\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)$", text,
                      re.MULTILINE)
    if failed and kinds is None:
        raise AbOutputError("ab output counts failed requests but lacks their kinds (Connect, Receive, ...)")
    connect, receive, length, exceptions = (int(k) for k in kinds.groups()) if kinds else (0, 0, 0, 0)
    return AbSummary(
        complete=complete,
        failed=failed,
        non_2xx=_field(text, r"^Non-2xx responses:\s+(\d+)", int, required=False) or 0,
        rps=_field(text, r"^Requests per second:\s+([\d.]+)", required=rates) or 0.0,
        time_per_request_concurrent_ms=_field(text, r"^Time per request:\s+([\d.]+) \[ms\] \(mean\)$",
                                              required=rates) or 0.0,
        time_per_request_ms=_field(text, r"^Time per request:\s+([\d.]+) \[ms\] \(mean, across",
                                   required=rates) or 0.0,
        transfer_kbps=_field(text, r"^Transfer rate:\s+([\d.]+)", required=rates) or 0.0,
        document_length=_field(text, r"^Document Length:\s+(\d+) bytes", int),
        seconds=_field(text, r"^Time taken for tests:\s+([\d.]+) seconds"),
        body_bytes=_field(text, r"^HTML transferred:\s+(\d+) bytes", int),
        failed_connect=connect, failed_receive=receive, failed_length=length, failed_exceptions=exceptions,
    )


def short_answers(summary: AbSummary, expected_size: int) -> int:
    """2xx answers whose bodies cannot all have been the whole file. ab
    counts an answer as complete when the server closes the connection, even
    with no response at all, and checks lengths only against the first
    answer's: the bytes it read are the check it cannot fool. The bodies of
    answers that were not 2xx (a 503's page) are in those bytes too and are
    taken as none: a cut 2xx body is missed only where the refused answers'
    pages add up to a whole file."""
    if expected_size <= 0:
        return 0
    return max(0, summary.complete - summary.non_2xx - summary.body_bytes // expected_size)


def parse_percentiles(csv_text: str, complete: int | None = None) -> dict[int, float]:
    """ab -e output: 'Percentage served,Time in ms' then one row per percent
    0..100, with fractional milliseconds (the text report rounds to 1 ms).

    ab writes row i from sample int(0.5 + complete * i / 100), which for a
    high i and few requests is past its last sample (e.g. i = 99 of 40
    requests): it prints whatever lies there. By nearest rank such a row is
    the last sample, the maximum, which row 100 holds; given `complete`,
    those rows are set to it."""
    lines = [line for line in csv_text.strip().splitlines() if line]
    if not lines or not lines[0].startswith("Percentage served"):
        raise AbOutputError("ab -e CSV has no 'Percentage served' header")
    table = {}
    for line in lines[1:]:
        percent, ms = line.split(",")
        table[int(percent)] = float(ms)
    if 50 not in table or 99 not in table or 100 not in table:
        raise AbOutputError("ab -e CSV lacks the 50th, 99th or 100th percentile")
    if complete:
        for percent in range(1, 100):
            if int(0.5 + complete * percent / 100) >= complete:
                table[percent] = table[100]
    return table


GNUPLOT_HEADER = "starttime\tseconds\tctime\tdtime\tttime\twait"


def parse_requests(gnuplot_text: str) -> list[tuple[int, int]]:
    """ab -g output as [(start, total ms)], one per request: its start in
    whole seconds of the epoch ('seconds') and its total time in whole
    milliseconds ('ttime'), in ab's order (none in particular)."""
    lines = gnuplot_text.splitlines()
    if not lines or lines[0].rstrip() != GNUPLOT_HEADER:
        raise AbOutputError("ab -g output lacks its header: " + GNUPLOT_HEADER.replace("\t", " "))
    requests = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        fields = line.split("\t")
        try:
            start, total_ms = int(fields[1]), int(fields[4])
        except (IndexError, ValueError):
            raise AbOutputError(f"ab -g line {number} is not 'date, seconds, ctime, dtime, ttime, wait'") from None
        if total_ms < 0:
            raise AbOutputError(f"ab -g line {number}: a negative total time")
        requests.append((start, total_ms))
    return requests


def parse_completions(gnuplot_text: str) -> list[tuple[float, float, int]]:
    """ab -g output as when its requests completed: [(earliest, latest,
    requests)], seconds of the epoch. With its start in whole seconds, each
    completion is known only to lie in [start + ttime, start + ttime + 1 s);
    rows alike are counted together."""
    alike: dict[tuple[int, int], int] = {}
    for request in parse_requests(gnuplot_text):
        alike[request] = alike.get(request, 0) + 1
    return [(start + ms / 1000, start + 1 + ms / 1000, n) for (start, ms), n in sorted(alike.items())]
