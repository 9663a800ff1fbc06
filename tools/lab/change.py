#!/usr/bin/env python3
"""make ab SERVICE=<path> [one change to B]: did the change make the path
faster or slower? A twin of SERVICE (<SERVICE>-b) with the change runs
beside it in the same compose project (same core, memory limit, database
and files; compose `extends`), and bench times A and B in interleaved blocks
(bench/benchmark/change.py), then writes results/<run>/ab.md and ab.json.

The change, one of (environment variables, as make passes them):
  B_IMAGE=python:3.13-slim   the base image B is built from (its one build
                             argument; B_ARG=NAME where it has several)
  B_CONTEXT=DIR              B built from another folder (its Dockerfile as A's)
  B_REF=main                 B built from the lab at a git ref (a pull
                             request's service against main's)
  B_CPUS=0.45                a CPU quota on B (cores): a known change the
                             A/B is checked against
  B_ENV="GUNICORN_WORKERS=2" environment variables for B only (B_ENV=
                             "LAB_TEST_EXTRA_WORK=44": 44 units of fixed work
                             more per file request on the Python paths, the
                             other known change, test-only:
                             lab_http/extra_work.py)
None of them: an A/A run (B is A unchanged), to measure how often an
unchanged B gets a verdict on this machine. A_REF=REF builds A from the lab
at a git ref instead (the pull-request gate: A = the base branch's path, B =
this checkout's; tools/ci/change_gate.py).

AB_ENV_FILE (default local.env), AB_PROJECT (default gridfs-lab, the lab's
own project: its seeded volumes are reused), and every AB_* knob of .env.
While bench runs, this restarts both twins before each block when bench
asks (AB_RESTART_TWINS=every-block, the default here; bench has no Docker
socket: bench/benchmark/twins.py), and no other service. Its end, AB_TIMEOUT,
Ctrl-C, SIGTERM or SIGHUP: the project's containers are taken down (compose down).
It writes .lab/ab/compose.ab.yaml and prints the plain compose command that
runs the same A/B. Named change, not ab (ApacheBench here); `bench compare`
sets two separate runs side by side instead."""
import contextlib
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from lab_compose import (ROOT, LabError, compose_run, compose_services, ignore_stop_signals, results_base,
                         settings_in, stop_on_sigterm)
from bench.benchmark import twins  # bench's side of the restarts

WORK = ROOT / ".lab" / "ab"
CHANGES = ("B_IMAGE", "B_CONTEXT", "B_REF", "B_CPUS", "B_ENV")


def twin_name(service: str) -> str:
    return f"{service}-b"


def image_arg(service: str, build: dict, chosen: str) -> str:
    """The build argument B_IMAGE replaces: the service's only one, or B_ARG."""
    args = sorted((build or {}).get("args") or {})
    if chosen:
        if chosen not in args:
            raise LabError(f"B_ARG={chosen}: {service} has build arguments {', '.join(args) or 'none'}")
        return chosen
    if len(args) != 1:
        raise LabError(f"B_IMAGE: {service} has build arguments {', '.join(args) or 'none'}: "
                       "say which one B_IMAGE replaces with B_ARG=NAME")
    return args[0]


def image_to_be_had(image: str, timeout: float = 30.0) -> None:
    """B_IMAGE is on this engine, or can be pulled within `timeout`: else a
    clear error now, before any build or run."""
    try:
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=timeout).returncode == 0:
            return
        pulled = subprocess.run(["docker", "pull", image], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"B_IMAGE={image}: not on this engine and not pulled within {timeout:g} s") from None
    if pulled.returncode != 0:
        raise LabError(f"B_IMAGE={image}: not on this engine and docker pull failed: "
                       f"{(pulled.stderr or pulled.stdout).strip()[-300:]}")


def older_than_head(ref: str) -> bool:
    """B_REF names an ancestor of this checkout: then B is the older side
    and a "slower" verdict means this checkout is the faster one."""
    same = subprocess.run(["git", "rev-parse", ref, "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    if same.returncode != 0 or len(set(same.stdout.split())) < 2:
        return False
    return subprocess.run(["git", "merge-base", "--is-ancestor", ref, "HEAD"], cwd=ROOT, capture_output=True,
                          timeout=60).returncode == 0


def ref_checkout(ref: str) -> Path:
    """The lab at `ref`, checked out once per commit under .lab/ab/ (a git
    worktree: no second clone)."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, check=True).stdout.strip()
    except subprocess.CalledProcessError as e:
        raise LabError(f"B_REF={ref}: not a commit here ({e.stderr.strip()[-200:]})") from None
    tree = WORK / f"ref-{sha[:12]}"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, check=True)
    return tree


def twin(service: str, spec: dict, env: dict) -> tuple[dict, list[str]]:
    """The twin's compose service and the words that say what differs."""
    definition: dict = {"extends": {"file": str(ROOT / "compose.yaml"), "service": service}}
    changed = []
    build = spec.get("build") or {}
    if env.get("B_IMAGE"):
        if not build:
            raise LabError(f"B_IMAGE: {service} is not built by the lab; swap its image variable instead")
        arg = image_arg(service, build, env.get("B_ARG", ""))
        definition.setdefault("build", {}).setdefault("args", {})[arg] = env["B_IMAGE"]
        changed.append(f"{arg}={env['B_IMAGE']}")
    if env.get("B_CONTEXT") or env.get("B_REF"):
        if not build:
            raise LabError(f"B_CONTEXT/B_REF: {service} is not built by the lab")
        context = Path(build["context"])
        if env.get("B_REF"):
            context = ref_checkout(env["B_REF"]) / context.relative_to(ROOT)
            changed.append(f"built from the lab at {env['B_REF']}")
            if older_than_head(env["B_REF"]):
                print(f"[ab] WARNING: B_REF={env['B_REF']} is an ancestor of this checkout: B is the older code, "
                      "so \"B slower\" means this checkout is faster (A_REF=REF builds A from REF instead)",
                      file=sys.stderr, flush=True)
        else:
            context = Path(env["B_CONTEXT"]).resolve()
            changed.append(f"built from {env['B_CONTEXT']}")
        if not context.is_dir():
            raise LabError(f"B_CONTEXT/B_REF: {context} is not a folder")
        definition.setdefault("build", {})["context"] = str(context)
    if env.get("B_CPUS"):
        try:
            definition["cpus"] = float(env["B_CPUS"])
        except ValueError:
            definition["cpus"] = 0.0
        if not 0.01 <= definition["cpus"] <= 64:
            raise LabError(f"B_CPUS={env['B_CPUS']!r}: expected a CPU quota in cores, e.g. 0.8")
        changed.append(f"a CPU quota of {env['B_CPUS']} cores")
    if env.get("B_ENV"):
        pairs = dict(word.split("=", 1) for word in shlex.split(env["B_ENV"]) if "=" in word)
        if not pairs:
            raise LabError(f"B_ENV={env['B_ENV']!r}: expected NAME=value pairs")
        definition["environment"] = pairs
        changed += [f"{k}={v}" for k, v in pairs.items()]
    return definition, changed


def a_at_ref(service: str, spec: dict, ref: str) -> dict:
    """A's own build from the lab at `ref` (its twin still extends this
    checkout's compose.yaml, so B is built from here)."""
    build = spec.get("build") or {}
    if not build:
        raise LabError(f"A_REF: {service} is not built by the lab")
    context = ref_checkout(ref) / Path(build["context"]).relative_to(ROOT)
    if not context.is_dir():
        raise LabError(f"A_REF={ref}: {service}'s build folder {context.relative_to(WORK)} is not there")
    return {"build": {"context": str(context)}}


def override(service: str, definition: dict, a_definition: dict | None = None) -> str:
    """compose.ab.yaml: the twin, bench waiting for it, and A's own build
    when it comes from another ref. JSON is YAML."""
    doc = {"services": {twin_name(service): definition,
                        "bench": {"depends_on": {twin_name(service): {"condition": "service_started"}}}}}
    if a_definition:
        doc["services"][service] = a_definition
    return json.dumps(doc, indent=2) + "\n"


def targets_for(service: str, lab: dict, services: dict) -> list[str]:
    """What bench verifies: nginx-static (the reference every answer is
    judged against), A and B, and A's upstream, so its CPU is watched."""
    names = ["nginx-static", service, twin_name(service)]
    upstream = (lab.get("CACHE_UPSTREAM") or "").split(":")[0] if service.startswith("nginx-cache") else ""
    if upstream and upstream in services:
        names.append(upstream)
    return list(dict.fromkeys(names))


DOCKER_TIMEOUT_S = 60


class TwinRestarts:
    """Answers bench's restarts of the two twins (only those: bench names
    what to restart, and a name that is not A or B is refused) until
    stopped. docker restart on each container at once: a twin stops in
    0.1-0.8 s here (SIGTERM, then SIGKILL after 5 s) and starts in 0.2."""

    def __init__(self, base: list[str], env: dict, results: Path, allowed: list[str]):
        self.base, self.env, self.results, self.allowed = base, env, results, set(allowed)
        self.since = time.time()
        self.ids: dict[str, str] = {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self.serve, name="twin-restarts", daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *_):
        self.stopped.set()
        self.thread.join(timeout=DOCKER_TIMEOUT_S * 2)

    def serve(self) -> None:
        while not self.stopped.wait(twins.POLL_S):
            for asked in twins.pending(self.results, self.since):
                twins.answer(asked, self.restart)

    def container(self, service: str) -> str:
        if service not in self.ids:
            found = compose_run(self.base, ["ps", "-q", service], self.env, DOCKER_TIMEOUT_S,
                                f"finding {service}'s container").split()
            if len(found) != 1:
                raise LabError(f"{service}: {len(found)} containers running, expected one")
            self.ids[service] = found[0]
        return self.ids[service]

    def restart(self, services: list[str]) -> dict:
        refused = [s for s in services if s not in self.allowed]
        if refused or not services:
            raise LabError(f"restart of {' '.join(refused) or 'nothing'} refused: only "
                           f"{' and '.join(sorted(self.allowed))} are restarted")
        began = time.monotonic()
        ids = [self.container(s) for s in services]
        running = [subprocess.Popen(["docker", "restart", "-t", "5", i], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True) for i in ids]
        for service, p in zip(services, running):
            try:
                _, err = p.communicate(timeout=DOCKER_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                p.kill()
                raise LabError(f"{service}: docker restart gave no end within {DOCKER_TIMEOUT_S} s") from None
            if p.returncode != 0:
                raise LabError(f"{service}: docker restart exited {p.returncode}: {err.strip()[-300:]}")
        started = subprocess.run(["docker", "inspect", "-f", "{{.State.StartedAt}}", *ids], capture_output=True,
                                 text=True, timeout=DOCKER_TIMEOUT_S, check=True).stdout.split()
        return {"started_at": dict(zip(services, started)), "seconds": round(time.monotonic() - began, 2)}


def up_then_down(up: list[str], down: list[str], env: dict, timeout: float,
                 during: contextlib.AbstractContextManager = contextlib.nullcontext()) -> int:
    """Runs `up` attached (bench's plan and time left show as it goes) with
    `during` open, then `down` whatever happened: its end, the timeout
    (subprocess.TimeoutExpired, raised on), Ctrl-C, SIGTERM or SIGHUP
    (stop_on_sigterm); subprocess.run ends `up` first on either. The stop
    signals are ignored from `up`'s end: the `down` is not cut short."""
    try:
        try:
            with during:
                return subprocess.run(up, cwd=ROOT, env=env, timeout=timeout).returncode
        finally:
            ignore_stop_signals()
    finally:
        subprocess.run(down, cwd=ROOT, env=env, capture_output=True, timeout=300)


def main() -> int:
    stop_on_sigterm()
    env = dict(os.environ)
    service = env.get("SERVICE", "").strip()
    try:
        env_file = ROOT / env.get("AB_ENV_FILE", "local.env")
        if not env_file.exists():
            raise LabError(f"AB_ENV_FILE: {env_file} does not exist (make local-images writes local.env; "
                           "AB_ENV_FILE=.env runs official images)")
        lab = settings_in(env_file)
        print(f"[ab] images and settings from {env_file.name} (AB_ENV_FILE; "
              f"{'.env: official images' if env_file.name == 'local.env' else 'local.env: images built here'} "
              "otherwise), for A and B alike", flush=True)
        base = ["docker", "compose", "-p", env.get("AB_PROJECT", "gridfs-lab"), "--env-file", str(env_file)]
        if (os.cpu_count() or 1) < 4 and env_file.name != "local.env":
            base += ["--env-file", str(ROOT / "cpus-2.env")]  # as make lab does (local.env has the pins already)
        services = compose_services(base, env)
        paths = lab.get("BENCH_TARGETS", "").split()
        if service not in paths:
            raise LabError(f"SERVICE={service!r}: expected one of the serving paths in BENCH_TARGETS: "
                           f"{' '.join(paths)}")
        if env.get("B_IMAGE"):
            image_to_be_had(env["B_IMAGE"])
        definition, changed = twin(service, services[service], env)
        a_definition = a_at_ref(service, services[service], env["A_REF"]) if env.get("A_REF") else None
        if a_definition:
            changed.append(f"A built from the lab at {env['A_REF']}, B from this checkout")
        WORK.mkdir(parents=True, exist_ok=True)
        compose_file = WORK / "compose.ab.yaml"
        compose_file.write_text(override(service, definition, a_definition))
        base += ["-f", str(ROOT / "compose.yaml"), "-f", str(compose_file)]
        restart = env.get("AB_RESTART_TWINS") or "every-block"
        run_env = {**env, "AB_A": service, "AB_B": twin_name(service), "AB_KIND": "A/B" if changed else "A/A",
                   "AB_CHANGE": "; ".join(changed), "BENCH_TARGETS": " ".join(targets_for(service, lab, services)),
                   "AB_RESTART_TWINS": restart}
        owner = subprocess.run([str(ROOT / "tools" / "lab" / "results-owner.sh"), str(env_file)], cwd=ROOT, env=run_env,
                               capture_output=True, text=True, timeout=60)
        if owner.returncode != 0:
            raise LabError(f"RESULTS_OWNER: {owner.stderr.strip()[-300:]}")
        run_env["RESULTS_OWNER"] = owner.stdout.strip()
        print(f"[ab] {run_env['AB_KIND']} of {service}: B = {twin_name(service)}"
              f"{' with ' + '; '.join(changed) if changed else ' unchanged'}\n[ab] the same with plain compose: "
              + " ".join(shlex.quote(w) for w in base) + " up --build --exit-code-from bench bench "
              f"(with AB_A={service} AB_B={twin_name(service)} AB_KIND={run_env['AB_KIND']!r} "
              f"BENCH_TARGETS={run_env['BENCH_TARGETS']!r} in the environment; AB_RESTART_TWINS=off there, "
              "since nobody restarts the twins)", flush=True)
        compose_run(base, ["run", "--rm", "--build", "settings"], run_env, 600, "checking the settings")
    except (LabError, subprocess.SubprocessError, OSError, ValueError) as e:
        print(f"ab: error: {e}", file=sys.stderr)
        return 2
    try:
        # down: the containers go (the twin too: it is in this override), the
        # lab's seeded volumes stay for the next run; idle paths would be
        # noise for whatever runs next on the machine. The restarts stop first.
        return up_then_down(base + ["up", "--build", "--exit-code-from", "bench", "bench"], base + ["down", "-t", "5"],
                            run_env, float(env.get("AB_TIMEOUT", "3600")),
                            TwinRestarts(base, run_env, results_base(env, lab), [service, twin_name(service)]))
    except subprocess.TimeoutExpired:
        print(f"ab: error: no end within AB_TIMEOUT={env.get('AB_TIMEOUT', '3600')} s", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM or SIGHUP (stop_on_sigterm): the lab is down, nothing kept
        print(f"ab: stopped by {e}: the lab's containers are down; this run measured nothing", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
