"""Shared fixtures: one real MongoDB-protocol server (FerretDB on PostgreSQL)
for the whole test session."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The lab's Python code is imported as it runs in its containers.
for path in (REPO / "tests", REPO / "loadgen", REPO / "seed"):
    sys.path.insert(0, str(path))
from processes import FerretDBServer, PostgresServer  # noqa: E402


def ferretdb_binary() -> str:
    if os.environ.get("FERRETDB_BIN"):
        return os.environ["FERRETDB_BIN"]
    out = subprocess.run([str(REPO / "tools" / "build-ferretdb.sh")], check=True,
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
