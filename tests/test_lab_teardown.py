"""make overload and make resilience stopped by a signal (a CI job
cancelled, timeout(1), Ctrl-C, the terminal closed) take their compose
project down, as make ab does (tools/lab/lab_compose.py: stop_on_sigterm,
measure_then_finish; change.py's own in tests/test_change.py). The real
tools run, to the real signal; Docker is a stand-in on PATH that records
the commands it is given (the point is which ones) and answers `compose
config` with one path and its database. No Docker engine is reached:
DOCKER_HOST names no socket."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
