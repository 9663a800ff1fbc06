#!/usr/bin/env python3
"""The lab split over several Docker engines by role (issue 27), the way
TechEmpower's toolset runs one engine per role: the load generator (bench),
the serving paths (and the seed, which fills their files volume) and the
databases each on the engine LAB_HOSTS names, over the link between them.

  LAB_HOSTS="loadgen=ctx-a@10.0.0.1 paths=ctx-b@10.0.0.2 db=ctx-b@10.0.0.2"

Each role is ENGINE@ADDRESS: ENGINE a Docker context's name or a
DOCKER_HOST URL (unix://, ssh://, tcp://), ADDRESS the host's address on the
link, the only address anything is published on. One engine may hold
several roles. LAB_HOSTS unset: today's single machine, untouched.

This module plans the split (pure, tested): which services run where, and
the compose override each engine gets: ports published on its link address
only, the other roles' services reached by name through `extra_hosts`, and
bench told each path's URL (BENCH_TARGET_URLS). `--plan` prints it."""
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_compose import ROOT, LabError  # noqa: E402

ROLES = ("loadgen", "paths", "db")
DATABASES = ("mongo", "postgres")
LOADGEN = ("settings", "bench")
DATABASE_PORTS = {"mongo": 27017, "postgres": 5432}
PATH_PORT = 8080        # every serving path listens here inside its container
FIRST_PATH_PORT = 18080  # published on the paths host: one port per path, in BENCH_TARGETS order
CADVISOR_PORT = 18088    # each host's cAdvisor, for bench
ENGINE = re.compile(r"^(?:[A-Za-z0-9][A-Za-z0-9_.+-]*|(?:unix|ssh|tcp)://\S+)$")
ADDRESS = re.compile(r"^[0-9A-Za-z.:-]+$")


@dataclass(frozen=True)
class Host:
    engine: str      # a Docker context's name, or a DOCKER_HOST URL
    address: str     # its address on the link between the hosts

    @property
    def docker_args(self) -> list[str]:
        """How the docker CLI is pointed at this engine."""
        return ["-H", self.engine] if "://" in self.engine else ["--context", self.engine]

    @property
    def name(self) -> str:
        """A file-safe name for the host's override."""
        return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{self.engine}-{self.address}").strip("_")


def parse_hosts(text: str) -> dict[str, Host]:
    """LAB_HOSTS as {role: Host}; every role named once, each as
    ENGINE@ADDRESS. An empty text: {} (one machine)."""
    if not text.strip():
        return {}
    hosts: dict[str, Host] = {}
    for word in text.split():
        role, _, where = word.partition("=")
        engine, _, address = where.rpartition("@")
        if role not in ROLES:
            raise LabError(f"LAB_HOSTS: {role!r} is not a role: expected {', '.join(ROLES)} "
                           "(e.g. loadgen=ctx-a@10.0.0.1 paths=ctx-b@10.0.0.2 db=ctx-b@10.0.0.2)")
        if role in hosts:
            raise LabError(f"LAB_HOSTS: {role} is named twice")
        if not engine or not ENGINE.match(engine) or not address or not ADDRESS.match(address):
            raise LabError(f"LAB_HOSTS: {word!r}: expected {role}=ENGINE@ADDRESS, ENGINE a Docker context or a "
                           "unix://, ssh:// or tcp:// URL, ADDRESS the host's address on the link")
        hosts[role] = Host(engine, address)
    missing = [r for r in ROLES if r not in hosts]
    if missing:
        raise LabError(f"LAB_HOSTS: no engine for {', '.join(missing)}: name every role "
                       "(one engine may hold several)")
    addresses: dict[str, str] = {}
    for role, host in hosts.items():
        if addresses.setdefault(host.engine, host.address) != host.address:
            raise LabError(f"LAB_HOSTS: {host.engine} is given two addresses ({addresses[host.engine]} and "
                           f"{host.address}): one engine, one host, one address")
    return hosts


def services_of(role: str, services: dict, targets: list[str]) -> list[str]:
    """The compose services a role runs: the databases; the paths of
    BENCH_TARGETS with the seed that fills their files volume and any
    upstream a path depends on; bench and the settings check."""
    if role == "db":
        return [s for s in DATABASES if s in services]
    if role == "loadgen":
        return list(LOADGEN)
    paths = ["seed"] + list(targets)
    for target in targets:  # nginx-cache's upstream runs beside it
        paths += [d for d in (services[target].get("depends_on") or {}) if d not in DATABASES and d not in paths]
    return paths


def target_ports(targets: list[str]) -> dict[str, int]:
    return {t: FIRST_PATH_PORT + i for i, t in enumerate(targets)}


def override(hosts: dict[str, Host], services: dict, targets: list[str]) -> dict[str, dict]:
    """{engine: compose override} for every engine of LAB_HOSTS: what it
    runs, published on its own link address only, the other engines'
    services reached by name."""
    ports = target_ports(targets)
    db = hosts["db"]
    by_engine: dict[str, dict] = {}
    for role in ROLES:
        host = hosts[role]
        plan = by_engine.setdefault(host.engine, {"host": host, "services": {}, "roles": []})
        plan["roles"].append(role)
        for service in services_of(role, services, targets):
            spec: dict = {}
            if role == "db":
                spec["ports"] = [f"{host.address}:{DATABASE_PORTS[service]}:{DATABASE_PORTS[service]}"]
            if role == "paths" and service in ports:
                spec["ports"] = [f"{host.address}:{ports[service]}:{PATH_PORT}"]
            if db.engine != host.engine and service not in DATABASES:
                spec["extra_hosts"] = [f"{name}:{db.address}" for name in DATABASES]
            if role == "loadgen" and service == "bench":
                paths = hosts["paths"]
                spec["environment"] = {"BENCH_TARGET_URLS": " ".join(
                    f"{t}=http://{paths.address}:{ports[t]}" if paths.engine != host.engine
                    else f"{t}=http://{t}:{PATH_PORT}" for t in targets)}
                spec["depends_on"] = {}  # what bench waits for runs on other engines: tools/hosts.py orders it
            plan["services"][service] = spec
        cadvisor = plan["services"].setdefault("cadvisor", {})
        cadvisor["ports"] = [f"{host.address}:{CADVISOR_PORT}:8080"]
    return {engine: {"services": plan["services"], "x-lab-host": {
        "engine": engine, "address": plan["host"].address, "roles": plan["roles"]}}
        for engine, plan in by_engine.items()}


def main() -> int:
    import os
    import subprocess
    try:
        hosts = parse_hosts(os.environ.get("LAB_HOSTS", ""))
        if not hosts:
            print("LAB_HOSTS is unset: the lab runs on this machine (make lab-local)")
            return 0
        env_file = os.environ.get("LAB_ENV_FILE", "local.env")
        config = json.loads(subprocess.run(["docker", "compose", "--env-file", env_file, "config", "--format",
                                            "json"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                                           check=True).stdout)
        targets = (os.environ.get("BENCH_TARGETS") or config["services"]["bench"]["environment"]["BENCH_TARGETS"])
        plans = override(hosts, config["services"], targets.split())
    except LabError as e:
        print(f"hosts: {e}", file=sys.stderr)
        return 2
    if "--plan" in sys.argv:
        for engine, plan in plans.items():
            print(f"{engine} ({plan['x-lab-host']['address']}, {' '.join(plan['x-lab-host']['roles'])}): "
                  f"{' '.join(s for s in plan['services'])}")
        return 0
    print("hosts: only --plan is built so far (issue 27)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
