"""make overload, make resilience and make lab-hosts stopped by a signal (a
CI job cancelled, timeout(1), Ctrl-C, the terminal closed) take their
compose projects down, as make ab does (tools/lab/lab_compose.py:
stop_on_sigterm, measure_then_finish, run_stopped_at; change.py's own in
tests/test_change.py); make lab-hosts unshapes the link first. The real
tools run, to the real signal; Docker is a stand-in on PATH that records
the commands it is given (the point is which ones) and answers `compose
config` with one path and its database. No Docker engine is reached:
DOCKER_HOST names no socket, and the second engine of LAB_HOSTS is a socket
path that does not exist (docker's stand-in is all that is given it)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hosts import WORK, parse_hosts
from lab_compose import heard_stop_signals

REPO = Path(__file__).resolve().parent.parent

SERVICES = {"services": {"flask": {"labels": {"lab.database": "mongo"}}, "mongo": {}}}
# `docker compose ... config` answers SERVICES; `build` (the tools' first step with the project) stays
# until it is killed, its pid kept; anything else succeeds at once. Every call is recorded, one a line.
DOCKER = """#!/bin/sh
echo "$*" >> "{calls}"
case " $* " in
  *" config "*) cat "{services}" ;;
  *" build "*) echo $$ > "{building}"; exec sleep 60 ;;
esac
exit 0
"""


def running(pid: int) -> bool:
    """Not ended, or ended and reaped (a zombie left to an init that does not reap counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def default_sighup():
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as in a terminal, whatever ran pytest (nohup: ignored)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize("tool, prefix", [("overload", "OVERLOAD"), ("resilience", "RESILIENCE")])
def test_a_stop_signal_takes_the_tools_project_down(tmp_path, tool, prefix, signum):
    bin_dir, results = tmp_path / "bin", tmp_path / "results"
    calls, building, out = tmp_path / "calls", tmp_path / "building", tmp_path / "out"
    (tmp_path / "services.json").write_text(json.dumps(SERVICES))
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(DOCKER.format(calls=calls, services=tmp_path / "services.json", building=building))
    docker.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DOCKER_HOST": "unix:///nonexistent",
           "PYTHONPATH": str(REPO / "loadgen"), "RESULTS_DIR": str(results), f"{prefix}_ENV_FILE": ".env",
           "BENCH_TARGETS": "flask", "FILE_SIZES": "1KB"}
    with out.open("w") as stdout:  # a file, not a pipe: a child left running would hold a pipe open
        run = subprocess.Popen([sys.executable, str(REPO / "tools" / "lab" / f"{tool}.py")], cwd=REPO, env=env,
                               stdout=stdout, stderr=subprocess.STDOUT, preexec_fn=default_sighup)
    build = None
    try:
        deadline = time.monotonic() + 30
        while not (building.exists() and building.read_text().strip()) and run.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert building.exists(), out.read_text()
        build = int(building.read_text())
        run.send_signal(signum)
        assert run.wait(timeout=60) == 130, out.read_text()
        name = signal.Signals(signum).name
        # compose -p PROJECT --env-file FILE COMMAND ...: the project and the command
        commands = [" ".join(words[:3] + words[5:6]) for words in map(str.split, calls.read_text().splitlines())]
        project = f"compose -p gridfs-lab-{tool}"
        assert commands == [f"{project} config", f"{project} build", f"{project} down"], calls.read_text()
        assert calls.read_text().splitlines()[-1].endswith(" down -v --remove-orphans")
        assert not running(build)  # the step under way ended with the run, not left behind
        build = None
        printed = out.read_text()
        assert f"{tool}: stopped by {name}: taking the project down" in printed
        kept = json.loads(next(results.glob(f"{tool}-*/results.json")).read_text())
        assert kept["finished"] and [f["error"] for f in kept["failed"]] == [f"stopped by {name}"]
    finally:
        run.kill()
        if build is not None and running(build):
            os.kill(build, signal.SIGKILL)


def test_sighup_ignored_by_nohup_stays_ignored():
    """nohup's: a tool meant to outlive its terminal; SIGTERM and SIGINT are heard whatever came before."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert heard_stop_signals() == (signal.SIGTERM, signal.SIGINT)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        assert heard_stop_signals() == (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
    finally:
        signal.signal(signal.SIGHUP, before)


# make lab-hosts: the loadgen role on this engine (a context), the paths and the databases on another (a socket)
HERE, THERE = "default", "unix:///run/lab-teardown-test.sock"
LAB_HOSTS = f"loadgen={HERE}@192.0.2.1 paths={THERE}@192.0.2.2 db={THERE}@192.0.2.2"
HOSTS_PROJECT = "gridfs-lab-hosts-teardown-test"
HOSTS_SERVICES = {"services": {
    **{name: {"build": {"context": name}} for name in ("settings", "seed", "bench", "link", "flask")},
    "mongo": {"image": "mongo"}, "postgres": {"image": "postgres"},
    "cadvisor": {"image": "cadvisor"}}}
# As DOCKER, but the step `block` matches stays until it is ended, its pid kept (`until`: how it ends).
HOSTS_DOCKER = """#!/bin/sh
echo "$*" >> "{calls}"
case " $* " in
  *" config "*) cat "{services}" ;;
  *"{block}"*) echo $$ > "{blocking}"; {until} ;;
esac
exit 0
"""
# The steps stopped: the paths starting (a compose step: killed), and bench timing, which ends on SIGTERM as
# `docker compose run bench` does when it passes the signal on to bench (which writes what it measured), saying so.
PATHS_UP, BENCH = " up -d --no-deps flask ", " run --rm --no-deps bench "
UNTIL = {PATHS_UP: "exec sleep 60",
         BENCH: """trap 'echo "SIGTERM: results written" >> "{calls}"; kill $!; exit 1' TERM; sleep 60 & wait $!"""}


def hosts_step(line: str) -> str:
    """A recorded docker call as the engine it went to and what it did
    there: a compose command (the words after the override's -f), or the
    link's tc."""
    words = line.split()
    engine = words[1] if words[0] in ("--context", "-H") else "local"
    if "compose" in words:
        return f"{engine} compose {' '.join(words[len(words) - words[::-1].index('-f') + 1:])}"
    tc = next((command for command in ("tc qdisc del", "tc qdisc replace") if command in line), line)
    return f"{engine} {tc}"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
@pytest.mark.parametrize("block", [PATHS_UP, BENCH], ids=["paths-up", "bench"])
def test_a_stop_signal_takes_every_hosts_project_down_and_unshapes_the_link(tmp_path, block, signum):
    bin_dir, calls, blocking, out = tmp_path / "bin", tmp_path / "calls", tmp_path / "blocking", tmp_path / "out"
    (tmp_path / "services.json").write_text(json.dumps(HOSTS_SERVICES))
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(HOSTS_DOCKER.format(calls=calls, services=tmp_path / "services.json", block=block,
                                          blocking=blocking, until=UNTIL[block].format(calls=calls)))
    docker.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DOCKER_HOST": "unix:///nonexistent",
           "PYTHONPATH": str(REPO / "loadgen"), "RESULTS_DIR": str(tmp_path / "results"), "RESULTS_OWNER": "1000:1000",
           "LAB_HOSTS": LAB_HOSTS, "HOSTS_PROJECT": HOSTS_PROJECT, "HOSTS_ENV_FILE": ".env", "BENCH_TARGETS": "flask",
           "LINK_RATE": "100mbit"}
    with out.open("w") as stdout:  # a file, not a pipe: a child left running would hold a pipe open
        run = subprocess.Popen([sys.executable, str(REPO / "tools" / "lab" / "hosts.py")], cwd=REPO, env=env,
                               stdout=stdout, stderr=subprocess.STDOUT, preexec_fn=default_sighup)
    step = None
    try:
        deadline = time.monotonic() + 30
        while not (blocking.exists() and blocking.read_text().strip()) and run.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert blocking.exists(), out.read_text()
        step = int(blocking.read_text())
        run.send_signal(signum)
        assert run.wait(timeout=60) == 130, out.read_text()
        lines = calls.read_text().splitlines()
        stopped_at = next(i for i, line in enumerate(lines) if block in f" {line} ")
        after = [line if line.startswith("SIGTERM") else hosts_step(line) for line in lines[stopped_at + 1:]]
        down = [f"{HERE} compose down -v -t 2", f"{THERE} compose down -v -t 2"]
        if block == BENCH:  # bench keeps what it measured, then the link is unshaped, then the projects go
            assert after == ["SIGTERM: results written", f"{HERE} tc qdisc del", f"{THERE} tc qdisc del", *down], lines
        else:  # the link not shaped yet: nothing to undo there
            assert after == down, lines
            assert not any("tc qdisc" in line for line in lines)
        assert not running(step)  # the step under way ended with the run, not left behind
        step = None
        assert f"hosts: stopped by {signal.Signals(signum).name}" in out.read_text()
    finally:
        run.kill()
        if step is not None and running(step):
            os.kill(step, signal.SIGKILL)
        (WORK / f"{HOSTS_PROJECT}.logins.env").unlink(missing_ok=True)  # the run's logins and overrides
        for host in parse_hosts(LAB_HOSTS).values():
            (WORK / f"{host.name}.yaml").unlink(missing_ok=True)
