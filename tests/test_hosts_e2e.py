"""The lab across two hosts (issue 27), end to end on this machine: bench on
this machine's engine, the paths and the databases on a second engine in a
network namespace of its own (tests/netns_hosts.py), joined by a veth pair;
images shipped by save and load; tools/hosts.py with a tiny configuration.
Only the namespace's address is targeted."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from netns_hosts import NamespaceHost

REPO = Path(__file__).resolve().parent.parent
TARGETS = "nginx-static nginx-gridfs flask"


@pytest.fixture(scope="module")
def split_run():
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    host = NamespaceHost().start()
    results = REPO / "results" / f"e2e-hosts-{os.getpid()}"
    results.mkdir(parents=True)
    env = {**os.environ, "LAB_HOSTS": f"loadgen=default@{host.peer_address} paths={host.engine}@{host.address} "
                                      f"db={host.engine}@{host.address}",
           "RESULTS_DIR": str(results), "HOSTS_PROJECT": "gridfs-lab-hosts-e2e", "BENCH_TARGETS": TARGETS,
           "FILE_SIZES": "1KB 64KB", "BENCH_PROFILE": "quick", "BENCH_CONCURRENCY": "4", "FILE_SET": "off"}
    try:
        run = subprocess.run([str(REPO / ".venv" / "bin" / "python"), "tools/hosts.py"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=2400)
        doc = json.loads((results / "latest" / "results.json").read_text()) \
            if (results / "latest" / "results.json").exists() else None
        yield run, doc, host
    finally:
        host.stop()
        shutil.rmtree(results, ignore_errors=True)


def test_bench_times_every_path_on_the_other_host(split_run):
    run, doc, host = split_run
    assert run.returncode == 0, (run.stdout[-4000:], run.stderr[-2000:])
    assert doc["status"] == "complete"
    targets = {t["name"]: t for t in doc["targets"]}
    assert list(targets) == TARGETS.split()
    for name, target in targets.items():
        assert target["verified"], target
        assert target["url"].startswith(f"http://{host.address}:"), target  # across the link
    assert {r["target"] for r in doc["runs"] if r["status"] == "ok"} == set(targets)
    assert "[hosts] default (10.99.0.1, loadgen)" in run.stdout


def test_nothing_is_left_on_either_engine(split_run):
    _, _, host = split_run
    here = subprocess.run(["docker", "ps", "-a", "--filter", "label=com.docker.compose.project=gridfs-lab-hosts-e2e",
                           "-q"], capture_output=True, text=True, timeout=60).stdout.split()
    assert here == []
