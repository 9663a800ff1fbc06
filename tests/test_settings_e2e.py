"""A bad .env value stops `docker compose up bench` before anything starts
(compose's `settings` service), on local images, with one line per bad
variable in the output."""
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gridfs-lab-settings-e2e"


def compose(*args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "compose", "-p", PROJECT, "--env-file", "local.env", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_bad_settings_stop_the_lab_before_anything_starts():
    # (a cpuset outside the machine Docker itself refuses when Compose creates
    # the containers, before any starts: "Requested CPUs are not available")
    env = {**os.environ, "NGINX_WORKERS": "1 2", "BENCH_ALLOW_NONCONFORMING": "2", "FILE_SET": "10x5KB-1KB"}
    try:
        up = compose("up", "--build", "--exit-code-from", "bench", "bench", env=env, timeout=1200)
        assert up.returncode != 0, (up.stdout + up.stderr)[-3000:]
        assert 'service "settings" didn\'t complete successfully' in up.stderr + up.stdout
        # the lines are the check's own output, where the README sends the user
        output = compose("logs", "--no-log-prefix", "settings", env=env, timeout=120).stdout
        assert "NGINX_WORKERS='1 2': expected one whole number from 1" in output, output
        assert "BENCH_ALLOW_NONCONFORMING='2'" in output
        assert "FILE_SET='10x5KB-1KB': the smallest size comes first" in output
        listed = subprocess.run(["docker", "ps", "-a",
                                 "--format", "{{.Label \"com.docker.compose.service\"}} {{.State}}",
                                 "--filter", f"label=com.docker.compose.project={PROJECT}"],
                                capture_output=True, text=True, timeout=60).stdout.splitlines()
        states = dict(line.split() for line in listed)
        assert states.pop("settings") == "exited"
        # Compose creates every container first; none but the check ever ran
        assert states and set(states.values()) == {"created"}, states
    finally:
        compose("down", "-v", "--remove-orphans", "-t", "2", env=env, timeout=300)
