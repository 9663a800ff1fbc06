"""Shared fixtures: one real MongoDB-protocol server (FerretDB on PostgreSQL)
for the whole test session."""
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from support.docker_helpers import LOCAL_IMAGE, cadvisor_as_compose_runs_it, docker, remove_container
from support.processes import FerretDBServer, PostgresServer, free_port

REPO = Path(__file__).resolve().parent.parent


def ferretdb_binary() -> str:
    if os.environ.get("FERRETDB_BIN"):
        return os.environ["FERRETDB_BIN"]
    out = subprocess.run([str(REPO / "tools" / "install" / "build-ferretdb.sh")], check=True,
                         capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def postgres():
    server = PostgresServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ferretdb(postgres):
    """A running FerretDB; tests that stop or pause it must restore it."""
    server = FerretDBServer(ferretdb_binary(), postgres).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def mongo_uri(ferretdb) -> str:
    return ferretdb.uri


# cAdvisor as the lab runs it (the local stand-in unless CADVISOR_IMAGE names
# another image), on a free 127.0.0.1 port, one for the test session.
@pytest.fixture(scope="session")
def cadvisor_image() -> str:
    image = os.environ.get("CADVISOR_IMAGE")
    if image:
        return image
    # Always rebuilt so the image matches the source; both build steps are cached.
    subprocess.run([str(REPO / "monitoring" / "cadvisor" / "build-local-image.sh")], check=True,
                   capture_output=True, timeout=600)
    return LOCAL_IMAGE


@pytest.fixture(scope="session")
def cadvisor_url(cadvisor_image):
    name = f"lab-cadvisor-test-{uuid.uuid4().hex[:8]}"
    port = free_port()
    try:
        options, flags = cadvisor_as_compose_runs_it()
        docker("run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8080", *options, cadvisor_image, *flags)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                if requests.get(f"{url}/healthz", timeout=2).text == "ok":
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True).stderr
                pytest.fail(f"cAdvisor did not answer /healthz within 30 s; logs:\n{logs[-3000:]}")
            time.sleep(0.5)
        yield url
    finally:
        remove_container(name)


# The tiers (pyproject.toml's markers): `unit` needs only the virtualenv,
# `native` real servers and tools run on this machine as tools/install/setup.sh
# installs them (PostgreSQL, FerretDB, nginx, FUSE, Chromium, wrk...), `lab`
# a Docker engine. A test's tier follows from the fixtures it asks for (with
# every fixture they ask for in turn); a module whose tests start such things
# without a fixture says so with `pytestmark`.
TIERS = ("unit", "native", "lab")
NATIVE_FIXTURES = {
    "postgres", "ferretdb", "mongo_uri",  # above; every fixture on a database asks for one of them
    "ferretdb_on_sqlite", "own_postgres", "database",  # FerretDB and PostgreSQL of a test's own
    "fuse_binary", "floor_binary", "actionlint", "vegeta",  # built with Go or the C compiler
    "chromium", "site", "served_set", "hung_upstream", "slow_reader",  # servers and clients run here
    "two_nginx", "two_paced_nginx",  # two nginx, timed with ab
}
LAB_FIXTURES = {"cadvisor_image", "cadvisor_url", "burner", "labelled_burner", "lab", "change_gate", "matrix",
                "split_run", "host_b"}
def tier_of_fixtures(names) -> str:
    names = set(names)
    return "lab" if names & LAB_FIXTURES else "native" if names & NATIVE_FIXTURES else "unit"


def pytest_collection_modifyitems(config, items):
    for item in items:
        marked = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        needed = tier_of_fixtures(item.fixturenames)
        # one tier each, so that -m unit, -m native and -m lab split the suite
        if len(marked) > 1:
            raise pytest.UsageError(f"{item.nodeid}: marked {sorted(marked)}; a test has one tier")
        tier = marked.pop() if marked else needed
        if TIERS.index(tier) < TIERS.index(needed):
            raise pytest.UsageError(f"{item.nodeid}: marked {tier}, but its fixtures need {needed}")
        if not item.get_closest_marker(tier):
            item.add_marker(tier)
