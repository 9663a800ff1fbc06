#!/usr/bin/env python3
"""make matrix VAR=NAME VALUES="v1 v2 ...": one lab run per value of one
setting (NAME=value exported over the env file, which Compose lets the shell
override), each by the CI workflow's own step (tools/ci/ci-lab.sh run: a clean
project, down -v after), then one table
across them: a column per value, each case's requests per second as a ratio
to the first value's, "apart" as `bench compare` judges it (separate runs
are never called significant). Writes
results/matrix-<UTC time>/matrix.md and matrix.json.

Environment: MATRIX_ENV_FILE (default local.env: the local images),
MATRIX_PROJECT (compose project, default gridfs-lab-matrix),
MATRIX_RUN_TIMEOUT (seconds per run, default 7200). Any other knob exported
(BENCH_TARGETS, BENCH_DURATION...) reaches every run alike."""
import json
import os
import re
import subprocess
import sys
import threading
from datetime import datetime, timezone
from pathlib import Path

from bench.report.compare import (CompareError, cell, compare_case, differences, load,
                           metric_values, reference_moved, _shown)
from lab_compose import settings_in

ROOT = Path(__file__).resolve().parents[2]

RUN_DIR = re.compile(r"^run-dir: (.+)$", re.M)  # ci-lab.sh run's last line
# Past MATRIX_RUN_TIMEOUT, ci-lab.sh may still kill the lab (60 s) and take it down (300 s).
CI_LAB_SLACK = 400


class MatrixError(Exception):
    pass


def run_streaming(cmd: list[str], env: dict, timeout: float, log: Path) -> tuple[int, str]:
    """cmd's output to the console and to log as it comes; killed after timeout."""
    lines = []
    with open(log, "w") as sink, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True, errors="replace") as proc:
        def pump():
            for line in proc.stdout:
                sys.stdout.write(line)
                sink.write(line)
                lines.append(line)
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            reader.join(timeout=10)
            raise MatrixError(f"{' '.join(cmd[:4])} ... took longer than {timeout:g} s (MATRIX_RUN_TIMEOUT)")
        reader.join(timeout=30)
    return code, "".join(lines)


def one_run(var: str, value: str, env_file: Path, project: str, timeout: float, log: Path) -> dict:
    """One lab run with var=value, by the CI workflow's own step
    (tools/ci/ci-lab.sh run: up, then down -v whatever happened)."""
    env = {**os.environ, var: value, "LAB_ENV_FILE": str(env_file), "LAB_PROJECT": project,
           "LAB_RUN_TIMEOUT": str(int(timeout))}
    print(f"matrix: {var}={value}", flush=True)
    try:
        step = [str(ROOT / "tools" / "ci" / "ci-lab.sh"), "run"]
        code, output = run_streaming(step, env, timeout + CI_LAB_SLACK, log)
        error = None
    except MatrixError as e:
        code, output, error = None, log.read_text(errors="replace"), str(e)
    dirs = RUN_DIR.findall(output)
    if not dirs and error is None:
        error = f"no run started (exit code {code}): see {log}"
    return {"value": value, "run_id": Path(dirs[-1].strip()).name if dirs else None, "exit_code": code, "error": error,
            "log": log.name}


def table(var: str, runs: list[dict], results_dir: Path) -> tuple[str, dict]:
    loaded = []
    for r in runs:
        res = None
        if r["run_id"]:
            try:
                res = load(str(results_dir / r["run_id"]))
            except CompareError as e:
                r["error"] = r["error"] or str(e)
        loaded.append(res)
    first = loaded[0]
    keys = []
    for res in loaded:
        for run in (res.runs if res else []):
            if (run.target, run.file, run.concurrency) not in keys:
                keys.append((run.target, run.file, run.concurrency))
    rows = []
    for key in keys:
        row = {"target": key[0], "file": key[1], "concurrency": key[2], "cells": []}
        base = first.run_for(*key) if first else None
        for i, res in enumerate(loaded):
            run = res.run_for(*key) if res else None
            if run is None:
                row["cells"].append({"status": "missing"})
            elif not run.ok:
                row["cells"].append({"status": "failed", "error": run.error})
            elif i == 0:
                row["cells"].append({"status": "ok", "rps": sorted(metric_values(run, "rps"))})
            elif base is None or not base.ok:
                row["cells"].append({"status": "no baseline"})
            else:
                row["cells"].append({"status": "ok", **compare_case(base, run, metrics=("rps",))["metrics"]})
        rows.append(row)
    data = {"variable": var, "runs": runs, "rows": rows,
            "differences": [differences(first, res) if first and res else None for res in loaded]}
    lines = [f"# Matrix: {var}", ""]
    lines += [f"- {var}={r['value']}: run `{r['run_id'] or '-'}`"
              + (f", exit code {r['exit_code']}" if r["exit_code"] else "") + (f" ({r['error']})" if r["error"] else "")
              for r in runs]
    for r, diffs in zip(runs[1:], data["differences"][1:]):
        if diffs:
            lines.append(f"- differs from the first run ({var}={r['value']}): " + "; ".join(
                f"{d['name']} {_shown(d['a'])} -> {_shown(d['b'])}" for d in diffs))
    for i, r in enumerate(runs[1:], start=1):
        compared = [{"target": row["target"], "file": row["file"], "concurrency": row["concurrency"],
                     "status": "compared", "metrics": row["cells"][i]}
                    for row in rows if row["cells"][i].get("status") == "ok"]
        drift = reference_moved(compared)
        if drift:
            lines.append(f"- {var}={r['value']}: {drift}")
    header = ["target", "file", "c", *(f"{var}={r['value']}" for r in runs)]
    lines += ["", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = []
        for i, c in enumerate(row["cells"]):
            if c["status"] != "ok":
                cells.append(c["status"])
            elif i == 0:
                cells.append(f"{sorted(c['rps'])[(len(c['rps']) - 1) // 2]:.0f} req/s" if c["rps"] else "-")
            else:
                cells.append(cell(c.get("rps")))
        lines.append("| " + " | ".join([row["target"], row["file"].removesuffix(".bin"), str(row["concurrency"]),
                                        *cells]) + " |")
    lines += ["", f"The first column: requests per second (median of the repetitions) with {var}={runs[0]['value']};"
              " the others: the ratio to it, `apart` when beyond the spread within each run as `bench compare`"
              " judges it (Mann-Whitney U on the repetitions; † ranges apart, p = 0.1 with 3 repetitions a side),"
              " `~` when not. Separate runs: not a verdict (`make ab` gives one, A and B in one run)."]
    return "\n".join(lines) + "\n", data


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print('usage: make matrix VAR=NAME VALUES="v1 v2 ..."', file=sys.stderr)
        return 2
    var, values = argv[0], argv[1:]
    known = settings_in(ROOT / ".env")
    if var not in known:
        print(f"matrix: error: VAR={var!r} is not a setting in .env; known: {' '.join(known)}", file=sys.stderr)
        return 2
    env_file = ROOT / os.environ.get("MATRIX_ENV_FILE", "local.env")
    if not env_file.exists():
        print(f"matrix: error: {env_file} does not exist (make local-images writes local.env; "
              "MATRIX_ENV_FILE=.env runs official images)", file=sys.stderr)
        return 2
    try:
        timeout = float(os.environ.get("MATRIX_RUN_TIMEOUT", "7200"))
    except ValueError:
        print(f"matrix: error: MATRIX_RUN_TIMEOUT={os.environ['MATRIX_RUN_TIMEOUT']!r}: expected seconds",
              file=sys.stderr)
        return 2
    results_dir = Path(os.environ.get("RESULTS_DIR") or settings_in(env_file).get("RESULTS_DIR", "./results"))
    results_dir = results_dir if results_dir.is_absolute() else ROOT / results_dir
    out = results_dir / f"matrix-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    out.mkdir(parents=True)
    project = os.environ.get("MATRIX_PROJECT", "gridfs-lab-matrix")
    runs = []
    for i, value in enumerate(values):
        runs.append(one_run(var, value, env_file, project, timeout, out / f"run-{i + 1}.log"))
        (out / "matrix.json").write_text(json.dumps({"variable": var, "runs": runs}, indent=2) + "\n")
    markdown, data = table(var, runs, results_dir)
    (out / "matrix.md").write_text(markdown)
    (out / "matrix.json").write_text(json.dumps(data, indent=2) + "\n")
    print(markdown, end="")
    print(f"matrix: wrote {out}/matrix.md and matrix.json", file=sys.stderr)
    return 0 if all(r["exit_code"] == 0 and not r["error"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
