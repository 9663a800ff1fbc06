"""Runs one load generator (ab, ab -k or wrk) once, keeps its raw output
beside the results, and returns a Measurement: the figures bench compares,
whichever tool made them, with the tool's own CPU time (its rusage)."""
import os
import resource
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .ab_output import AbOutputError, parse_percentiles, parse_summary
from .wrk_output import WrkOutputError, parse as parse_wrk

AB, AB_KEEPALIVE, WRK = "ab", "ab -k", "wrk"
TIMEOUT_S = 30  # ab's default socket timeout; wrk's (2 s) would count slow GridFS answers as errors


class TimingError(Exception):
    pass


@dataclass(frozen=True)
class Measurement:
    """One run of one tool against one URL at one concurrency."""
    tool: str
    requests: int        # completed
    failed: int          # ab: failed + non-2xx; wrk: socket errors + non-2xx/3xx
    seconds: float
    rps: float
    time_per_request_ms: float  # mean across all concurrent requests: 1000 / rps for wrk
    transfer_kbps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    threads: int         # the tool's threads: ab 1
    loadgen_cpu_seconds: float  # the tool's own user + system CPU (rusage of the child)
    raw_output: str | None = None

    @property
    def loadgen_cores(self) -> float:
        return self.loadgen_cpu_seconds / self.seconds if self.seconds > 0 else 0.0


def children_cpu_seconds() -> float:
    """CPU of this process's finished children, bracketed around one tool's run."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _run(cmd: list[str], out_dir: Path | None, name: str | None) -> tuple[subprocess.CompletedProcess, float]:
    cpu = children_cpu_seconds()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    cpu = children_cpu_seconds() - cpu
    if out_dir and name:
        (out_dir / f"{name}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise TimingError(f"{cmd[0]} exited with {proc.returncode}: {proc.stderr.strip()[-300:]}")
    return proc, cpu


def ab_measurement(stdout: str, csv_text: str | None, requests: int, keepalive: bool = False,
                   cpu_seconds: float = 0.0, raw_output: str | None = None) -> Measurement:
    """Pure: ab's report and its -e CSV (None: no percentiles kept) as a Measurement."""
    s = parse_summary(stdout)
    pct = parse_percentiles(csv_text, s.complete) if csv_text is not None else {50: 0.0, 90: 0.0, 99: 0.0, 100: 0.0}
    return Measurement(
        tool=AB_KEEPALIVE if keepalive else AB, requests=s.complete,
        failed=s.failed + s.non_2xx + (requests - s.complete), seconds=s.seconds, rps=s.rps,
        time_per_request_ms=s.time_per_request_ms, transfer_kbps=s.transfer_kbps,
        p50_ms=pct[50], p90_ms=pct[90], p99_ms=pct[99], max_ms=pct[100], threads=1,
        loadgen_cpu_seconds=round(cpu_seconds, 6), raw_output=raw_output)


def wrk_measurement(stdout: str, threads: int, cpu_seconds: float = 0.0,
                    raw_output: str | None = None) -> Measurement:
    """Pure: wrk's --latency report as a Measurement."""
    s = parse_wrk(stdout)
    return Measurement(
        tool=WRK, requests=s.requests, failed=s.socket_errors + s.non_2xx_3xx, seconds=s.seconds, rps=s.rps,
        time_per_request_ms=1000 / s.rps if s.rps else 0.0, transfer_kbps=s.transfer_bytes_per_s / 1024,
        p50_ms=s.p50_ms, p90_ms=s.p90_ms, p99_ms=s.p99_ms, max_ms=s.latency_max_ms, threads=threads,
        loadgen_cpu_seconds=round(cpu_seconds, 6), raw_output=raw_output)


def run_ab(url: str, requests: int, concurrency: int, out_dir: Path | None = None,
           name: str | None = None, keepalive: bool = False) -> Measurement:
    """With out_dir, writes <name>.txt and .csv. -r: a socket error is
    counted, not fatal, so one bad reply cannot hide the rest of the run."""
    csv_path = (out_dir / f"{name}.csv") if out_dir else Path("/dev/null")
    cmd = ["ab", "-r", "-s", str(TIMEOUT_S), *(["-k"] if keepalive else []),
           "-n", str(requests), "-c", str(concurrency), "-e", str(csv_path), url]
    proc, cpu = _run(cmd, out_dir, name)
    try:
        return ab_measurement(proc.stdout, csv_path.read_text() if out_dir else None, requests, keepalive,
                              cpu, f"{name}.txt" if out_dir else None)
    except AbOutputError as e:
        raise TimingError(str(e)) from e


def wrk_threads(concurrency: int) -> int:
    """One thread per core bench may run on; wrk needs a connection per thread."""
    return max(1, min(concurrency, len(os.sched_getaffinity(0))))


def run_wrk(url: str, concurrency: int, seconds: int, out_dir: Path | None = None,
            name: str | None = None) -> Measurement:
    threads = wrk_threads(concurrency)
    cmd = ["wrk", "--latency", "-t", str(threads), "-c", str(concurrency), "-d", f"{max(1, seconds)}s",
           "--timeout", f"{TIMEOUT_S}s", url]
    proc, cpu = _run(cmd, out_dir, name)
    try:
        return wrk_measurement(proc.stdout, threads, cpu, f"{name}.txt" if out_dir else None)
    except WrkOutputError as e:
        raise TimingError(str(e)) from e
