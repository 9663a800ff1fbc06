"""Runs one load generator (ab, ab -k, wrk or vegeta) for a number of
seconds, keeps its raw output beside the results, and returns a Measurement:
the figures bench compares, whichever tool made them, with the wall-clock
edges of the run and the tool's own CPU time (its rusage)."""
import math
import os
import resource
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .ab_output import (GNUPLOT_HEADER, AbOutputError, parse_completions, parse_percentiles, parse_requests,
                        parse_summary, short_answers)
from ..measure import latency
from ..measure.usage import completion_bins
from .vegeta_output import (Answer, VegetaOutputError, completion_times, parse as parse_vegeta, parse_result,
                            parse_results)
from .wrk_output import WrkOutputError, parse as parse_wrk

AB, AB_KEEPALIVE, WRK, VEGETA = "ab", "ab -k", "wrk", "vegeta"
TIMEOUT_S = 30  # per request: ab's default socket timeout; wrk's (2 s) would count slow GridFS answers as errors
# ab keeps a record per request in memory (about 50 bytes): -n caps that at
# this rate for the run's seconds; no path here is near it.
AB_MAX_RPS = 100_000
# Past its own duration, a tool gets this long to finish before it is killed:
# one request timeout plus start-up and writing its report.
GRACE_S = TIMEOUT_S + 15


T = TypeVar("T")  # what run_vegeta_closed's reader makes of one window's answers


class TimingError(Exception):
    pass


class ToolTimeout(TimingError):
    """The tool outlived its duration plus every request's timeout: killed."""


@dataclass(frozen=True)
class Measurement:
    """One run of one tool against one URL at one concurrency (or rate)."""
    tool: str
    requests: int        # completed
    # Requests that got no answer, or a 2xx answer shorter than the file:
    # ab: connect, receive and exceptions, plus short_answers; wrk: socket
    # errors; vegeta: answers with no status (a transport error)
    failed: int
    seconds: float       # the tool's own timer
    rps: float           # 2xx answers per second: a refused answer is no work served
    time_per_request_ms: float  # mean across all concurrent requests: 1000 / rps
    transfer_kbps: float
    # ab's and vegeta's: each request's own time; wrk's: as it printed them,
    # corrected for coordinated omission (results.CORRECTED_LATENCY_TOOLS)
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    threads: int         # the tool's threads: ab 1
    loadgen_cpu_seconds: float  # the tool's own user + system CPU (rusage of the child)
    raw_output: str | None = None
    # Wall clock around the tool's process (ns since the epoch): the window
    # cAdvisor's counters are read in, and the denominator of loadgen_cores,
    # so a tool's cores can never exceed its threads.
    started_ns: int = 0
    ended_ns: int = 0
    rate: float | None = None  # vegeta: the fixed rate asked for (requests/s)
    # vegeta: the rate it sent at (its report's `rate`: requests over first
    # to last sent, so a slow last answer does not lower it) and
    # bench.measure.latency.summary of its per-request latencies
    sent_rate: float | None = None
    latency: dict | None = None
    # usage.completion_bins of the tool's own per-request times (ab -g,
    # vegeta's results; wrk gives none): CPU per request divides a window's
    # CPU by the requests completed inside that window
    completions: list[tuple[float, float]] | None = None
    # BENCH_LOADGENS > 1: each ab worker's concurrency, requests, rate and
    # own CPU (its rusage), the figures above being their merge
    workers: list[dict] | None = None
    # Complete answers whose status was not 2xx (wrk: nor 3xx). Every lab
    # path answers 503 when a request's deadline passes before its answer
    # starts, so past a path's capacity these are load shed. ab and wrk do
    # not say which status; vegeta does (status_codes).
    refused: int = 0
    status_codes: dict[str, int] | None = None

    @property
    def whole(self) -> int:
        return whole_answers(self.requests, self.failed, self.refused)

    @property
    def whole_rps(self) -> float:
        return whole_rate(self.rps, self.requests, self.failed, self.refused)

    @property
    def wall_seconds(self) -> float:
        return (self.ended_ns - self.started_ns) / 1e9

    @property
    def loadgen_cores(self) -> float:
        wall = self.wall_seconds or self.seconds
        return self.loadgen_cpu_seconds / wall if wall > 0 else 0.0


def children_cpu_seconds() -> float:
    """CPU of this process's finished children, bracketed around one tool's run."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


@dataclass(frozen=True)
class Process:
    stdout: str
    cpu_seconds: float
    started_ns: int
    ended_ns: int


def _run(cmd: list[str], timeout: float, out_dir: Path | None, name: str | None, stdin: bytes | None = None) -> Process:
    cpu, started = children_cpu_seconds(), time.time_ns()
    try:
        proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise ToolTimeout(f"{cmd[0]} did not finish within {timeout:.0f} s (killed)") from e
    except OSError as e:
        raise TimingError(f"{cmd[0]} could not run: {e}") from e
    ended, cpu = time.time_ns(), children_cpu_seconds() - cpu
    stdout, stderr = proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace")
    if out_dir and name:
        (out_dir / f"{name}.txt").write_text(stdout + stderr)
    if proc.returncode != 0:
        raise TimingError(f"{cmd[0]} exited with {proc.returncode}: {stderr.strip()[-300:]}")
    return Process(stdout, cpu, started, ended)


def _run_together(cmds: list[list[str]], timeout: float, out_dir: Path | None,
                  names: list[str | None]) -> list[Process]:
    """Several tools started at once and waited for together (killed
    together past the timeout), each with its own rusage (wait4), so each
    one's CPU is known, not only their sum."""
    started = time.time_ns()
    with tempfile.TemporaryDirectory(prefix="tools-") as scratch:
        outs = [open(Path(scratch) / f"{i}.out", "w+b") for i in range(len(cmds))]
        try:
            procs = [subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT) for cmd, out in zip(cmds, outs)]
        except OSError as e:
            raise TimingError(f"{cmds[0][0]} could not run: {e}") from e
        done: dict[int, tuple[int, float, int]] = {}  # index -> (exit code, CPU seconds, ended_ns)
        deadline = time.monotonic() + timeout
        while len(done) < len(procs):
            for i, proc in enumerate(procs):
                if i in done:
                    continue
                pid, status, used = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
                    done[i] = (proc.returncode, used.ru_utime + used.ru_stime, time.time_ns())
            if len(done) < len(procs):
                if time.monotonic() > deadline:
                    for proc in procs:
                        if proc.returncode is None:
                            proc.kill()
                            proc.wait()
                    raise ToolTimeout(f"{cmds[0][0]} did not finish within {timeout:.0f} s (killed, with "
                                      f"{len(cmds) - 1} others started with it)")
                time.sleep(0.02)
        found = []
        for i, out in enumerate(outs):
            out.seek(0)
            text = out.read().decode(errors="replace")
            out.close()
            if out_dir and names[i]:
                (out_dir / f"{names[i]}.txt").write_text(text)
            code, cpu, ended = done[i]
            if code != 0:
                raise TimingError(f"{cmds[i][0]} (worker {i + 1} of {len(cmds)}) exited with {code}: "
                                  f"{text.strip()[-300:]}")
            found.append(Process(text, cpu, started, ended))
    return found


def worker_concurrencies(concurrency: int, workers: int) -> list[int]:
    """The case's concurrency split over the workers, the first ones taking
    the remainder; never a worker without a connection."""
    n = max(1, min(workers, concurrency))
    return [concurrency // n + (1 if i < concurrency % n else 0) for i in range(n)]


def merged_ab(parts: list[Measurement], gnuplot_texts: list[str], concurrencies: list[int],
              raw_output: str | None = None) -> Measurement:
    """Pure: ab workers that ran the same case at once as one Measurement:
    requests, failures, rates and CPU summed; the latency percentiles from
    every worker's requests together (ab -g: whole milliseconds), never an
    average of the workers' percentiles; each worker kept under `workers`."""
    if not parts or len(parts) != len(gnuplot_texts):
        raise AbOutputError("ab workers' outputs do not pair with their per-request lines")
    times = [ms for text in gnuplot_texts for _, ms in parse_requests(text)]
    summary = latency.summary([float(ms) for ms in times]) if times else {"samples": 0}
    started, ended = min(p.started_ns for p in parts), max(p.ended_ns for p in parts)
    rps = sum(p.rps for p in parts)
    completions = completion_bins([c for text in gnuplot_texts for c in parse_completions(text)], started, ended)
    return Measurement(
        tool=parts[0].tool, requests=sum(p.requests for p in parts), failed=sum(p.failed for p in parts),
        refused=sum(p.refused for p in parts),
        seconds=max(p.seconds for p in parts), rps=round(rps, 3),
        time_per_request_ms=1000 / rps if rps else 0.0, transfer_kbps=sum(p.transfer_kbps for p in parts),
        p50_ms=summary.get("p50_ms", 0.0), p90_ms=summary.get("p90_ms", 0.0), p99_ms=summary.get("p99_ms", 0.0),
        # ab -e's row 100 is fractional; -g's whole ms stand in where a worker kept no -e
        max_ms=max([p.max_ms for p in parts] + [summary.get("max_ms", 0.0)]), threads=len(parts),
        loadgen_cpu_seconds=round(sum(p.loadgen_cpu_seconds for p in parts), 6), raw_output=raw_output,
        started_ns=started, ended_ns=ended, completions=completions,
        workers=[{"concurrency": c, "requests": p.requests, "rps": p.rps, "cpu_seconds": p.loadgen_cpu_seconds,
                  "cores": round(p.loadgen_cores, 4), "raw_output": p.raw_output}
                 for p, c in zip(parts, concurrencies)])


def ab_measurement(stdout: str, csv_text: str | None, keepalive: bool = False, cpu_seconds: float = 0.0,
                   raw_output: str | None = None, started_ns: int = 0, ended_ns: int = 0,
                   expected_size: int = 0, gnuplot_text: str | None = None) -> Measurement:
    """Pure: ab's report, its -e CSV (None: no percentiles kept) and its -g
    per-request lines (None: none kept) as a Measurement. expected_size: the
    file's bytes; answers shorter than the whole file are failed requests,
    whatever ab counted."""
    s = parse_summary(stdout)
    pct = parse_percentiles(csv_text, s.complete) if csv_text is not None else {50: 0.0, 90: 0.0, 99: 0.0, 100: 0.0}
    rps = served_rate(s.rps, s.complete, s.non_2xx)
    return Measurement(
        tool=AB_KEEPALIVE if keepalive else AB, requests=s.complete,
        failed=s.socket_failures + short_answers(s, expected_size), refused=s.non_2xx,
        seconds=s.seconds, rps=rps, time_per_request_ms=1000 / rps if rps else 0.0, transfer_kbps=s.transfer_kbps,
        p50_ms=pct[50], p90_ms=pct[90], p99_ms=pct[99], max_ms=pct[100], threads=1,
        loadgen_cpu_seconds=round(cpu_seconds, 6), raw_output=raw_output, started_ns=started_ns, ended_ns=ended_ns,
        completions=completion_bins(parse_completions(gnuplot_text), started_ns, ended_ns) if gnuplot_text else None)


def wrk_measurement(stdout: str, threads: int, cpu_seconds: float = 0.0, raw_output: str | None = None,
                    started_ns: int = 0, ended_ns: int = 0) -> Measurement:
    """Pure: wrk's --latency report as a Measurement."""
    s = parse_wrk(stdout)
    rps = served_rate(s.rps, s.requests, s.non_2xx_3xx)
    return Measurement(
        tool=WRK, requests=s.requests, failed=s.socket_errors, refused=s.non_2xx_3xx, seconds=s.seconds, rps=rps,
        time_per_request_ms=1000 / rps if rps else 0.0, transfer_kbps=s.transfer_bytes_per_s / 1024,
        p50_ms=s.p50_ms, p90_ms=s.p90_ms, p99_ms=s.p99_ms, max_ms=s.latency_max_ms, threads=threads,
        loadgen_cpu_seconds=round(cpu_seconds, 6), raw_output=raw_output, started_ns=started_ns, ended_ns=ended_ns)


def vegeta_measurement(report_json: str, rate: float, cpu_seconds: float = 0.0, raw_output: str | None = None,
                       started_ns: int = 0, ended_ns: int = 0, encoded: str | None = None) -> Measurement:
    """Pure: `vegeta report -type=json` as a Measurement; rps is the rate
    vegeta achieved (successful answers per second). With `vegeta encode
    -to=json`'s lines, the percentiles are exact order statistics of every
    request's latency (the report's come from a t-digest) and `latency`
    holds their summary."""
    s = parse_vegeta(report_json)
    pct = {"p50_ms": s.p50_ms, "p90_ms": s.p90_ms, "p99_ms": s.p99_ms, "max_ms": s.max_ms}
    summary = completions = None
    if encoded is not None:
        answers = parse_results(encoded)
        summary = latency.summary([a.latency * 1000 for a in answers])
        if summary["samples"]:
            pct = {k: summary[k] for k in pct}
        completions = completion_bins(completion_times(answers), started_ns, ended_ns)
    no_status = s.status_codes.get("0", 0)
    return Measurement(
        tool=VEGETA, requests=s.requests, failed=no_status, refused=s.requests - s.successes - no_status,
        status_codes=s.status_codes, seconds=s.seconds, rps=s.throughput,
        time_per_request_ms=1000 / s.throughput if s.throughput else 0.0,
        transfer_kbps=s.bytes_in / 1024 / s.seconds if s.seconds else 0.0, **pct, threads=os.cpu_count() or 1,
        loadgen_cpu_seconds=round(cpu_seconds, 6), raw_output=raw_output, started_ns=started_ns, ended_ns=ended_ns,
        rate=rate, sent_rate=s.rate, latency=summary, completions=completions)


def served_rate(rps: float, answers: int, refused: int) -> float:
    """A tool's rate over every answer, as the rate of those that were not
    refused: a fast 503 must not read as work served."""
    return round(rps * (answers - refused) / answers, 3) if answers else 0.0


def whole_answers(answers: int, failed: int, refused: int) -> int:
    """Answers served whole: neither refused (a 503 at the deadline) nor
    failed (no answer, or a 2xx cut short). The one count a request's cost
    and a path's rate are taken over."""
    return max(answers - failed - refused, 0)


def whole_rate(rps: float, answers: int, failed: int, refused: int) -> float:
    """served_rate's figure (answers not refused per second) as whole
    answers per second."""
    served = answers - refused
    return rps * whole_answers(answers, failed, refused) / served if served > 0 else 0.0


def _seconds(seconds: float) -> str:
    """ab's -t takes whole seconds (a fraction would read as 0: no limit)."""
    return str(max(1, round(seconds)))


def ab_command(url: str, seconds: float, concurrency: int, keepalive: bool, csv_path: Path,
               per_request: Path) -> list[str]:
    return ["ab", "-r", "-s", str(TIMEOUT_S), *(["-k"] if keepalive else []), "-t", _seconds(seconds),
            "-n", str(max(concurrency, int(AB_MAX_RPS * seconds))), "-c", str(concurrency),
            "-e", str(csv_path), "-g", str(per_request), url]


def run_ab(url: str, seconds: float, concurrency: int, out_dir: Path | None = None,
           name: str | None = None, keepalive: bool = False, expected_size: int = 0,
           need_answers: bool = True, workers: int = 1) -> Measurement:
    """ab for `seconds` (-t; -n after it lifts ab's 50,000-request cap). With
    out_dir, writes <name>.txt and .csv. -r: a socket error is counted, not
    fatal, so one bad reply cannot hide the rest of the run. need_answers:
    a run in which no request completed is an error (a warm-up's is not:
    slow answers can all still be arriving when -t ends). workers > 1
    (BENCH_LOADGENS): that many ab processes share the concurrency, started
    and stopped together, merged (merged_ab)."""
    if workers > 1 and concurrency > 1:
        m = run_ab_workers(url, seconds, concurrency, out_dir, name, keepalive, expected_size, workers)
        if need_answers and m.requests == 0:
            raise TimingError(f"no request completed within {m.seconds:.1f} s (at -c {concurrency})")
        return m
    csv_path = (out_dir / f"{name}.csv") if out_dir else Path("/dev/null")
    # -g: a line per request (ab holds them all anyway and writes them after
    # its timer stops), read for the requests inside the CPU window, then
    # dropped: 50 bytes a request is too much to keep beside every run
    with tempfile.TemporaryDirectory(prefix="ab-") as scratch:
        per_request = Path(scratch) / "requests.tsv"
        cmd = ab_command(url, seconds, concurrency, keepalive, csv_path, per_request)
        p = _run(cmd, seconds + GRACE_S, out_dir, name)
        try:
            # ab writes no -e or -g file when it completed no request
            csv_text = (csv_path.read_text() if csv_path.exists() else None) if out_dir else None
            gnuplot_text = per_request.read_text() if per_request.exists() else None
            m = ab_measurement(p.stdout, csv_text, keepalive, p.cpu_seconds, f"{name}.txt" if out_dir else None,
                               p.started_ns, p.ended_ns, expected_size, gnuplot_text)
        except (AbOutputError, OSError) as e:
            raise TimingError(f"ab's output unreadable: {e}") from e
    if need_answers and m.requests == 0:
        raise TimingError(f"no request completed within {m.seconds:.1f} s (at -c {concurrency})")
    return m


def run_ab_workers(url: str, seconds: float, concurrency: int, out_dir: Path | None, name: str | None,
                   keepalive: bool, expected_size: int, workers: int) -> Measurement:
    """`workers` ab processes on one case at once: <name>-w<i>.txt each."""
    shares = worker_concurrencies(concurrency, workers)
    names = [f"{name}-w{i + 1}" if out_dir and name else None for i in range(len(shares))]
    with tempfile.TemporaryDirectory(prefix="ab-") as scratch:
        csvs = [Path(scratch) / f"{i}.csv" for i in range(len(shares))]
        tsvs = [Path(scratch) / f"{i}.tsv" for i in range(len(shares))]
        procs = _run_together([ab_command(url, seconds, c, keepalive, csv, tsv)
                               for c, csv, tsv in zip(shares, csvs, tsvs)], seconds + GRACE_S, out_dir, names)
        try:
            parts = [ab_measurement(p.stdout, csv.read_text() if csv.exists() else None, keepalive, p.cpu_seconds,
                                    f"{n}.txt" if n else None, p.started_ns, p.ended_ns, expected_size)
                     for p, csv, n in zip(procs, csvs, names)]
            texts = [tsv.read_text() if tsv.exists() else GNUPLOT_HEADER + "\n" for tsv in tsvs]
            return merged_ab(parts, texts, shares, f"{name}-w1.txt" if out_dir and name else None)
        except (AbOutputError, OSError) as e:
            raise TimingError(f"ab's output unreadable: {e}") from e


def wrk_threads(concurrency: int) -> int:
    """One thread per core bench may run on; wrk needs a connection per thread."""
    return max(1, min(concurrency, len(os.sched_getaffinity(0))))


def run_wrk(url: str, concurrency: int, seconds: float, out_dir: Path | None = None,
            name: str | None = None, script: Path | None = None, script_args: tuple[str, ...] = ()) -> Measurement:
    """wrk for `seconds`; with a Lua script (e.g. working_set.lua, which
    asks for a random file of a list each time) and its arguments."""
    threads = wrk_threads(concurrency)
    cmd = ["wrk", "--latency", "-t", str(threads), "-c", str(concurrency), "-d", f"{max(1, round(seconds))}s",
           "--timeout", f"{TIMEOUT_S}s", *(["-s", str(script)] if script else []), url,
           *(["--", *script_args] if script_args else [])]
    p = _run(cmd, seconds + GRACE_S, out_dir, name)
    try:
        return wrk_measurement(p.stdout, threads, p.cpu_seconds, f"{name}.txt" if out_dir else None,
                               p.started_ns, p.ended_ns)
    except WrkOutputError as e:
        raise TimingError(str(e)) from e


def run_wrk_together(urls: list[str], concurrency: int, seconds: float, out_dir: Path | None = None,
                     names: list[str | None] | None = None) -> list[Measurement]:
    """One wrk per URL, started at the same moment and waited for together,
    each at `concurrency` with its own rusage: the A/B's duet, where what
    the machine does in a window befalls every side alike."""
    threads = wrk_threads(concurrency)
    cmds = [["wrk", "--latency", "-t", str(threads), "-c", str(concurrency), "-d", f"{max(1, round(seconds))}s",
             "--timeout", f"{TIMEOUT_S}s", url] for url in urls]
    names = names or [None] * len(urls)
    found = _run_together(cmds, seconds + GRACE_S, out_dir, names)
    try:
        return [wrk_measurement(p.stdout, threads, p.cpu_seconds, f"{name}.txt" if out_dir and name else None,
                                p.started_ns, p.ended_ns) for p, name in zip(found, names)]
    except WrkOutputError as e:
        raise TimingError(str(e)) from e


def vegeta_rate(rate: float) -> str:
    """vegeta takes a whole number per time unit: 250/1s, or 1/4s below one a second."""
    return f"{round(rate)}/1s" if rate >= 1 else f"1/{round(1 / max(rate, 0.01))}s"


# The most connections vegeta opens: what every path here is sized for (the
# sweep's 250 clients; httpd's 256 threads). Without a cap, a vegeta that
# fell behind on its own CPU opened thousands (rate x timeout: 219,000 at
# 7,311/s), httpd-static ran out of threads and a fifth of the run timed out.
VEGETA_MAX_WORKERS = 256


def vegeta_max_workers(rate: float) -> int:
    """Workers for every request of TIMEOUT_S seconds at `rate` in flight at
    once, up to VEGETA_MAX_WORKERS: vegeta starts few and adds them as
    answers lag; past the cap a request waits for a free worker, unrecorded
    (coordinated omission), and vegeta's own rate falls below the one asked,
    which flags the point behind-schedule rather than hiding it."""
    return min(VEGETA_MAX_WORKERS, max(10, math.ceil(rate * TIMEOUT_S)))


def vegeta_pace(rate: float, workers: int) -> list[str]:
    """vegeta's pace: `rate` requests a second on up to `workers`
    connections (open loop), or with rate 0, `workers` clients each asking
    again as soon as answered (its closed loop: -rate=0 keeps every worker
    asking)."""
    if rate == 0:
        return ["-rate=0", f"-workers={workers}", f"-max-workers={workers}"]
    return [f"-rate={vegeta_rate(rate)}", f"-max-workers={workers}"]


def vegeta_attack(binary: str, rate: float, seconds: float, results: Path, workers: int | None = None) -> list[str]:
    """vegeta's attack at a fixed rate (or rate 0: `workers` clients in a
    closed loop), its results (binary) to `results`; the targets on its
    stdin or in a -targets file."""
    return [binary, "attack", *vegeta_pace(rate, workers or vegeta_max_workers(rate)), f"-duration={seconds:.3f}s",
            f"-timeout={TIMEOUT_S}s", "-max-body=0", f"-output={results}"]


def vegeta_read(binary: str, results: Path, rate: float, attack: Process, out_dir: Path | None,
                name: str | None) -> Measurement:
    """One attack's results as a Measurement (its report as <name>.json)."""
    report = _run([binary, "report", "-type=json", str(results)], 60, None, None)
    encoded = _run([binary, "encode", "-to=json", str(results)], 60, None, None)
    if out_dir and name:
        (out_dir / f"{name}.json").write_text(report.stdout)
    try:
        return vegeta_measurement(report.stdout, rate, attack.cpu_seconds, f"{name}.json" if out_dir else None,
                                  attack.started_ns, attack.ended_ns, encoded.stdout)
    except VegetaOutputError as e:
        raise TimingError(str(e)) from e


def run_vegeta(url: str, rate: float, seconds: float, out_dir: Path | None = None,
               name: str | None = None) -> Measurement:
    """vegeta at a fixed rate: requests leave on schedule whether or not
    earlier ones were answered (open loop), so a slow answer delays no later
    request and latency is response time, not queueing in the tool
    (no coordinated omission). Keep-alive connections, as many as it needs.
    -max-body=0: bodies are read and dropped, not kept (10,000 answers of
    1 MB would be 10 GB of results), so the report's bytes_in is 0."""
    binary = os.environ.get("VEGETA", "vegeta")
    with tempfile.TemporaryDirectory(prefix="vegeta-") as tmp:
        results = Path(tmp) / "results.bin"  # the attack's results are binary; the report makes JSON of them
        p = _run(vegeta_attack(binary, rate, seconds, results), seconds + GRACE_S, None, None,
                 stdin=f"GET {url}\n".encode())
        return vegeta_read(binary, results, rate, p, out_dir, name)


def run_vegeta_together(urls: list[str], rate: float, seconds: float, out_dir: Path | None = None,
                        names: list[str | None] | None = None) -> list[Measurement]:
    """run_vegeta against every URL at once: one attack each, started at
    the same moment at the same rate and waited for together, each with its
    own rusage (the same-moment CPU window, bench.benchmark.same_moment)."""
    binary = os.environ.get("VEGETA", "vegeta")
    names = names or [None] * len(urls)
    with tempfile.TemporaryDirectory(prefix="vegeta-") as tmp:
        results, attacks = _vegeta_attacks(binary, urls, rate, seconds, Path(tmp))
        return [vegeta_read(binary, out, rate, p, out_dir, name) for out, p, name in zip(results, attacks, names)]


def run_vegeta_closed(urls: list[str], clients: int, seconds: float,
                      read: Callable[[Iterator[Answer]], T]) -> list[T]:
    """vegeta's closed loop against every URL at once, `clients` each, each
    client asking again as soon as answered (as make overload's capacity
    step), for `seconds`; read(answers) of each URL's answers, streamed out
    of `vegeta encode` one at a time (a fast path's window holds hundreds
    of thousands): what the A/B's sizing reads what a path admitted from
    (bench.benchmark.change.whole_in_flight)."""
    binary = os.environ.get("VEGETA", "vegeta")
    with tempfile.TemporaryDirectory(prefix="vegeta-") as tmp:
        results, _ = _vegeta_attacks(binary, urls, 0, seconds, Path(tmp), clients)
        return [_read_answers(binary, out, read) for out in results]


def _vegeta_attacks(binary: str, urls: list[str], rate: float, seconds: float, tmp: Path,
                    workers: int | None = None) -> tuple[list[Path], list[Process]]:
    """One attack per URL (its target in a -targets file), started at once
    and waited for together: where each one's results are, and its run."""
    results = [tmp / f"{i}.bin" for i in range(len(urls))]
    targets = [tmp / f"{i}.targets" for i in range(len(urls))]
    for url, path in zip(urls, targets):
        path.write_text(f"GET {url}\n")
    attacks = _run_together([[*vegeta_attack(binary, rate, seconds, out, workers), f"-targets={path}"]
                             for out, path in zip(results, targets)], seconds + GRACE_S, None, [None] * len(urls))
    return results, attacks


ENCODE_DEADLINE_S = 60  # as vegeta_read's `vegeta encode`: a window's results, read from a local file


def _read_answers(binary: str, results: Path, read: Callable[[Iterator[Answer]], T]) -> T:
    """read() over one attack's answers as `vegeta encode` streams them,
    within ENCODE_DEADLINE_S (past it, encode is killed and this fails)."""
    try:
        encode = subprocess.Popen([binary, "encode", "-to=json", str(results)], stdout=subprocess.PIPE, text=True)
    except OSError as e:
        raise TimingError(f"{binary} could not run: {e}") from e
    deadline = threading.Timer(ENCODE_DEADLINE_S, encode.kill)
    deadline.start()
    try:
        found = read(parse_result(line) for line in encode.stdout if line.strip())
    except VegetaOutputError as e:
        encode.kill()
        raise TimingError(str(e)) from e
    finally:
        encode.stdout.close()
        encode.wait()
        deadline.cancel()
    if encode.returncode:
        late = f" (killed: no end within {ENCODE_DEADLINE_S} s)" if encode.returncode == -9 else ""
        raise TimingError(f"{binary} encode exited with {encode.returncode}{late}")
    return found
