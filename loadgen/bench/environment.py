"""What the run ran on: the database server (MongoDB or FerretDB, version),
the CPU, the load generator's tools."""
import os
import platform
import subprocess
from pathlib import Path

import pymongo


def database_server(uri: str) -> dict:
    info = pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000).admin.command("buildInfo")
    if "ferretdbVersion" in info:
        return {"product": "FerretDB", "version": info["ferretdbVersion"], "wire_version": info.get("version")}
    return {"product": "MongoDB", "version": info.get("version"), "git_version": info.get("gitVersion")}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def ab_version() -> str:
    out = subprocess.run(["ab", "-V"], capture_output=True, text=True).stdout
    return out.splitlines()[0].strip() if out else "ab (version unknown)"


def cgroup_version() -> int:
    return 2 if Path("/sys/fs/cgroup/cgroup.controllers").exists() else 1


def describe(uri: str) -> dict:
    env = {
        "cpu_model": cpu_model(),
        "host_cores": os.cpu_count(),
        "loadgen_cores": sorted(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "cgroup_version": cgroup_version(),
        "ab_version": ab_version(),
    }
    try:
        env["server"] = database_server(uri)
    except pymongo.errors.PyMongoError as e:
        env["server"] = {"product": "unknown", "error": str(e)}
    return env
