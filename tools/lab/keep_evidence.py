#!/usr/bin/env python3
"""Keeps the runs a doc cites: results/evidence/<run>/ gets an A/B run's
ab.json and ab.md, another run's results.json and report.md, each JSON
gzipped, without the raw tool output, the per-request completions, the
conformance cases and the cAdvisor samples (about 30 KB a run), so a table in docs/ can
be checked against what it quotes long after the machine that made it is
gone; a make ab-calibrate calibration (calibration-<path>-<id>) gets its
calibration.json and calibration.md as they are. tests/test_evidence.py
checks that every run id docs/*.md and README.md name is kept here.

usage: tools/lab/keep_evidence.py RUN_ID [RUN_ID ...]   (from RESULTS_DIR, ./results;
       a calibration's RUN_ID is its folder's name, calibration-<path>-<id>)"""
import gzip
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EVIDENCE = ROOT / "results" / "evidence"
# what a reader of a doc's table never needs and a run has plenty of ("workers": a timed row's per-load-generator
# list; a number of that name is kept: make overload's window's clients, which its report names)
DROPPED = ("raw_output", "completions", "latency_histogram", "workers", "conformance")
COPIED = ("ab.md", "report.md", "calibration.json", "calibration.md")
SLIMMED = ("ab.json", "results.json")
# What a kept folder holds: an A/B run's, another run's, a calibration's (tests/test_evidence.py checks it)
KEPT = ({"ab.json.gz", "ab.md"}, {"results.json.gz", "report.md"}, {"calibration.json", "calibration.md"})


def slimmed(node):
    """Pure: a results.json tree without the bulky keys, everything else as it was."""
    if isinstance(node, dict):
        return {k: slimmed(v) for k, v in node.items() if k not in DROPPED or isinstance(v, int)}
    if isinstance(node, list):
        return [slimmed(v) for v in node]
    return node


def keep(run: Path, into: Path) -> Path:
    """One run's evidence: an A/B run's ab.json and ab.md (its results.json
    and report.md say the same again), else results.json and report.md; a
    calibration's calibration.json and calibration.md."""
    if not run.is_dir():
        raise FileNotFoundError(f"{run}: no such run folder")
    if not any((run / name).is_file() for name in (*SLIMMED, "calibration.json")):
        raise ValueError(f"{run}: no ab.json, results.json or calibration.json: nothing a doc could quote")
    out = into / run.name
    out.mkdir(parents=True, exist_ok=True)
    ab = (run / "ab.json").is_file()
    for name in COPIED:
        if (run / name).is_file() and not (ab and name == "report.md"):
            shutil.copyfile(run / name, out / name)
    for name in SLIMMED:
        if (run / name).is_file() and not (ab and name == "results.json"):
            data = json.loads((run / name).read_text())
            data.pop("cpu_samples", None)
            # gzip: a duet's windows carry every container's CPU, 150-300 KB a run as text
            with gzip.open(out / f"{name}.gz", "wt") as kept:
                kept.write(json.dumps(slimmed(data), separators=(",", ":")) + "\n")
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    results = Path(os.environ.get("RESULTS_DIR") or ROOT / "results")
    for run_id in argv:
        try:
            out = keep(results / run_id, EVIDENCE)
        except (OSError, ValueError) as e:
            print(f"keep_evidence: {run_id}: {e}", file=sys.stderr)
            return 1
        size = sum(p.stat().st_size for p in out.iterdir())
        print(f"{out.relative_to(ROOT)}: {size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
