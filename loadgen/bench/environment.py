"""What the run ran on: the database server (MongoDB or FerretDB, version),
the CPU, the load generator's tools."""
import os
import platform
import subprocess
from pathlib import Path

import pymongo


def machine_of(environment: dict) -> dict:
    """What makes two runs "the same machine" here (an A/B quotes the last
    A/A of its machine): CPU model, cores, kernel."""
    return {k: environment.get(k) for k in ("cpu_model", "host_cores", "kernel")}


def server_label(environment: dict) -> str:
    """What the database said of itself (buildInfo), never assumed."""
    server = environment.get("server") or {}
    if not server:
        return "unknown server"
    label = f"{server.get('product', 'MongoDB')} {server.get('version', '?')}"
    if server.get("product") == "FerretDB":
        label += f" (MongoDB wire version {server.get('wire_version', '?')}"
        label += f", {server['backend']} backend)" if server.get("backend") else ", backend not reported)"
    elif server.get("storage_engine"):
        label += f" ({server['storage_engine']})"
    return label


def database_server(uri: str, db: str) -> dict:
    """The database as it describes itself: product and version from
    buildInfo, and what stores its data (MongoDB: serverStatus's storage
    engine; FerretDB: its backend, as the shape of its own explain of the
    GridFS files collection shows), never assumed from the image's name."""
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000, connectTimeoutMS=5000,
                             socketTimeoutMS=10000) as client:
        info = client.admin.command("buildInfo")
        if "ferretdbVersion" in info:
            try:
                explain = client[db].command({"explain": {"find": "fs.files", "filter": {}}})
            except pymongo.errors.PyMongoError:
                explain = {}
            return {"product": "FerretDB", "version": info["ferretdbVersion"], "wire_version": info.get("version"),
                    "backend": ferretdb_backend(explain)}
        try:
            engine = (client.admin.command("serverStatus").get("storageEngine") or {}).get("name")
        except pymongo.errors.PyMongoError:
            engine = None
    return {"product": "MongoDB", "version": info.get("version"), "git_version": info.get("gitVersion"),
            "storage_engine": engine}


def ferretdb_backend(explain: dict) -> str | None:
    """FerretDB v1 answers explain with its backend's own query plan:
    PostgreSQL's EXPLAIN (FORMAT JSON) plan (a "Plan" with a "Node Type"), or
    SQLite's EXPLAIN QUERY PLAN rows as strings ("id=2 parent=0 notused=0
    detail=SCAN ..."). None when the answer is neither (no collection yet,
    another backend)."""
    plan = (explain.get("queryPlanner") or {}).get("Plan")
    if isinstance(plan, dict) and "Node Type" in plan:
        return "PostgreSQL"
    if isinstance(plan, list) and plan and all(isinstance(row, str) and " detail=" in row for row in plan):
        return "SQLite"
    return None


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def ab_version() -> str:
    try:
        out = subprocess.run(["ab", "-V"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "ab (version unknown)"
    return out.splitlines()[0].strip() if out else "ab (version unknown)"


def cgroup_version() -> int:
    return 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def own_cpu_allowance() -> float:
    """Cores this container may use: its cpuset, capped by a CFS quota
    (compose `cpus:`) when one is set; cgroup v1 or v2."""
    cores = float(len(os.sched_getaffinity(0)))
    v2 = _read("/sys/fs/cgroup/cpu.max")
    if v2 and not v2.startswith("max"):
        quota, period = v2.split()[:2]
        return min(cores, int(quota) / int(period))
    for folder in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"):
        quota, period = _read(f"{folder}/cpu.cfs_quota_us"), _read(f"{folder}/cpu.cfs_period_us")
        if quota and period and int(quota) > 0 and int(period) > 0:
            return min(cores, int(quota) / int(period))
    return cores


def own_memory_limit() -> int | None:
    """Bytes this container may use (compose mem_limit), None without a
    limit; cgroup v1 or v2."""
    text = _read("/sys/fs/cgroup/memory.max") or _read("/sys/fs/cgroup/memory/memory.limit_in_bytes")
    if not text or not text.isdigit() or int(text) >= 2 ** 62:  # "max", or v1's page-rounded 2^63-1
        return None
    return int(text)


def wrk_version() -> str:
    try:
        out = subprocess.run(["wrk", "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "wrk (not installed)"
    return (out.stdout + out.stderr).splitlines()[0].split(" Copyright")[0].strip()


def vegeta_version() -> str:
    try:
        out = subprocess.run([os.environ.get("VEGETA", "vegeta"), "-version"], capture_output=True, text=True,
                             timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "vegeta (not installed)"
    words = dict(line.split(": ", 1) for line in out.stdout.splitlines() if ": " in line)
    return f"vegeta {words.get('Version', '?')}"


def describe(uri: str, gridfs_db: str) -> dict:
    env = {
        "cpu_model": cpu_model(),
        "host_cores": os.cpu_count(),
        "loadgen_cores": sorted(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "cgroup_version": cgroup_version(),
        "ab_version": ab_version(),
        "wrk_version": wrk_version(),
        "vegeta_version": vegeta_version(),
        "loadgen_allowance_cores": own_cpu_allowance(),
    }
    try:
        env["server"] = database_server(uri, gridfs_db)
    except pymongo.errors.PyMongoError as e:
        env["server"] = {"product": "unknown", "error": str(e)}
    return env
