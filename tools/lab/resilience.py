#!/usr/bin/env python3
"""make resilience: each serving path with a database (compose label
`lab.database`) under a steady fixed-rate load while that database is
restarted, then, in a second run, paused. Run from the host, which drives
Docker; the load comes from a bench container (`python -m bench
resilience-load`), which has no Docker socket. Writes
results/resilience-<UTC time>/results.json (a `resilience` section),
report.md, each case's answers as CSV and what its path logged meanwhile (.log).

Environment (each checked before anything starts):
  RESILIENCE_ENV_FILE  the lab's env file (default local.env: the local images)
  RESILIENCE_PROJECT   compose project (default gridfs-lab-resilience: its own
                       containers and volumes, taken down after, or at once
                       on Ctrl-C, SIGTERM or SIGHUP)
  RESILIENCE_RATE      requests/s to each path (default 100: below every
                       path's capacity on the FerretDB stand-in)
  RESILIENCE_SECONDS   length of each case's load (default 35)
  RESILIENCE_FAULT_AT  seconds into the load when the fault begins (default 10)
  RESILIENCE_PAUSE     seconds the database stays paused (default 10)
  RESILIENCE_FILE      the file requested (default 1KB.bin; one of FILE_SIZES)
  RESILIENCE_FAULTS    which faults (default "restart pause")
  RESILIENCE_TRIALS    trials of each case (default 5), each fault at
                       RESILIENCE_FAULT_AT plus a seeded 0-3 s jitter: a
                       driver's recovery depends on where the fault falls in
                       its heartbeat cycle; median and maximum are reported
  BENCH_TARGETS        the paths considered (default: the env file's)"""
import csv
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from bench.report.resilience import render
from bench.faults.resilience import (RATE_BACK_HOLD, Fault, ResilienceRow, analyse, answering_again,
                                     summarise)
from bench.clients.vegeta_output import VegetaOutputError, parse_results
from lab_compose import (LabError, compose_run, compose_services, keep_log, known_targets, measure_then_finish,
                         now_iso, number, open_lab, results_dir, save)

ROOT = Path(__file__).resolve().parents[2]

FAULTS = ("restart", "pause")
JITTER_S = 3.0             # each trial's fault falls this much later at most (seeded per trial)
CASE_OVERHEAD_S = 15       # a bench container's start, the path's readiness check, the fault's commands
COMPOSE_TIMEOUT_S = 120    # one stop/start/pause/unpause/up
BUILD_TIMEOUT_S = 3600
SEED_TIMEOUT_S = 900
LOAD_GRACE_S = 240         # past the load: readiness wait (120), vegeta's client timeout (30), slack


def say(text: str) -> None:
    print(f"[resilience] {text}", flush=True)


def read_settings(env: dict, lab: dict) -> dict:
    """The RESILIENCE_* knobs, checked; lab is the env file's settings."""
    s = {
        "rate": number(env, "RESILIENCE_RATE", "100", 1, 5000),
        "seconds": number(env, "RESILIENCE_SECONDS", "35", 10, 3600, whole=True),
        "fault_at": number(env, "RESILIENCE_FAULT_AT", "10", 3, 3600, whole=True),
        "pause_s": number(env, "RESILIENCE_PAUSE", "10", 1, 600, whole=True),
        "file": env.get("RESILIENCE_FILE", "1KB.bin").strip(),
        "faults": env.get("RESILIENCE_FAULTS", " ".join(FAULTS)).split(),
        "trials": number(env, "RESILIENCE_TRIALS", "5", 1, 50, whole=True),
        "jitter_s": JITTER_S,
        "targets": (env.get("BENCH_TARGETS") or lab.get("BENCH_TARGETS", "")).split(),
    }
    seeded = [f"{size}.bin" for size in (env.get("FILE_SIZES") or lab.get("FILE_SIZES", "")).split()]
    if s["file"] not in seeded:
        raise LabError(f"RESILIENCE_FILE={s['file']!r}: not a seeded file; FILE_SIZES gives {seeded}")
    bad = [f for f in s["faults"] if f not in FAULTS]
    if bad or not s["faults"]:
        raise LabError(f"RESILIENCE_FAULTS={' '.join(s['faults'])!r}: expected one or both of {FAULTS}")
    # a level before the fault, the outage, then RATE_BACK_HOLD seconds to see the rate come back
    needed = s["fault_at"] + JITTER_S + s["pause_s"] + RATE_BACK_HOLD + 5
    if s["seconds"] < needed:
        raise LabError(f"RESILIENCE_SECONDS={s['seconds']}: too short to see a recovery; at least "
                       f"{needed} with RESILIENCE_FAULT_AT={s['fault_at']} and RESILIENCE_PAUSE={s['pause_s']}")
    return s


def paths_with_database(services: dict, targets: list[str]) -> list[tuple[str, str]]:
    """(path, database) for each target whose compose service names the
    database it reads (label lab.database), in BENCH_TARGETS order."""
    out = []
    for t in known_targets(services, targets):
        database = (services[t].get("labels") or {}).get("lab.database")
        if database:
            if database not in services:
                raise LabError(f"{t}: label lab.database={database!r} is not a service in compose.yaml")
            out.append((t, database))
    return out


def take_away(base: list[str], env: dict, kind: str, database: str, pause_s: int) -> Fault:
    """The fault itself; the database is always brought back, even if a
    command fails."""
    began = time.time()
    down = None
    try:
        if kind == "restart":
            compose_run(base, ["stop", "-t", "10", database], env, COMPOSE_TIMEOUT_S, f"stopping {database}")
            down = time.time()
        else:
            compose_run(base, ["pause", database], env, COMPOSE_TIMEOUT_S, f"pausing {database}")
            down = time.time()
            time.sleep(pause_s)
    finally:
        action = "start" if kind == "restart" else "unpause"
        compose_run(base, [action, database], env, COMPOSE_TIMEOUT_S, f"bringing {database} back ({action})")
    return Fault(kind=kind, database=database, began=began, down=down, back=time.time())


def one_case(base: list[str], env: dict, s: dict, path: str, database: str, kind: str) -> tuple:
    """Load on path, the fault in its middle; returns (header, answers,
    fault), the fault with when the load's probe saw the database answer again."""
    url = f"http://{path}:8080/files/{s['file']}"
    cmd = base + ["run", "--rm", "--no-deps", "-T", "bench", "resilience-load", url, s["file"],
                  f"{s['rate']:g}", str(s["seconds"]), database]
    lines: list[str] = []
    probed: list[tuple[str, float]] = []
    first_answer = threading.Event()
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        def pump():
            for line in proc.stdout:
                if line.startswith('{"database":'):
                    event = json.loads(line)
                    probed.append((event["database"], float(event["at"])))
                    continue
                lines.append(line)
                if len(lines) == 2:  # the header, then the first answer: the load is on
                    first_answer.set()
        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        fault = None
        try:
            deadline = time.monotonic() + LOAD_GRACE_S
            while not first_answer.wait(timeout=0.5):
                if proc.poll() is not None:
                    raise LabError(f"{path}: the load exited {proc.returncode} before its first answer: "
                                   f"{proc.stderr.read().strip()[-600:]}")
                if time.monotonic() > deadline:
                    raise LabError(f"{path}: no answer within {LOAD_GRACE_S} s of starting the load")
            time.sleep(max(0.0, s["fault_at"] - 0.1))
            fault = take_away(base, env, kind, database, s["pause_s"])
            proc.wait(timeout=s["seconds"] + LOAD_GRACE_S)
        except (subprocess.TimeoutExpired, LabError) as e:
            proc.kill()
            proc.wait(timeout=30)
            raise LabError(str(e) if isinstance(e, LabError) else
                           f"{path}: the load ran past {s['seconds'] + LOAD_GRACE_S} s") from None
        except KeyboardInterrupt:  # Ctrl-C or a stop signal: the load ends with the run, not minutes later
            proc.kill()
            raise
        finally:
            reader.join(timeout=30)
        stderr = proc.stderr.read()
    if proc.returncode != 0:
        raise LabError(f"{path}: the load exited {proc.returncode}: {stderr.strip()[-600:]}")
    try:
        header = json.loads(lines[0])
        answers = parse_results("".join(lines[1:]))
    except (IndexError, ValueError, VegetaOutputError) as e:
        raise LabError(f"{path}: the load's output is not what resilience-load prints: {e}") from None
    return header, answers, replace(fault, answering=answering_again(probed, fault.began))


def write_answers(out: Path, name: str, answers, expected_sha256: str) -> None:
    """Each request as CSV, times relative to the first, to audit a row."""
    if not answers:
        return
    t0 = answers[0].sent
    with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sent_s", "latency_ms", "code", "bytes_in", "whole_file", "error"])
        for a in answers:
            w.writerow([f"{a.sent - t0:.4f}", f"{a.latency * 1000:.2f}", a.code, a.bytes_in,
                        int(a.body_sha256 == expected_sha256), a.error[:200]])


def main() -> int:
    env = dict(os.environ)
    try:
        env_file, lab, base = open_lab(env, "RESILIENCE", "gridfs-lab-resilience")
    except LabError as e:
        print(f"resilience: error: {e}", file=sys.stderr)
        return 2
    try:
        s = read_settings(env, lab)
        cases = [(p, d, k, t) for p, d in paths_with_database(compose_services(base, env), s["targets"])
                 for k in s["faults"] for t in range(1, s["trials"] + 1)]
    except (LabError, ValueError, KeyError) as e:
        print(f"resilience: error: {e}", file=sys.stderr)
        return 2
    if not cases:
        print(f"resilience: error: no path in BENCH_TARGETS ({' '.join(s['targets'])}) has a database "
              "(compose label lab.database)", file=sys.stderr)
        return 2
    run_id, out = results_dir(env, lab, "resilience")
    doc = {"kind": "resilience", "run_id": run_id, "env_file": env_file.name,
           "started": now_iso(), "finished": None,
           "settings": s, "images": {k: v for k, v in lab.items() if k.endswith("_IMAGE")},
           "server": None, "resilience": [], "failed": []}
    paths = sorted({c[0] for c in cases})
    databases = sorted({c[1] for c in cases})

    def measure() -> None:  # the project up, every case measured
        say(f"{len(cases)} cases: {', '.join(paths)}; about "
            f"{len(cases) * (s['seconds'] + CASE_OVERHEAD_S) // 60 + 1} min after the build and the seed")
        compose_run(base, ["build", "settings", "seed", "bench", *paths], env, BUILD_TIMEOUT_S, "building the images")
        compose_run(base, ["up", "-d", *databases, *paths], env, COMPOSE_TIMEOUT_S * 3, "starting the paths")
        compose_run(base, ["run", "--rm", "seed"], env, SEED_TIMEOUT_S, "seeding")
        for i, (path, database, kind, trial) in enumerate(cases):
            left = (len(cases) - i) * (s["seconds"] + CASE_OVERHEAD_S)
            fault_at = round(s["fault_at"] + random.Random(f"{run_id}:{path}:{kind}:{trial}").uniform(0, JITTER_S), 2)
            say(f"{i + 1}/{len(cases)} {path}: {kind} {database} {fault_at:g} s into {s['seconds']} s "
                f"at {s['rate']:g}/s, trial {trial} (about {left // 60} min {left % 60} s left)")
            began = time.time()
            try:
                header, answers, fault = one_case(base, env, {**s, "fault_at": fault_at}, path, database, kind)
            except LabError as e:
                keep_log(base, env, out, f"{path}-{kind}-t{trial}", path, began)
                say(f"{path} {kind}: not measured: {e}")
                doc["failed"].append({"path": path, "database": database, "fault": kind, "trial": trial,
                                      "error": str(e)})
                continue
            if database == "mongo":
                doc["server"] = header.get("server")
            row = replace(analyse(path, s["rate"], answers, header["expected_sha256"], fault), trial=trial,
                          fault_at_s=fault_at)
            write_answers(out, f"{path}-{kind}-t{trial}", answers, header["expected_sha256"])
            keep_log(base, env, out, f"{path}-{kind}-t{trial}", path, began)
            doc["resilience"].append(row.to_dict())
            doc["summary"] = summarise([ResilienceRow.from_dict(r) for r in doc["resilience"]])
            answering = ("" if row.answering_after_s is None else
                         f"{database} answering {max(row.answering_after_s, 0.0):.2f} s after it was brought back; ")
            say(f"{path} {kind} trial {trial}: {row.errors} errors of {row.requests}; {answering}{row.verdict}")
            save(out, doc)

    return measure_then_finish("resilience", base, env, out, doc, render, measure, {"path": "-", "fault": "-"})


if __name__ == "__main__":
    sys.exit(main())
