"""Docker for tests: a few calls, and how the lab runs cAdvisor (read from
compose.yaml's cadvisor service)."""
import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

LOCAL_IMAGE = "gridfs-lab-local/cadvisor:v0.49.1"
BURNER_BASE_IMAGE = os.environ.get("BURNER_IMAGE", "gridfs-lab-local/debian:bookworm")
BURNER_CPUS = 0.5


def cadvisor_as_compose_runs_it() -> tuple[list[str], list[str]]:
    """(docker run options, command flags) of compose.yaml's cadvisor
    service, so the tests run it exactly as the lab does."""
    config = json.loads(subprocess.run(["docker", "compose", "config", "--format", "json"], cwd=REPO,
                                       check=True, capture_output=True, text=True, timeout=60).stdout)
    service = config["services"]["cadvisor"]
    options = [arg for cap in service["cap_add"] for arg in ("--cap-add", cap)]
    options += [arg for d in service["devices"] for arg in ("--device", f"{d['source']}:{d['target']}")]
    options += [arg for v in service["volumes"]
                for arg in ("-v", f"{v['source']}:{v['target']}{':ro' if v.get('read_only') else ''}")]
    return options, service["command"]


def docker_engine_answers() -> bool:
    try:
        return subprocess.run(["docker", "version", "--format", "{{.Server.Version}}"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def docker(*args: str, timeout: float = 120) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True,
                          timeout=timeout).stdout.strip()


def remove_container(name: str) -> None:
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
