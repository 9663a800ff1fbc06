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
bench told each path's URL (BENCH_TARGET_URLS). `--plan` prints it.

Closed by default: both databases take logins (user `lab`, passwords made
anew for each run), and are published on the link only when a role on
another engine reaches them. The passwords live in the run's env file,
.lab/hosts/PROJECT.logins.env (mode 0600, read by compose for the
override's ${...}), never in an override, a results folder or a log line.

A run stopped by SIGTERM, SIGINT or SIGHUP (lab_compose.stop_on_sigterm, as
make overload's) undoes what it made, last first: bench, when running, is
given SIGTERM and keeps what it measured (lab_compose.run_stopped_at), the
link's shaping is removed, every engine's project taken down; exit 130."""
import json
import os
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from lab_compose import (ROOT, STOPPED, LabError, Stopped, compose_run, ignore_stop_signals, run_stopped_at,
                         settings_in, stop_on_sigterm)

ROLES = ("loadgen", "paths", "db")
DATABASES = ("mongo", "postgres")
# the seed runs on the load generator's engine too: bench reads the files'
# manifest from its own files volume (the seed's bytes are deterministic, and
# a rerun against the databases writes nothing)
LOADGEN = ("settings", "seed", "bench")
DATABASE_PORTS = {"mongo": 27017, "postgres": 5432}
# Neither connects to a database: every other service of a role is a client.
NOT_CLIENTS = ("settings", "link", "cadvisor", *DATABASES)
DATABASE_USER = "lab"  # postgres's POSTGRES_USER in compose.yaml, and mongo's root user
# compose reads these from the run's env file (Split.logins), so the
# overrides name them and hold no password
PASSWORDS = {"mongo": "LAB_MONGO_PASSWORD", "postgres": "LAB_POSTGRES_PASSWORD"}
# The connection string's options for a login where the mongo image's label
# lab.mongo-auth-options says none: MongoDB's root user lives in admin.
MONGO_AUTH_OPTIONS = "authSource=admin"
PATH_PORT = 8080        # every serving path listens here inside its container
FIRST_PATH_PORT = 18080  # published on the paths host: one port per path, in BENCH_TARGETS order
CADVISOR_PORT = 18088    # each host's cAdvisor, for bench
LINK_PORT = 5201         # iperf3's, on the paths host: the link measured before timing
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
    upstream a path depends on; bench, the settings check and the seed."""
    if role == "db":
        return [s for s in DATABASES if s in services]
    if role == "loadgen":
        return list(LOADGEN)
    paths = ["seed"] + list(targets)
    for target in targets:  # nginx-cache's upstream runs beside it
        paths += [d for d in (services[target].get("depends_on") or {}) if d not in DATABASES and d not in paths]
    return paths + ["link"]  # the far end of the link's measurement


def target_ports(targets: list[str]) -> dict[str, int]:
    return {t: FIRST_PATH_PORT + i for i, t in enumerate(targets)}


def logins(mongo_auth_options: str = MONGO_AUTH_OPTIONS) -> dict[str, dict]:
    """The environment that closes the databases and lets their clients in:
    the users each database image creates at its first start (the official
    images' own variables; the local stand-ins take the same), and the
    connection strings every client is given in place of compose.yaml's."""
    mongo, postgres = (f"${{{PASSWORDS[d]}}}" for d in DATABASES)
    return {
        "mongo": {"MONGO_INITDB_ROOT_USERNAME": DATABASE_USER, "MONGO_INITDB_ROOT_PASSWORD": mongo},
        "postgres": {"POSTGRES_PASSWORD": postgres, "POSTGRES_HOST_AUTH_METHOD": "scram-sha-256"},
        "client": {"MONGO_URI": f"mongodb://{DATABASE_USER}:{mongo}@mongo:{DATABASE_PORTS['mongo']}/?"
                                f"{mongo_auth_options}",
                   "POSTGRES_URL": f"postgresql://{DATABASE_USER}:{postgres}@postgres:{DATABASE_PORTS['postgres']}/lab"},
    }


def override(hosts: dict[str, Host], services: dict, targets: list[str],
             mongo_auth_options: str = MONGO_AUTH_OPTIONS) -> dict[str, dict]:
    """{engine: compose override} for every engine of LAB_HOSTS: what it
    runs, published on its own link address only, the other engines'
    services reached by name, the databases behind logins."""
    ports = target_ports(targets)
    env = logins(mongo_auth_options)
    db = hosts["db"]
    by_engine: dict[str, dict] = {}
    for role in ROLES:
        host = hosts[role]
        plan = by_engine.setdefault(host.engine, {"host": host, "services": {}, "roles": []})
        plan["roles"].append(role)
        for service in services_of(role, services, targets):
            spec: dict = plan["services"].get(service, {})
            if service in DATABASES:
                spec["environment"] = dict(env[service])
            elif service not in NOT_CLIENTS:
                spec["environment"] = {**spec.get("environment", {}), **env["client"]}
            if role == "paths" and service in ports:
                spec["ports"] = [f"{host.address}:{ports[service]}:{PATH_PORT}"]
            if service == "link":
                spec["ports"] = [f"{host.address}:{LINK_PORT}:{LINK_PORT}"]
            if db.engine != host.engine and service not in DATABASES:
                spec["extra_hosts"] = [f"{name}:{db.address}" for name in DATABASES]
            if role == "loadgen" and service == "bench":
                paths = hosts["paths"]
                spec["environment"] = {"BENCH_TARGET_URLS": " ".join(
                    f"{t}=http://{paths.address}:{ports[t]}" if paths.engine != host.engine
                    else f"{t}=http://{t}:{PATH_PORT}" for t in targets),
                    "CADVISOR_URL": cadvisor_urls(hosts), **spec["environment"]}
                if paths.engine != host.engine:
                    spec["environment"]["BENCH_LINK"] = f"{paths.address}:{LINK_PORT}"
            plan["services"][service] = spec
        cadvisor = plan["services"].setdefault("cadvisor", {})
        if host.engine != hosts["loadgen"].engine:  # bench reads its own host's by name
            cadvisor["ports"] = [f"{host.address}:{CADVISOR_PORT}:8080"]
    # the databases on the link only for clients on another engine
    if any(engine != db.engine and set(plan["services"]) - set(NOT_CLIENTS) for engine, plan in by_engine.items()):
        for service in DATABASES:
            if service in by_engine[db.engine]["services"]:
                by_engine[db.engine]["services"][service]["ports"] = [
                    f"{db.address}:{DATABASE_PORTS[service]}:{DATABASE_PORTS[service]}"]
    return {engine: {"services": plan["services"], "x-lab-host": {
        "engine": engine, "address": plan["host"].address, "roles": plan["roles"]}}
        for engine, plan in by_engine.items()}


def cadvisor_urls(hosts: dict[str, Host]) -> str:
    """CADVISOR_URL for bench: every engine's cAdvisor, named by its host's
    address, bench's own first (reached by name, the others on the link)."""
    here = hosts["loadgen"]
    others = {h.engine: h for h in hosts.values() if h.engine != here.engine}
    return " ".join([f"{here.address}=http://cadvisor:8080",
                     *(f"{h.address}=http://{h.address}:{CADVISOR_PORT}" for h in others.values())])


def cadvisor_docker(engine: str) -> str | None:
    """The engine's socket as cAdvisor sees it (compose mounts /var/run), for
    an engine on a socket of its own here; None: the default socket."""
    if not engine.startswith("unix://"):
        return None  # a context or a remote engine: that host's /var/run/docker.sock
    path = engine.removeprefix("unix://")
    for inside in ("/var/run/", "/run/"):
        if path.startswith(inside):
            return f"unix:///var/run/{path.removeprefix(inside)}"
    raise LabError(f"LAB_HOSTS: {engine}: cAdvisor reads an engine's socket under /var/run only")


RATE = re.compile(r"^\d+(?:\.\d+)?[kmg]?bit$")
DELAY = re.compile(r"^\d+(?:\.\d+)?(?:us|ms|s)$")
LOSS = re.compile(r"^\d+(?:\.\d+)?%$")


@dataclass(frozen=True)
class Shaping:
    """LINK_RATE, LINK_DELAY, LINK_LOSS: a LAN or a WAN between the hosts.
    The rate holds on both hosts' egress toward each other (answers and
    requests alike); delay and loss on the load generator's side, as netem
    adds them."""
    rate: str = ""
    delay: str = ""
    loss: str = ""

    def __bool__(self) -> bool:
        return bool(self.rate or self.delay or self.loss)

    def qdisc(self, loadgen_side: bool) -> list[str] | None:
        """tc's qdisc words for one side; None: that side is not shaped."""
        if loadgen_side and (self.delay or self.loss):
            return ["netem", *(["delay", self.delay] if self.delay else []),
                    *(["loss", self.loss] if self.loss else []), *(["rate", self.rate] if self.rate else [])]
        if not self.rate:
            return None
        # tbf's bucket must hold a tick's worth of the rate (HZ may be 250)
        burst = max(64 * 1024, int(bits_per_second(self.rate) / 8 / 250))
        return ["tbf", "rate", self.rate, "burst", str(burst), "latency", "50ms"]

    def words(self) -> str:
        return " ".join(f"{k}={v}" for k, v in (("rate", self.rate), ("delay", self.delay), ("loss", self.loss)) if v)


def bits_per_second(rate: str) -> float:
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", rate).groups()
    return float(number) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[unit]


def shaping_of(env: dict) -> Shaping:
    found = {}
    for name, pattern, example in (("LINK_RATE", RATE, "1gbit or 100mbit"), ("LINK_DELAY", DELAY, "10ms"),
                                   ("LINK_LOSS", LOSS, "0.1%")):
        value = env.get(name, "").strip()
        if value and not pattern.match(value):
            raise LabError(f"{name}={value!r}: expected a value such as {example}")
        found[name.removeprefix("LINK_").lower()] = value
    return Shaping(**found)


def images_of(services: dict, names: list[str], project: str) -> list[str]:
    """The images an engine needs for these services: each one's `image`,
    or the name Compose gives what it builds (PROJECT-SERVICE)."""
    return sorted({services[n].get("image") or f"{project}-{n}" for n in names})


class Split:
    """One run of the lab across the engines of LAB_HOSTS."""

    def __init__(self, hosts: dict[str, Host], env: dict, env_file: Path, project: str):
        self.hosts, self.env, self.env_file, self.project = hosts, env, env_file, project
        # the hosts profile: the link service, which a one-machine run has no use for
        self.local = ["docker", "compose", "-p", project, "--env-file", str(env_file), "--profile", "hosts"]
        self.config = json.loads(compose_run(self.local, ["config", "--format", "json"], env, 60,
                                             "reading compose.yaml"))["services"]
        self.targets = (env.get("BENCH_TARGETS") or settings_in(env_file).get("BENCH_TARGETS", "")).split()
        self.plans = override(hosts, self.config, self.targets, mongo_auth_options(self.config["mongo"]["image"]))
        for engine in self.plans:
            cadvisor_docker(engine)  # an engine cAdvisor cannot watch is named before anything starts
        WORK.mkdir(parents=True, exist_ok=True)
        self.logins = WORK / f"{project}.logins.env"  # written by run(), not by --plan
        self.compose: dict[str, list[str]] = {}
        for engine, plan in self.plans.items():
            host = Host(engine, plan["x-lab-host"]["address"])
            path = WORK / f"{host.name}.yaml"
            path.write_text(json.dumps({"services": plan["services"]}, indent=1))  # JSON is YAML
            self.compose[engine] = ["docker", *host.docker_args, "compose", "-p", project, "--env-file",
                                    str(env_file), "--env-file", str(self.logins), "--profile", "hosts",
                                    "-f", str(ROOT / "compose.yaml"), "-f", str(path)]

    def env_of(self, engine: str) -> dict:
        """The environment of compose on one engine: its cAdvisor watches that engine."""
        socket = cadvisor_docker(engine)
        return {**self.env, "CADVISOR_DOCKER": socket} if socket else self.env

    def on(self, role: str, args: list[str], timeout: float, what: str) -> str:
        engine = self.hosts[role].engine
        return compose_run(self.compose[engine], args, self.env_of(engine), timeout, f"{what} on {engine}")

    def ship(self) -> None:
        """Builds here, then sends every engine but this one the images its
        services run (docker save | docker load: no registry needed)."""
        built = [n for n in self.config if self.config[n].get("build")]
        compose_run(self.local, ["build", *built], self.env, 3600, "building the lab's images")
        for engine, plan in self.plans.items():
            if engine == LOCAL_ENGINE:
                continue
            # the load generator's host shapes the link from the lab's own image too
            extra = ["link"] if "loadgen" in plan["x-lab-host"]["roles"] else []
            images = images_of(self.config, list(plan["services"]) + extra, self.project)
            host = Host(engine, plan["x-lab-host"]["address"])
            print(f"[hosts] {engine}: shipping {len(images)} images", flush=True)
            saved = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE)
            try:
                loaded = subprocess.run(["docker", *host.docker_args, "load"], stdin=saved.stdout,
                                        capture_output=True, text=True, timeout=1800)
                saved.wait(timeout=60)
            except BaseException:  # a stop signal or a timeout: the save ends with the load, not later
                saved.kill()
                saved.wait()
                raise
            if saved.returncode or loaded.returncode:
                raise LabError(f"shipping images to {engine}: {loaded.stderr.strip()[-400:]}")

    def shape(self, shaping: Shaping, undo: bool = False) -> None:
        """tc on the load generator's and the paths' hosts, each on its
        interface toward the other, from a one-shot container with the host's
        network and NET_ADMIN alone (the lab's own image: iproute2)."""
        ends = [(self.hosts["loadgen"], self.hosts["paths"], True), (self.hosts["paths"], self.hosts["loadgen"], False)]
        for here, there, loadgen_side in ends:
            words = shaping.qdisc(loadgen_side)
            if words is None:
                continue
            tc = "tc qdisc del dev \"$dev\" root" if undo else f"tc qdisc replace dev \"$dev\" root {' '.join(words)}"
            script = (f"dev=$(ip -o route get {there.address} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p') && "
                      f"[ -n \"$dev\" ] && {tc}")
            done = subprocess.run(["docker", *here.docker_args, "run", "--rm", "--network", "host", "--cap-drop", "ALL",
                                   "--cap-add", "NET_ADMIN", "--user", "0", "--entrypoint", "sh",
                                   f"{self.project}-link", "-c", script],
                                  capture_output=True, text=True, timeout=120)
            if done.returncode != 0 and not undo:
                why = done.stderr.strip()[-300:]
                if "netem" in words and "qdisc" in why.lower():
                    why += " (LINK_DELAY and LINK_LOSS need the kernel's sch_netem)"
                raise LabError(f"shaping the link on {here.engine} ({shaping.words()}): {why}")

    def run(self) -> int:
        """Databases, then the seed and the paths, then bench, each on its
        engine; bench's exit code. Everything is taken down after, a stop
        signal's KeyboardInterrupt or Stopped (bench stopped, its results
        kept) raised on after that."""
        shaping = shaping_of(self.env)
        apart = self.hosts["loadgen"].engine != self.hosts["paths"].engine
        if shaping and not apart:
            raise LabError(f"LINK_RATE, LINK_DELAY, LINK_LOSS ({shaping.words()}) shape the link between the load "
                           "generator's host and the paths': here both are on one engine")
        write_logins(self.logins)
        shaped = False
        try:
            self.down()  # what an interrupted run left: a database made with other passwords
            self.on("loadgen", ["run", "--rm", "--no-deps", "settings"], 600, "checking the settings")
            self.on("db", ["up", "-d", "--no-deps", *services_of("db", self.config, self.targets), "cadvisor"],
                    600, "starting the databases")
            self.on("paths", ["run", "--rm", "--no-deps", "seed"], 3600, "seeding the stores")
            paths = [s for s in services_of("paths", self.config, self.targets)
                     if s != "seed" and (s != "link" or apart)]  # no link to measure on one engine
            self.on("paths", ["up", "-d", "--no-deps", *paths, "cadvisor"], 600, "starting the paths")
            if apart:
                self.on("loadgen", ["run", "--rm", "--no-deps", "seed"], 3600, "writing the files bench reads")
            if shaping:
                print(f"[hosts] the link shaped: {shaping.words()}", flush=True)
                shaped = True  # before: a stop signal halfway through leaves one side shaped
                self.shape(shaping)
            self.on("loadgen", ["up", "-d", "--no-deps", "cadvisor"], 600, "starting cAdvisor")
            here = self.hosts["loadgen"].engine
            # bench past HOSTS_TIMEOUT, or this tool stopped, gets SIGTERM (compose run passes it on): what it
            # measured is written before the project goes down
            ended = run_stopped_at(self.compose[here] + ["run", "--rm", "--no-deps", "bench"],
                                   float(self.env.get("HOSTS_TIMEOUT", "7200")), cwd=ROOT, env=self.env_of(here))
            if isinstance(ended, str):
                raise LabError(f"bench: {ended} (HOSTS_TIMEOUT)")
            return ended
        finally:
            ignore_stop_signals()  # the teardown from here: a signal now would leave a project up
            if shaped:
                try:
                    self.shape(shaping, undo=True)
                except (subprocess.SubprocessError, OSError) as e:  # the projects go down all the same
                    print(f"hosts: warning: unshaping the link: {e}", file=sys.stderr)
            self.down()

    def down(self) -> None:
        """The run's containers and volumes removed from every engine, the
        load generator's first (the engines in ROLES order: the reverse of
        the start's); a failure on one is a warning, the others are still
        taken down."""
        for engine, command in self.compose.items():
            try:
                subprocess.run(command + ["down", "-v", "-t", "2"], cwd=ROOT, env=self.env_of(engine),
                               capture_output=True, timeout=300)
            except (subprocess.SubprocessError, OSError) as e:
                print(f"hosts: warning: taking the project down on {engine}: {e}", file=sys.stderr)


def mongo_auth_options(image: str) -> str:
    """The connection string's options for a login to this mongo image: its
    label lab.mongo-auth-options (the FerretDB stand-in's PLAIN), else
    MongoDB's. The image is here: every engine's are shipped from here."""
    found = subprocess.run(["docker", "image", "inspect", "--format",
                            '{{ index .Config.Labels "lab.mongo-auth-options" }}', image],
                           capture_output=True, text=True, timeout=60)
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else MONGO_AUTH_OPTIONS


def write_logins(path: Path) -> None:
    """The run's env file: a new password for each database, readable by
    this user alone."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write("# make lab-hosts: the databases' passwords for this run (tools/lab/hosts.py), made anew each run\n")
        for variable in PASSWORDS.values():
            out.write(f"{variable}={secrets.token_urlsafe(24)}\n")


LOCAL_ENGINE = "default"  # this machine's engine: the images are built there
WORK = ROOT / ".lab" / "hosts"


def main() -> int:
    env = dict(os.environ)
    stop_on_sigterm()  # SIGTERM and SIGHUP take Ctrl-C's way: Split.run's teardown runs
    try:
        hosts = parse_hosts(env.get("LAB_HOSTS", ""))
        if not hosts:
            print("LAB_HOSTS is unset: the lab runs on this machine (make lab-local)")
            return 0
        env_file = ROOT / env.get("HOSTS_ENV_FILE", "local.env")
        split = Split(hosts, env, env_file, env.get("HOSTS_PROJECT", "gridfs-lab-hosts"))
        for engine, plan in split.plans.items():
            print(f"[hosts] {engine} ({plan['x-lab-host']['address']}, {' '.join(plan['x-lab-host']['roles'])}): "
                  f"{' '.join(plan['services'])}", flush=True)
        if "--plan" in sys.argv:
            return 0
        owner = subprocess.run([str(ROOT / "tools" / "lab" / "results-owner.sh"), str(env_file)], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=60)
        if owner.returncode != 0:
            raise LabError(f"RESULTS_OWNER: {owner.stderr.strip()[-300:]}")
        env["RESULTS_OWNER"] = owner.stdout.strip()
        split.ship()
        return split.run()
    except (LabError, subprocess.SubprocessError, OSError, ValueError) as e:
        print(f"hosts: error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Stopped) as e:  # Ctrl-C, SIGTERM or SIGHUP; Stopped: bench's, its results kept
        print(f"hosts: stopped by {e}; the link unshaped, every engine's project down", file=sys.stderr)
        return STOPPED


if __name__ == "__main__":
    sys.exit(main())
