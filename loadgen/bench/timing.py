"""Runs ab for one case and keeps its raw outputs beside the results."""
import subprocess
from pathlib import Path

from .ab_output import AbOutputError, parse_percentiles, parse_summary


class TimingError(Exception):
    pass


def run_ab(url: str, requests: int, concurrency: int, out_dir: Path | None = None,
           name: str | None = None) -> tuple:
    """Returns (AbSummary, percentiles); with out_dir, writes <name>.txt/.csv.
    -r: a socket error is counted, not fatal, so one bad reply cannot hide
    the rest of the run."""
    csv_path = (out_dir / f"{name}.csv") if out_dir else Path("/dev/null")
    cmd = ["ab", "-r", "-n", str(requests), "-c", str(concurrency), "-e", str(csv_path), url]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if out_dir:
        (out_dir / f"{name}.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise TimingError(f"ab exited with {proc.returncode}: {proc.stderr.strip()[-300:]}")
    try:
        summary = parse_summary(proc.stdout)
        percentiles = parse_percentiles(csv_path.read_text()) if out_dir else {}
    except AbOutputError as e:
        raise TimingError(str(e)) from e
    return summary, percentiles
