"""What bench records of the database comes from the server's own answers:
FerretDB on PostgreSQL and FerretDB on SQLite (the same binary, another
backend) are told apart by their explain answers, never by an image name."""
import subprocess

import gridfs
import pymongo
import pytest

from bench.environment import database_server, server_label
from conftest import ferretdb_binary
from support.processes import free_port, stop_process, wait_for_port


def seeded(uri: str, db: str) -> None:
    with pymongo.MongoClient(uri, serverSelectionTimeoutMS=5000) as client:
        gridfs.GridFSBucket(client[db]).upload_from_stream("probe.bin", b"probe")


def test_ferretdb_on_postgresql_says_so(mongo_uri):
    seeded(mongo_uri, "environment_pg")
    server = database_server(mongo_uri, "environment_pg")
    assert server["product"] == "FerretDB" and server["version"].startswith("v1.")
    assert server["backend"] == "PostgreSQL"
    assert server_label({'server': server}) == f"FerretDB {server['version']} (MongoDB wire version " \
                                  f"{server['wire_version']}, PostgreSQL backend)"


def test_a_database_without_gridfs_files_claims_no_backend(mongo_uri):
    server = database_server(mongo_uri, "environment_empty")
    assert server["product"] == "FerretDB" and server["backend"] is None
    assert "backend not reported" in server_label({'server': server})


@pytest.fixture
def ferretdb_on_sqlite(tmp_path):
    port = free_port()
    proc = subprocess.Popen([ferretdb_binary(), f"--listen-addr=127.0.0.1:{port}", "--handler=sqlite",
                             f"--sqlite-url=file:{tmp_path}/", "--telemetry=disable", f"--state-dir={tmp_path}",
                             "--log-level=error", f"--debug-addr=127.0.0.1:{free_port()}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "ferretdb (sqlite)", proc)
        yield f"mongodb://127.0.0.1:{port}/"
    finally:
        stop_process(proc)


def test_ferretdb_on_sqlite_says_so(ferretdb_on_sqlite):
    seeded(ferretdb_on_sqlite, "lab")
    server = database_server(ferretdb_on_sqlite, "lab")
    assert server["product"] == "FerretDB" and server["backend"] == "SQLite"
