"""Least privilege, read from what Docker is given (`docker compose config`,
for the official and the local images) and from what it ran (`docker
inspect`, in the compose end-to-end test): every container the lab builds
runs as a user other than root, with no capabilities, no privilege gained
through setuid and a read-only root filesystem; a container that runs as
root, or adds a capability, says why in its `lab.root` label."""
import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab  # docker compose config, on local.env too

REPO = Path(__file__).resolve().parent.parent
ROOT_REASON = "lab.root"  # compose label: why this container keeps root


def compose_config(*env_files: str) -> dict:
    args = [arg for f in env_files for arg in ("--env-file", f)]
    p = subprocess.run(["docker", "compose", *args, "config", "--format", "json"], cwd=REPO, capture_output=True,
                       text=True, timeout=60, check=True)
    return json.loads(p.stdout)["services"]


def is_root(user: str | None) -> bool:
    """Docker's `user` (name or uid, then an optional group): unset is the
    image's, which is root unless the image says otherwise."""
    name = (user or "").split(":")[0]
    return name in ("", "root", "0")


def dockerfile_user(service: dict) -> str | None:
    """The USER a built service's Dockerfile ends with (None: no USER, root)."""
    build = service["build"]
    dockerfile = Path(build["context"]) / build.get("dockerfile", "Dockerfile")
    users = [line.split(None, 1)[1].strip() for line in dockerfile.read_text().splitlines()
             if line.startswith("USER ")]
    return users[-1] if users else None


def problems(name: str, service: dict) -> list[str]:
    """What keeps `service` from least privilege without a documented reason."""
    found = ["privileged"] if service.get("privileged") else []  # never, reason or not
    if not (service.get("labels") or {}).get(ROOT_REASON, "").strip():
        found += privileges(service)
    return [f"{name}: {p}" for p in found]


def privileges(service: dict) -> list[str]:
    user = service.get("user") or (dockerfile_user(service) if "build" in service else None)
    found = [f"runs as root (user {user!r})"] if is_root(user) else []
    if service.get("cap_add"):
        found.append(f"adds {service['cap_add']}")
    if "build" in service:  # the lab's own images: nothing more than they need
        if service.get("cap_drop") != ["ALL"]:
            found.append(f"keeps Docker's default capabilities (cap_drop {service.get('cap_drop')})")
        if "no-new-privileges:true" not in (service.get("security_opt") or []):
            found.append("may gain privileges through setuid (no no-new-privileges:true)")
        if not service.get("read_only"):
            found.append("has a writable root filesystem")
    return found


@pytest.mark.parametrize("env_files", [[".env"], ["local.env"]], ids=["official images", "local images"])
def test_every_service_is_unprivileged_or_says_why(env_files):
    if not (REPO / env_files[0]).exists():
        pytest.fail(f"{env_files[0]} is missing: run `make local-images` (make test does)")
    services = compose_config(*env_files)
    assert {"settings", "seed", "bench", "nginx-static", "nginx-gridfs", "flask", "node"} <= set(services)
    assert [p for name, s in services.items() for p in problems(name, s)] == []
    # the exceptions are these, each for a reason it states
    rooted = {name for name, s in services.items() if (s.get("labels") or {}).get(ROOT_REASON)}
    assert rooted == {"gridfs-fuse", "mongo", "postgres", "cadvisor"}
    assert services["gridfs-fuse"]["cap_add"] == ["SYS_ADMIN", "SETUID", "SETGID", "KILL"]
    assert services["gridfs-fuse"]["cap_drop"] == ["ALL"] and services["gridfs-fuse"]["read_only"]


def test_the_check_fails_on_a_root_service_without_a_reason():
    services = compose_config(".env")
    node = {**services["node"], "user": "0"}
    assert problems("node", node) == ["node: runs as root (user '0')"]
    flask = {k: v for k, v in services["flask"].items() if k not in ("read_only", "cap_drop")}
    assert problems("flask", flask) == ["flask: keeps Docker's default capabilities (cap_drop None)",
                                        "flask: has a writable root filesystem"]
    mongo = {**services["mongo"], "labels": {}}
    assert problems("mongo", mongo) == ["mongo: runs as root (user None)"]
    cadvisor = {**services["cadvisor"], "labels": {}}
    assert "cadvisor: adds ['SYS_ADMIN', 'SYS_PTRACE', 'DAC_READ_SEARCH']" in problems("cadvisor", cadvisor)
    fuse = {**services["gridfs-fuse"], "privileged": True}
    assert problems("gridfs-fuse", fuse) == ["gridfs-fuse: privileged"]


def inspected_problems(container: dict) -> list[str]:
    """The same rules on what a container ran with (`docker inspect`)."""
    config, host = container["Config"], container["HostConfig"]
    name = config["Labels"].get("com.docker.compose.service", container["Name"])
    found = []
    if host.get("Privileged"):
        found.append("privileged")
    if not config["Labels"].get(ROOT_REASON):
        if is_root(config.get("User")):
            found.append(f"ran as root (user {config.get('User')!r})")
        if host.get("CapAdd"):
            found.append(f"had {host['CapAdd']}")
        if host.get("CapDrop") != ["ALL"]:
            found.append(f"kept Docker's default capabilities (CapDrop {host.get('CapDrop')})")
        if not host.get("ReadonlyRootfs"):
            found.append("had a writable root filesystem")
        if "no-new-privileges:true" not in (host.get("SecurityOpt") or []):
            found.append("could gain privileges through setuid")
    return [f"{name}: {p}" for p in found]
