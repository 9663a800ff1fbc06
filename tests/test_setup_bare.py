"""tools/install/setup.sh on a bare Debian bookworm (issue 40): the steps that need
no Docker engine (the Debian packages, Go, .venv with bench's packages, and
FerretDB built with that Go) run in a fresh container of the lab's own
local Debian image, which holds nothing but debootstrap's minbase: no Go,
no python3-venv, no curl. So a step that calls a tool the set-up does not
install fails here. The checkout goes in as its tracked files. Downloads
are served from this machine's caches (apt's archives, Go's module cache,
pip's), mounted into the container: what is installed and built, and how,
is a bare machine's; only the bytes come from nearer."""
import re
import subprocess
from pathlib import Path

import pytest

from lab_compose import settings_in

pytestmark = pytest.mark.lab  # Docker, with no fixture that says so

REPO = Path(__file__).resolve().parent.parent
CACHES = {"/var/cache/apt/archives": "/var/cache/apt/archives", "/root/go/pkg/mod": "/root/go/pkg/mod",
          "/root/.cache/pip": "/root/.cache/pip", "/root/.cache/go-build": "/root/.cache/go-build"}
SET_UP = """set -euo pipefail
mkdir /lab && tar -x -C /lab && cd /lab
for tool in go curl; do ! command -v $tool || { echo "the image is not bare: $tool is here"; exit 3; }; done
tools/install/setup.sh --no-engine
ferretdb=$(tools/install/build-ferretdb.sh)
"$ferretdb" --version > /tmp/version  # not piped to head: with pipefail, its SIGPIPE would fail the step
head -n 1 /tmp/version
.venv/bin/python -c 'import bench.settings, pymongo, psycopg; print("bench imports")'
"""


def ferretdb_version() -> str:
    """The version tools/install/build-ferretdb.sh pins."""
    script = (REPO / "tools" / "install" / "build-ferretdb.sh").read_text()
    return re.search(r"FERRETDB_VERSION=\$\{FERRETDB_VERSION:-(v[0-9.]+)\}", script).group(1)


def bare_image() -> str:
    env = REPO / "local.env"
    if not env.exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    return settings_in(env)["NGINX_BASE_IMAGE"]  # the local Debian bookworm, debootstrap's minbase


def checkout() -> bytes:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    return subprocess.run(["tar", "-c", "--null", "-T", "-"], cwd=REPO, input=files, capture_output=True,
                          check=True, timeout=120).stdout


def test_setup_installs_what_it_calls_on_a_bare_bookworm():
    mounts = [arg for host, inside in CACHES.items() if Path(host).is_dir() for arg in ("-v", f"{host}:{inside}")]
    done = subprocess.run(["docker", "run", "--rm", "-i", *mounts, bare_image(), "bash", "-c", SET_UP],
                          input=checkout(), capture_output=True, timeout=900)
    out, err = done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    assert done.returncode == 0, (out[-3000:], err[-3000:])
    assert "the plan:" in err and "golang-1.19-go" in err and "python3-venv" in err, err[-3000:]
    assert "not set up (--no-engine)" in err, err[-3000:]
    assert f"version: {ferretdb_version()}" in out and "bench imports" in out, out[-2000:]


def test_setup_says_in_one_line_that_it_needs_root():
    done = subprocess.run(["docker", "run", "--rm", "-i", "--user", "65534:65534", bare_image(), "bash", "-c",
                           "mkdir /tmp/lab && tar -x -C /tmp/lab && cd /tmp/lab && tools/install/setup.sh"],
                          input=checkout(), capture_output=True, text=False, timeout=120)
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 1 and err.count("\n") == 1 and "run as root" in err, err
