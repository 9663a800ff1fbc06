"""The lab across two hosts (issue 27), end to end on this machine: bench on
this machine's engine, the paths and the databases on a second engine in a
network namespace of its own (tests/support/netns_hosts.py), joined by a veth pair;
images shipped by save and load; tools/lab/hosts.py with a tiny configuration.
While it runs, both databases are tried on the link address with and
without the run's logins. Only the namespace's address is targeted."""
import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psycopg
import pymongo
import pytest

from support.netns_hosts import NamespaceHost
from hosts import WORK, mongo_auth_options
from lab_compose import settings_in

REPO = Path(__file__).resolve().parent.parent
TARGETS = "nginx-static nginx-gridfs flask"
LINK_RATE, LINK_BPS = "40mbit", 40e6  # slower than nginx-static's 64 KB answers here
PROJECT = "gridfs-lab-hosts-e2e"


@pytest.fixture(scope="module")
def split_run():
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    host = NamespaceHost().start()
    host.firewall(listed_ports(len(TARGETS.split())))
    results = REPO / "results" / f"e2e-hosts-{os.getpid()}"
    results.mkdir(parents=True)
    env = {**os.environ, "LAB_HOSTS": f"loadgen=default@{host.peer_address} paths={host.engine}@{host.address} "
                                      f"db={host.engine}@{host.address}",
           "RESULTS_DIR": str(results), "HOSTS_PROJECT": PROJECT, "BENCH_TARGETS": TARGETS,
           "FILE_SIZES": "1KB 64KB", "BENCH_PROFILE": "quick", "BENCH_CONCURRENCY": "4", "FILE_SET": "off",
           "LINK_RATE": LINK_RATE, "BENCH_LOADGENS": "2"}
    logins = WORK / f"{PROJECT}.logins.env"
    logins.unlink(missing_ok=True)
    try:
        with open(results / "hosts.out", "w+") as out, open(results / "hosts.err", "w+") as err:
            started = subprocess.Popen([str(REPO / ".venv" / "bin" / "python"), "tools/lab/hosts.py"], cwd=REPO,
                                       env=env, stdout=out, stderr=err, text=True)
            tried = try_the_databases(host.address, logins, started)
            tried["an unlisted port"] = knock(host.address, 2375)  # Docker's API port, the classic one left open
            started.wait(timeout=2400)
            out.seek(0), err.seek(0)
            run = subprocess.CompletedProcess(started.args, started.returncode, out.read(), err.read())
        latest = results / "latest"
        doc = json.loads((latest / "results.json").read_text()) if (latest / "results.json").exists() else None
        report = (latest / "report.md").read_text() if (latest / "report.md").exists() else ""
        passwords = settings_in(logins).values() if logins.exists() else []
        tried["files holding a password"] = [str(f) for f in results.rglob("*") if f.is_file() and any(
            p.encode() in f.read_bytes() for p in passwords)]
        tried["firewall"] = host.firewall_counts()
        yield run, doc, host, report, tried
    finally:
        host.stop()
        shutil.rmtree(results, ignore_errors=True)


def listed_ports(paths: int) -> list[tuple[int, int]]:
    """The TCP ports docs/hosts.md says to open between the hosts, as
    (first, last) ranges: "18080 and up, one port per path" is one port per
    path from 18080."""
    doc = (REPO / "docs" / "hosts.md").read_text()
    table = doc[doc.index("Open between them"):].split("\n\n")[1]
    ports = []
    for row in table.splitlines()[2:]:
        tcp = row.split("|")[3]
        for first in map(int, re.findall(r"\d+", tcp)):
            ports.append((first, first + paths - 1) if "and up" in tcp else (first, first))
    return list(dict.fromkeys(ports))  # a port on two rows once


def knock(address: str, port: int) -> str:
    """What a TCP connection to a port of the other host meets."""
    try:
        socket.create_connection((address, port), timeout=3).close()
        return "connected"
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timed out"


def try_the_databases(address: str, logins: Path, started: subprocess.Popen) -> dict:
    """From this side of the link, once both databases answer the run's
    logins: what each says to a client with none (and to a wrong password);
    empty if they never did while the run lasted."""
    deadline = time.monotonic() + 900
    while True:
        if started.poll() is not None or time.monotonic() > deadline:
            return {}
        passwords = settings_in(logins) if logins.exists() else {}
        try:
            with pymongo.MongoClient(mongo_uri(address, "lab", passwords.get("LAB_MONGO_PASSWORD", "")),
                                     serverSelectionTimeoutMS=2000) as client:
                client.lab.list_collection_names()
            with psycopg.connect(f"postgresql://lab:{passwords['LAB_POSTGRES_PASSWORD']}@{address}:5432/lab",
                                 connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            break
        except (pymongo.errors.PyMongoError, psycopg.Error, KeyError):
            time.sleep(1)
    tried = {}
    for name, uri in (("mongo without a login", f"mongodb://{address}:27017/"),
                      ("mongo with a wrong password", mongo_uri(address, "lab", "wrong"))):
        try:
            with pymongo.MongoClient(uri, serverSelectionTimeoutMS=2000) as client:
                client.lab.list_collection_names()
            tried[name] = "let in"
        except pymongo.errors.OperationFailure as refused:  # an answer: the server is there and says no
            tried[name] = str(refused)
    for name, url in (("postgres without a password", f"postgresql://lab@{address}:5432/lab"),
                      ("postgres with a wrong password", f"postgresql://lab:wrong@{address}:5432/lab")):
        try:
            psycopg.connect(url, connect_timeout=2).close()
            tried[name] = "let in"
        except psycopg.OperationalError as refused:
            tried[name] = str(refused)
    return tried


def mongo_uri(address: str, user: str, password: str) -> str:
    options = mongo_auth_options(settings_in(REPO / "local.env")["MONGO_IMAGE"])
    return f"mongodb://{user}:{password}@{address}:27017/?{options}"


def test_bench_times_every_path_on_the_other_host(split_run):
    run, doc, host, _, _ = split_run
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-2000:])
    assert doc["status"] == "complete"
    targets = {t["name"]: t for t in doc["targets"]}
    assert list(targets) == TARGETS.split()
    for name, target in targets.items():
        assert target["verified"], target
        assert target["url"].startswith(f"http://{host.address}:"), target  # across the link
    assert {r["target"] for r in doc["runs"] if r["status"] == "ok"} == set(targets)
    assert "[hosts] default (10.99.0.1, loadgen)" in run.stdout


def test_each_containers_cpu_is_read_on_its_own_host(split_run):
    """One cAdvisor per engine: results.json names each container's host,
    and a path's CPU per request comes from the cAdvisor beside it."""
    _, doc, host, report, _ = split_run
    hosts = {h["name"]: h for h in doc["environment"]["hosts"]}
    assert set(hosts) == {host.peer_address, host.address}
    assert hosts[host.peer_address]["bench"] and hosts[host.peer_address]["containers"] == ["bench"]
    assert set(TARGETS.split()) | {"mongo"} <= set(hosts[host.address]["containers"])
    assert all(h["cpus"] >= 1 and h["memory_bytes"] > 0 for h in hosts.values())
    for r in (r for r in doc["runs"] if r["status"] == "ok"):
        assert (r["cpu"] or {}).get(r["target"], {}).get("cores", 0) > 0, r
    assert "## Hosts" in report and f"| {host.address} |" in report


def test_two_ab_workers_share_each_case_and_are_merged(split_run):
    _, doc, _, report, _ = split_run
    assert doc["timing"]["loadgens"] == 2 and "ab as 2 processes sharing each case's connections" in report
    for r in (r for r in doc["runs"] if r["status"] == "ok"):
        rep = r["repetitions"][0]
        assert [w["concurrency"] for w in rep["workers"]] == [2, 2], r["target"]
        assert rep["requests"] == sum(w["requests"] for w in rep["workers"]) == r["requests"]


def test_the_link_is_measured_and_a_row_that_fills_it_is_link_bound(split_run):
    _, doc, host, report, _ = split_run
    link = doc["environment"]["link"]
    assert link["address"] == host.address and 0.8 * LINK_BPS <= link["bits_per_second"] <= LINK_BPS, link
    assert link["shaped"] == f"rate={LINK_RATE}" and f"shaped with tc (rate={LINK_RATE})" in report
    filled = [r for r in doc["runs"] if (r["target"], r["file"]) == ("nginx-static", "64KB.bin")]
    assert filled and all("link-bound" in r["flags"] and r["bottleneck"] == "link" for r in filled), filled
    for r in filled:  # the answers' bytes (headers too) within 10% of what iperf3 measured
        assert abs(r["transfer_kbps"] * 1024 * 8 / link["bits_per_second"] - 1) <= 0.1, r["transfer_kbps"]


def test_a_client_without_the_runs_logins_is_refused_by_both_databases(split_run):
    """Both databases on the link address answer (the run's logins worked
    there) and refuse a client without a password or with a wrong one; no
    file of the run holds a password."""
    *_, tried = split_run
    assert "mongo without a login" in tried, f"the databases never took the run's logins on the link: {tried}"
    for name in ("mongo without a login", "mongo with a wrong password"):
        assert "password authentication failed" in tried[name] or "requires authentication" in tried[name] \
            or "Authentication failed" in tried[name], (name, tried[name])
    assert "no password supplied" in tried["postgres without a password"], tried
    assert 'password authentication failed for user "lab"' in tried["postgres with a wrong password"], tried
    assert tried["files holding a password"] == [], tried


def test_the_run_needs_no_port_but_those_docs_hosts_md_lists(split_run):
    """The other host let in only docs/hosts.md's ports from the link (and
    the answers to what it sent): the run passed (the first test), a port
    not listed timed out, and the firewall did drop that knock."""
    *_, tried = split_run
    assert listed_ports(3) == [(18080, 18082), (5201, 5201), (18088, 18088), (27017, 27017), (5432, 5432), (22, 22)]
    assert tried["an unlisted port"] == "timed out", tried
    counts = tried["firewall"]
    assert counts[("INPUT", "DROP")] + counts[("DOCKER-USER", "DROP")] > 0, counts
    for ports in ("18080:18082", "5201", "18088", "27017", "5432"):  # each let the run's connections in
        assert counts[("DOCKER-USER", ports)] > 0, (ports, counts)


def test_nothing_is_left_on_either_engine(split_run):
    _, _, host, _, _ = split_run
    here = subprocess.run(["docker", "ps", "-a", "--filter", "label=com.docker.compose.project=gridfs-lab-hosts-e2e",
                           "-q"], capture_output=True, text=True, timeout=60).stdout.split()
    there = host.docker("ps", "-a", "--filter", "label=com.docker.compose.project=gridfs-lab-hosts-e2e", "-q")
    assert here == [] and there.stdout.split() == []
    # and the link is as it was: no qdisc of the lab's left on either end
    for side, device in ((["tc"], host.outer), (["tc", "-n", host.name], host.inner)):
        shown = subprocess.run([*side, "qdisc", "show", "dev", device], capture_output=True, text=True,
                               timeout=30).stdout
        assert "tbf" not in shown and "netem" not in shown, shown
