#!/usr/bin/env python3
"""make overload: each serving path (1) under OVERLOAD_CLIENTS clients at
once (1000) on OVERLOAD_FILE (1MB) for OVERLOAD_SECONDS (30), wrk from a
bench container, with TARGET_MEM as set; (2) serving LARGE_FILE (100MB) to
LARGE_CLIENTS (50) clients at once, every byte verified, inside a LARGE_MEM
(256m) limit, each answer's start bounded by LARGE_DEADLINE_MS (300000)
rather than the lab's REQUEST_DEADLINE_MS: that check is about memory, and
a 503 sheds the work it would measure. For each: the kernel's OOM kills in
the container (Docker's `oom` events), its state after, its peak memory
against its limit (sampled from its cgroup on the host, v1 or v2), and
whether every answer was whole or a clean error. Run from the host, which
drives Docker, in a compose project of its own (taken down after); writes
results/overload-<UTC time>/results.json (an `overload` section),
report.md, and what each path logged during each case (<check>-<path>.log).

Environment (each checked before anything starts): OVERLOAD_ENV_FILE
(default local.env), OVERLOAD_PROJECT (gridfs-lab-overload),
OVERLOAD_CLIENTS, OVERLOAD_SECONDS, OVERLOAD_FILE, LARGE_FILE (off: skip
the large-file check), LARGE_CLIENTS, LARGE_MEM, LARGE_DEADLINE_MS,
OVERLOAD_CHECKS (default "clients large"), BENCH_TARGETS (default: the env
file's)."""
import json
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "loadgen"))
from bench.check_settings import REQUEST_DEADLINE_MAX_MS  # noqa: E402
from bench.faults.overload import ContainerAfter, clients_row, large_file_row  # noqa: E402
from bench.report.overload import render  # noqa: E402
from bench.clients.wrk_output import WrkOutputError, parse as parse_wrk  # noqa: E402
from lab_compose import (LabError, PeakMemory, compose_run, compose_services, container_id, finish,  # noqa: E402
                         inspect, keep_log, known_targets, now_iso, number, oom_events, open_lab, results_dir,
                         save)

CHECKS = ("clients", "large")
SIZE = re.compile(r"\d+(KB|MB|GB)")
MEMORY = re.compile(r"\d+[kmg]")
BUILD_TIMEOUT_S = 3600
SEED_TIMEOUT_S = 1800
WRK_TIMEOUT_S = 30        # an answer slower than this is a client timeout
LARGE_TIMEOUT_S = 3600    # 50 x 100 MB from FerretDB's ~30 MB/s takes minutes


def say(text: str) -> None:
    print(f"[overload] {text}", flush=True)


def read_settings(env: dict, lab: dict) -> dict:
    s = {
        "clients": number(env, "OVERLOAD_CLIENTS", "1000", 1, 20000, whole=True),
        "seconds": number(env, "OVERLOAD_SECONDS", "30", 1, 3600, whole=True),
        "file": env.get("OVERLOAD_FILE", "1MB").strip().upper(),
        "large_file": env.get("LARGE_FILE", "100MB").strip().upper(),
        "large_clients": number(env, "LARGE_CLIENTS", "50", 1, 1000, whole=True),
        "large_mem": env.get("LARGE_MEM", "256m").strip().lower(),
        # 50 x 100 MB from FerretDB's ~30 MB/s: the last answer starts after minutes
        "large_deadline_ms": number(env, "LARGE_DEADLINE_MS", "300000", 1, REQUEST_DEADLINE_MAX_MS, whole=True),
        "checks": env.get("OVERLOAD_CHECKS", " ".join(CHECKS)).split(),
        "targets": (env.get("BENCH_TARGETS") or lab.get("BENCH_TARGETS", "")).split(),
    }
    if not SIZE.fullmatch(s["file"]):
        raise LabError(f"OVERLOAD_FILE={s['file']!r}: expected one size such as 1MB (KB = 1024 bytes)")
    if s["large_file"] == "OFF":
        s["checks"] = [c for c in s["checks"] if c != "large"]
    elif not SIZE.fullmatch(s["large_file"]):
        raise LabError(f"LARGE_FILE={s['large_file']!r}: expected one size such as 100MB, or off")
    if not MEMORY.fullmatch(s["large_mem"]):
        raise LabError(f"LARGE_MEM={s['large_mem']!r}: expected a Docker memory size such as 256m")
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    s["large_cache_size"] = f"{int(int(s['large_mem'][:-1]) * units[s['large_mem'][-1]] // 2)}m"
    bad = [c for c in s["checks"] if c not in CHECKS]
    if bad or not s["checks"]:
        raise LabError(f"OVERLOAD_CHECKS={' '.join(s['checks'])!r}: expected one or both of {CHECKS}")
    return s


def after_load(cid: str, began: float, peak: PeakMemory) -> ContainerAfter:
    state = inspect(cid)
    return ContainerAfter(
        oom_kills=oom_events(cid, began, time.time() + 1), status=state["State"]["Status"],
        oom_killed=bool(state["State"]["OOMKilled"]), exit_code=int(state["State"]["ExitCode"]),
        peak_bytes=peak.peak, limit_bytes=int(state["HostConfig"]["Memory"]), kernel_peak_bytes=peak.kernel_peak,
        kernel_oom_kills=peak.kernel_oom_kills)


def bench_run(base: list[str], env: dict, args: list[str], timeout: float, what: str) -> str:
    return compose_run(base, ["run", "--rm", "--no-deps", "-T", *args], env, timeout, what)


def clients_case(base: list[str], env: dict, s: dict, path: str):
    name = f"{s['file']}.bin"
    url = f"http://{path}:8080/files/{name}"
    bench_run(base, env, ["bench", "fetch", url, name, "1"], 600, f"{path}: serving {name} before the load")
    cid = container_id(base, env, path)
    began = time.time()
    with PeakMemory(cid) as peak:
        out = bench_run(base, env, ["--entrypoint", "wrk", "bench", "--latency", "-t", "2", "-c", str(s["clients"]),
                                    "-d", f"{s['seconds']}s", "--timeout", f"{WRK_TIMEOUT_S}s", url],
                        s["seconds"] + WRK_TIMEOUT_S + 180, f"{path}: wrk")
    try:
        wrk = parse_wrk(out)
    except WrkOutputError as e:
        raise LabError(f"{path}: wrk's output: {e}") from None
    load = f"{s['clients']} clients x {name} for {s['seconds']} s"
    return clients_row(path, load, wrk, after_load(cid, began, peak))


def large_case(base: list[str], env: dict, s: dict, path: str):
    name = f"{s['large_file']}.bin"
    cid = container_id(base, env, path)
    began = time.time()
    with PeakMemory(cid) as peak:
        out = bench_run(base, env, ["bench", "fetch", f"http://{path}:8080/files/{name}", name,
                                    str(s["large_clients"])], LARGE_TIMEOUT_S, f"{path}: {name} to many clients")
    try:
        fetched = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError) as e:
        raise LabError(f"{path}: fetch's output is not its JSON line: {e}") from None
    load = f"{s['large_clients']} clients x {name} in {s['large_mem']}, deadline {s['large_deadline_ms'] / 1000:g} s"
    return large_file_row(path, load, fetched, after_load(cid, began, peak)), fetched


def main() -> int:
    env = dict(os.environ)
    try:
        env_file, lab, base = open_lab(env, "OVERLOAD", "gridfs-lab-overload")
    except LabError as e:
        print(f"overload: error: {e}", file=sys.stderr)
        return 2
    try:
        s = read_settings(env, lab)
        paths = known_targets(compose_services(base, env), s["targets"])
    except LabError as e:
        print(f"overload: error: {e}", file=sys.stderr)
        return 2
    # only the files asked for: no working set
    sizes = [s["file"]] + ([s["large_file"]] if "large" in s["checks"] and s["large_file"] != s["file"] else [])
    env.update(FILE_SET="off", FILE_SIZES=" ".join(sizes))
    run_id, out = results_dir(env, lab, "overload")
    doc = {"kind": "overload", "run_id": run_id, "env_file": env_file.name, "started": now_iso(), "finished": None,
           "settings": s, "images": {k: v for k, v in lab.items() if k.endswith("_IMAGE")},
           "target_mem": env.get("TARGET_MEM") or lab.get("TARGET_MEM"), "overload": [], "failed": []}

    try:
        say(f"{', '.join(s['checks'])} on {' '.join(paths)}: building, seeding {' '.join(sizes)}")
        compose_run(base, ["build", "settings", "seed", "bench", *paths], env, BUILD_TIMEOUT_S, "building the images")
        compose_run(base, ["up", "-d", *paths], env, 600, "starting the paths")
        compose_run(base, ["run", "--rm", "seed"], env, SEED_TIMEOUT_S, "seeding")
        checks = [("clients", clients_case, env)]
        if "large" in s["checks"]:
            # nginx-cache's tmpfs counts toward its limit: half of it, so the file fits beside nginx
            checks.append(("large", large_case, {**env, "TARGET_MEM": s["large_mem"],
                                                 "CACHE_SIZE": s["large_cache_size"],
                                                 "REQUEST_DEADLINE_MS": str(s["large_deadline_ms"])}))
        for check, case, check_env in checks:
            if check not in s["checks"]:
                continue
            if check == "large":
                compose_run(base, ["up", "-d", "--no-deps", "--force-recreate", *paths], check_env, 600,
                            f"restarting the paths with TARGET_MEM={s['large_mem']} "
                            f"REQUEST_DEADLINE_MS={s['large_deadline_ms']}")
            for i, path in enumerate(paths):
                say(f"{check} {i + 1}/{len(paths)}: {path}")
                began = time.time()
                try:
                    result = case(base, check_env, s, path)
                    row = result[0] if isinstance(result, tuple) else result
                except LabError as e:
                    say(f"{path}: not measured: {e}")
                    doc["failed"].append({"check": row_check(check), "path": path, "error": str(e)})
                    row = None
                if row:
                    doc["overload"].append(row.to_dict())
                    say(f"{path}: {row.whole} whole, {row.clean_errors} clean errors, peak {row.peak_mib} MiB "
                        f"of {row.limit_mib}: {row.verdict}")
                keep_log(base, check_env, out, f"{check}-{path}", path, began)
                save(out, doc)
                # a killed path comes back for the next check
                compose_run(base, ["up", "-d", "--no-deps", path], check_env, 300, f"bringing {path} back")
    except LabError as e:
        print(f"overload: error: {e}", file=sys.stderr)
        doc["failed"].append({"check": "-", "path": "-", "error": str(e)})
    return finish("overload", base, env, out, doc, render)


def row_check(check: str) -> str:
    return "large file" if check == "large" else check


if __name__ == "__main__":
    sys.exit(main())
