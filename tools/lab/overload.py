#!/usr/bin/env python3
"""make overload: each serving path's (0) goodput on OVERLOAD_FILE (1MB):
its capacity, the best whole-answer rate over closed-loop concurrencies
OVERLOAD_CONCURRENCIES (1 2 4 ... 64, climbing while the rate rises), then
three windows of OVERLOAD_WINDOW_SECONDS (10) at 3x and at 10x that rate,
open loop, every path's windows interleaved (vegeta in one bench container,
`python -m bench overload-window`), each window's flags from every
container's CPU as its cgroup counts it, read here (bench.faults.overload);
(1) under OVERLOAD_CLIENTS clients at
once (1000) on OVERLOAD_FILE for OVERLOAD_SECONDS (30), wrk from a
bench container, with TARGET_MEM as set (reported, not judged); (2) serving LARGE_FILE (100MB) to
LARGE_CLIENTS (50) clients at once, every byte verified, inside a LARGE_MEM
(256m) limit, each answer's start bounded by LARGE_DEADLINE_MS (300000)
rather than the lab's REQUEST_DEADLINE_MS: that check is about memory, and
a 503 sheds the work it would measure. For each: the kernel's OOM kills in
the container (Docker's `oom` events), its state after, its peak memory
against its limit (sampled from its cgroup on the host, v1 or v2), and
whether every answer was whole or a clean error. Where the lab's pins put
the load generator on a database's core (cpus-2.env), the databases run on
the target's cores instead (placement). Run from the host, which
drives Docker, in a compose project of its own (taken down after, or at once
on Ctrl-C, SIGTERM or SIGHUP: lab_compose.measure_then_finish); writes
results/overload-<UTC time>/results.json (an `overload` section),
report.md, and what each path logged during each case (<check>-<path>.log).

Environment (each checked before anything starts): OVERLOAD_ENV_FILE
(default local.env), OVERLOAD_PROJECT (gridfs-lab-overload),
OVERLOAD_CONCURRENCIES, OVERLOAD_WINDOW_SECONDS, OVERLOAD_CLIENTS,
OVERLOAD_SECONDS, OVERLOAD_FILE, LARGE_FILE (off: skip the large-file
check), LARGE_CLIENTS, LARGE_MEM, LARGE_DEADLINE_MS, OVERLOAD_CHECKS
(default "goodput clients large"), BENCH_TARGETS (default: the env file's)."""
import contextlib
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.check_settings import REQUEST_DEADLINE_MAX_MS
from bench.benchmark.schedule import repetition_orders
from bench.faults.overload import (MULTIPLES, OPEN_LOOP_WORKERS, WINDOWS, ContainerAfter, Measured, Window,
                                   capacity, climbing, clients_row, goodput_row, large_file_row, request_timeout,
                                   window_flags)
from bench.measure import usage
from bench.measure.cadvisor import Counters
from bench.measure.cgroup_cpu import CpuFiles, cpu_files, read_times
from bench.report.overload import render
from bench.clients.wrk_output import WrkOutputError, parse as parse_wrk
from lab_compose import (CGROUP, LabError, PeakMemory, compose_run, compose_services, container_id, docker_cgroups,
                         inspect, keep_log, known_targets, measure_then_finish, now_iso, number, oom_events, open_lab,
                         results_dir, save)

CHECKS = ("goodput", "clients", "large")
SIZE = re.compile(r"\d+(KB|MB|GB)")
MEMORY = re.compile(r"\d+[kmg]")
BUILD_TIMEOUT_S = 3600
SEED_TIMEOUT_S = 1800
WRK_TIMEOUT_S = 30        # an answer slower than this is a client timeout
LARGE_TIMEOUT_S = 3600    # 50 x 100 MB from FerretDB's ~30 MB/s takes minutes
WINDOW_GRACE_S = 60       # past a goodput window's duration and one request's timeout: docker exec killed
SAMPLE_EVERY_S = 0.2      # every container's CPU counters and /proc/stat, read from the host


def say(text: str) -> None:
    print(f"[overload] {text}", flush=True)


def read_settings(env: dict, lab: dict) -> dict:
    s = {
        "concurrencies": env.get("OVERLOAD_CONCURRENCIES", "1 2 4 8 16 32 64").split(),
        "window_seconds": number(env, "OVERLOAD_WINDOW_SECONDS", "10", 1, 600),
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
    if not s["concurrencies"] or not all(c.isdigit() and 1 <= int(c) <= 10000 for c in s["concurrencies"]):
        raise LabError(f"OVERLOAD_CONCURRENCIES={' '.join(s['concurrencies'])!r}: expected rising whole numbers "
                       f"from 1 to 10000, such as 1 2 4 8")
    s["concurrencies"] = [int(c) for c in s["concurrencies"]]
    if s["concurrencies"] != sorted(set(s["concurrencies"])):
        raise LabError(f"OVERLOAD_CONCURRENCIES={' '.join(map(str, s['concurrencies']))!r}: expected rising numbers")
    units = {"k": 1 / 1024, "m": 1, "g": 1024}
    s["large_cache_size"] = f"{int(int(s['large_mem'][:-1]) * units[s['large_mem'][-1]] // 2)}m"
    bad = [c for c in s["checks"] if c not in CHECKS]
    if bad or not s["checks"]:
        raise LabError(f"OVERLOAD_CHECKS={' '.join(s['checks'])!r}: expected one or more of {CHECKS}")
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
        # a client waits for its answer's start as long as the path may hold it, and a margin
        out = bench_run(base, env, ["bench", "fetch", f"http://{path}:8080/files/{name}", name,
                                    str(s["large_clients"]), f"{s['large_deadline_ms'] / 1000 + 30:g}"],
                        LARGE_TIMEOUT_S, f"{path}: {name} to many clients")
    try:
        fetched = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError) as e:
        raise LabError(f"{path}: fetch's output is not its JSON line: {e}") from None
    load = f"{s['large_clients']} clients x {name} in {s['large_mem']}, deadline {s['large_deadline_ms'] / 1000:g} s"
    return large_file_row(path, load, fetched, after_load(cid, began, peak)), fetched


# --- goodput: the host reads every container's CPU while bench's container loads ---

def cpu_files_of(cid: str) -> CpuFiles | None:
    """The container's CPU accounting files (cgroup v1 or v2), under either cgroup driver's name."""
    return next(filter(None, (cpu_files(CGROUP, name) for name in docker_cgroups(cid))), None)


def read_counters(files: CpuFiles, now_ns: int) -> Counters:
    """A container's cumulative CPU as cAdvisor would report it, from its cgroup."""
    times = read_times(files)
    return Counters(now_ns, times.total_ns, times.user_ns, times.system_ns, times.throttled_periods, 0, 0)


class CpuSampler:
    """Every container's CPU counters and /proc/stat, SAMPLE_EVERY_S, in a thread."""

    def __init__(self, cids: dict[str, str]):
        self.files = {role: cpu_files_of(cid) for role, cid in cids.items()}
        self.series: dict[str, list[Counters]] = {role: [] for role in cids}
        self.proc_stat: list[tuple[int, usage.ProcStat]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            now = time.time_ns()
            for role, files in self.files.items():
                try:
                    if files:
                        self.series[role].append(read_counters(files, now))
                except (OSError, ValueError):  # CgroupError is a ValueError
                    pass  # gone with its container: the series so far stands
            with contextlib.suppress(OSError, ValueError):
                self.proc_stat.append((now, usage.parse_proc_stat(Path("/proc/stat").read_text())))
            self._stop.wait(SAMPLE_EVERY_S)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=5)

    def busy(self, start_ns: int, end_ns: int) -> dict[str, float]:
        """Each CPU's busy share over the window, from the readings nearest inside it."""
        inside = [ps for at, ps in self.proc_stat if start_ns <= at <= end_ns]
        if len(inside) < 2:
            before = [ps for at, ps in self.proc_stat if at <= start_ns][-1:]
            after = [ps for at, ps in self.proc_stat if at >= end_ns][:1]
            inside = before + after
        return usage.busy_shares(inside[0], inside[-1]) if len(inside) >= 2 else {}


def cpuset(text: str) -> tuple[int, ...]:
    """Docker's CpusetCpus ("0", "0-1", "0,2-3") as CPU numbers."""
    cpus = []
    for part in filter(None, text.split(",")):
        low, _, high = part.partition("-")
        cpus += range(int(low), int(high or low) + 1)
    return tuple(cpus)


DATABASE_PINS = ("MONGO_CPUS", "POSTGRES_CPUS")
PINS = ("TARGET_CPUS", *DATABASE_PINS, "LOADGEN_CPUS")  # as the report gives them


def placement(settings: dict) -> dict[str, str]:
    """The pins make overload changes, from the lab's own (the env file's,
    under the environment's): where the load generator shares a core with a
    database (cpus-2.env on two cores), the databases move to the target's
    cores, so the load generator has its core to itself. Past capacity the
    database saturates whatever core it is on: beside the load generator
    that starves the client, which then reads refusals late and times out on
    answers sent; beside the target it is the path's own limit, capacity and
    overload measured alike. None when the target itself shares the load
    generator's cores (one core) or no database does."""
    loadgen = set(cpuset(settings.get("LOADGEN_CPUS", "")))
    target = settings.get("TARGET_CPUS", "")
    if not loadgen or not target or loadgen & set(cpuset(target)):
        return {}
    return {name: target for name in DATABASE_PINS if loadgen & set(cpuset(settings.get(name, "")))}


def allowance_of(state: dict) -> tuple[float | None, tuple[int, ...]]:
    """A container's CPU allowance (a CFS quota, else its cpuset's CPUs) and cpuset."""
    host = state["HostConfig"]
    cpus = cpuset(host.get("CpusetCpus") or "")
    if host.get("NanoCpus"):
        return host["NanoCpus"] / 1e9, cpus
    if (host.get("CpuQuota") or 0) > 0 and host.get("CpuPeriod"):
        return host["CpuQuota"] / host["CpuPeriod"], cpus
    return (float(len(cpus)) if cpus else None), cpus


class Loadgen:
    """One bench container kept for the goodput check, each window a
    `docker exec` into it, so no window waits for a container to start."""

    def __init__(self, base: list[str], env: dict):
        self.base, self.env = base, env

    def __enter__(self):
        out = compose_run(self.base, ["run", "-d", "--rm", "--no-deps", "--entrypoint", "sleep", "bench", "86400"],
                          self.env, 300, "starting bench's container for the goodput check")
        self.name = out.strip().splitlines()[-1]
        self.cid = inspect(self.name)["Id"]
        return self

    def __exit__(self, *exc):
        subprocess.run(["docker", "rm", "-f", self.cid], capture_output=True, timeout=60)

    def run(self, args: list[str], timeout: float, what: str) -> str:
        cmd = ["docker", "exec", self.cid, "timeout", "-k", "5", f"{timeout:.0f}", "python", "-m", "bench", *args]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            raise LabError(f"{what}: no end after {timeout + 30:g} s") from None
        if p.returncode != 0:
            raise LabError(f"{what}: exited {p.returncode}: {(p.stderr or p.stdout).strip()[-600:]}")
        return p.stdout


class Goodput:
    """make overload's goodput check over every path at once: capacities
    first, path by path; then every (path, multiple) window, interleaved."""

    def __init__(self, loadgen: Loadgen, sampler: CpuSampler, meta: dict, databases: dict[str, str | None], s: dict):
        self.loadgen, self.sampler, self.meta, self.databases, self.s = loadgen, sampler, meta, databases, s

    def window(self, path: str, multiple: int, round_: int, rate: float, workers: int) -> Measured:
        url = f"http://{path}:8080/files/{self.s['file']}.bin"
        seconds = self.s["window_seconds"]
        out = self.loadgen.run(["overload-window", url, f"{rate:g}", f"{seconds:g}", str(workers)],
                               seconds + request_timeout(seconds) + WINDOW_GRACE_S, f"{path}: a goodput window")
        try:
            found = json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError) as e:
            raise LabError(f"{path}: overload-window's output is not its JSON line: {e}") from None
        # a reading past the window's end; vegeta has waited for every answer,
        # so no window's backlog is left to the next
        time.sleep(SAMPLE_EVERY_S)
        w = Window.from_dict(found["window"])
        start, end = found["started_ns"], found["ended_ns"]
        cpu = {}
        for role in ("bench", path, self.databases.get(path)):
            if role and self.sampler.series.get(role):
                allowance, cpus = self.meta[role]
                used = usage.container_usage(self.sampler.series[role], start, end, w.whole, w.whole_rate,
                                             allowance, cpus)
                if used:
                    cpu[role] = used
        wall = (end - start) / 1e9
        tool_cores = found["load_cpu_seconds"] / wall if wall > 0 else None
        if "bench" in cpu and tool_cores is not None:
            cpu["bench"]["tool_cores"] = round(tool_cores, 4)
        limit = usage.tool_limit(found["threads"], self.meta["bench"][0])
        busy = self.sampler.busy(start, end)
        flags, bound = window_flags(cpu, path, tool_cores, limit, busy, rate, w.sent_rate)
        m = Measured(path, multiple, round_, w, flags, bound, cpu, busy)
        say(f"{path} {m.name}: {w.whole_rate:g} whole/s, {w.refused} refused, sent {w.sent_rate:g}/s"
            f"{', failures ' + str(w.failures) if w.failures else ''}"
            f"{'' if m.judged else ', not judged: ' + bound}")
        return m

    def capacity_steps(self, path: str) -> list[Measured]:
        steps = []
        for workers in self.s["concurrencies"]:
            steps.append(self.window(path, 0, 1, 0, workers))
            if not climbing([m.window.whole_rate for m in steps]):
                break
        return steps

    def overloaded(self, capacities: dict[str, float], seed: str) -> list[Measured]:
        conditions = [f"{path} {m}" for path, cap in capacities.items() if cap > 0 for m in MULTIPLES]
        windows = []
        for round_, order in enumerate(repetition_orders(conditions, WINDOWS, seed), 1):
            for condition in order:
                path, multiple = condition.split()
                rate = max(1, round(int(multiple) * capacities[path]))
                windows.append(self.window(path, int(multiple), round_, rate, OPEN_LOOP_WORKERS))
        return windows


def goodput_check(base: list[str], env: dict, s: dict, paths: list[str], services: dict, seed: str, out: Path,
                  doc: dict) -> None:
    """Fills doc["goodput"] (a row per path) and doc["goodput_windows"]."""
    name = f"{s['file']}.bin"
    databases = {p: (services[p].get("labels") or {}).get("lab.database") for p in paths}
    began = time.time()
    with Loadgen(base, env) as loadgen:
        serving = []
        for path in paths:
            try:
                loadgen.run(["fetch", f"http://{path}:8080/files/{name}", name, "1"], 600,
                            f"{path}: serving {name} before the load")
                serving.append(path)
            except LabError as e:  # that path only: the others are measured
                say(f"goodput: {path} not measured: {e}")
                doc["failed"].append({"check": "goodput", "path": path, "error": str(e)})
        paths = serving
        cids = {"bench": loadgen.cid, **{svc: container_id(base, env, svc)
                                         for svc in {*paths, *filter(None, databases.values())}}}
        meta = {role: allowance_of(inspect(cid)) for role, cid in cids.items()}
        with CpuSampler(cids) as sampler, contextlib.ExitStack() as stack:
            peaks = {p: stack.enter_context(PeakMemory(cids[p])) for p in paths}
            goodput = Goodput(loadgen, sampler, meta, databases, s)
            steps = {}
            for i, path in enumerate(paths):
                say(f"goodput {i + 1}/{len(paths)}: {path}'s capacity, closed loop at {s['concurrencies']}")
                steps[path] = goodput.capacity_steps(path)
            caps = {p: capacity(steps[p]).window.whole_rate for p in paths}
            say(f"goodput: {WINDOWS} windows at {' and '.join(f'{m}x' for m in MULTIPLES)} of "
                + ", ".join(f"{p} {c:g}/s" for p, c in caps.items()) + ", interleaved")
            windows = goodput.overloaded(caps, seed)
        for path in paths:
            row = goodput_row(path, steps[path], [w for w in windows if w.path == path],
                              after_load(cids[path], began, peaks[path]))
            doc["goodput"].append(row.to_dict())
            say(f"{path}: capacity {row.capacity_rps:g}/s: {row.verdict}")
            keep_log(base, env, out, f"goodput-{path}", path, began)
        doc["goodput_windows"] = [m.to_dict() for m in [*(m for p in paths for m in steps[p]), *windows]]


def main() -> int:
    env = dict(os.environ)
    try:
        env_file, lab, base = open_lab(env, "OVERLOAD", "gridfs-lab-overload")
    except LabError as e:
        print(f"overload: error: {e}", file=sys.stderr)
        return 2
    moved = placement({**lab, **env})
    env.update(moved)  # over the env file's: compose takes the environment's first
    pins = {name: env.get(name, lab.get(name, "")) for name in PINS}
    if moved:
        say("the databases on the target's cores, the load generator on its own: "
            + " ".join(f"{k}={v}" for k, v in moved.items()))
    try:
        s = read_settings(env, lab)
        services = compose_services(base, env)
        paths = known_targets(services, s["targets"])
    except LabError as e:
        print(f"overload: error: {e}", file=sys.stderr)
        return 2
    # only the files asked for: no working set
    sizes = [s["file"]] + ([s["large_file"]] if "large" in s["checks"] and s["large_file"] != s["file"] else [])
    env.update(FILE_SET="off", FILE_SIZES=" ".join(sizes))
    run_id, out = results_dir(env, lab, "overload")
    doc = {"kind": "overload", "run_id": run_id, "env_file": env_file.name, "started": now_iso(), "finished": None,
           "settings": s, "images": {k: v for k, v in lab.items() if k.endswith("_IMAGE")},
           "target_mem": env.get("TARGET_MEM") or lab.get("TARGET_MEM"), "pins": pins, "pins_moved": sorted(moved),
           "goodput": [], "goodput_windows": [],
           "overload": [], "failed": []}

    def measure() -> None:  # the project up, every case measured
        say(f"{', '.join(s['checks'])} on {' '.join(paths)}: building, seeding {' '.join(sizes)}")
        compose_run(base, ["build", "settings", "seed", "bench", *paths], env, BUILD_TIMEOUT_S, "building the images")
        compose_run(base, ["up", "-d", *paths], env, 600, "starting the paths")
        compose_run(base, ["run", "--rm", "seed"], env, SEED_TIMEOUT_S, "seeding")
        if "goodput" in s["checks"]:
            try:
                goodput_check(base, env, s, paths, services, run_id, out, doc)
            except LabError as e:
                say(f"goodput: not measured: {e}")
                doc["failed"].append({"check": "goodput", "path": "-", "error": str(e)})
            save(out, doc)
            # a killed path comes back for the next check
            compose_run(base, ["up", "-d", "--no-deps", *paths], env, 300, "bringing the paths back")
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

    return measure_then_finish("overload", base, env, out, doc, render, measure, {"check": "-", "path": "-"})


def row_check(check: str) -> str:
    return "large file" if check == "large" else check


if __name__ == "__main__":
    sys.exit(main())
