"""The cAdvisor image the lab measures with (by default the local stand-in
built by monitoring/cadvisor/build-local-image.sh; CADVISOR_IMAGE picks
another, e.g. gcr.io/cadvisor/cadvisor:v0.49.1) reports a CPU-limited
container's usage correctly through the official v1.3/v2.0 REST API."""
import time
import uuid
from datetime import datetime, timezone

import pytest
import requests

from support.docker_helpers import BURNER_BASE_IMAGE, BURNER_CPUS, docker, docker_engine_answers, remove_container

pytestmark = pytest.mark.skipif(not docker_engine_answers(), reason="no Docker engine answers on this machine")

def parse_timestamp_ns(stamp: str) -> int:
    """RFC 3339 with up to nanoseconds ("2024-05-01T10:00:00.123456789Z"),
    which datetime cannot hold exactly."""
    seconds, _, fraction = stamp.rstrip("Z").partition(".")
    whole = datetime.fromisoformat(seconds).replace(tzinfo=timezone.utc)
    return int(whole.timestamp()) * 10**9 + int((fraction or "0").ljust(9, "0")[:9])


def find_by_alias(containers: dict, alias: str) -> dict | None:
    return next((c for c in containers.values() if alias in c.get("aliases", [])), None)


@pytest.fixture
def burner():
    """A container spinning one core, capped at BURNER_CPUS by CFS quota."""
    name = f"lab-burner-{uuid.uuid4().hex[:8]}"
    try:
        container_id = docker("run", "-d", "--cpus", str(BURNER_CPUS), "--name", name,
                              BURNER_BASE_IMAGE, "sh", "-c", "while :; do :; done")
        yield name, container_id
    finally:
        remove_container(name)


def all_docker_containers(url: str) -> dict:
    response = requests.get(f"{url}/api/v1.3/docker/", timeout=10)
    response.raise_for_status()
    assert response.headers["Content-Type"] == "application/json"
    return response.json()


def test_burner_cpu_usage_matches_its_cpu_limit(cadvisor_url, burner):
    name, container_id = burner

    # Wait until cAdvisor has picked the container up and sampled it a few times.
    deadline = time.monotonic() + 30
    while True:
        found = find_by_alias(all_docker_containers(cadvisor_url), name)
        if found is not None and len(found["stats"]) >= 3:
            break
        assert time.monotonic() < deadline, f"{name} not reported with 3 stats within 30 s"
        time.sleep(1)

    time.sleep(3)  # let the burner settle into its throttled steady state (~6 s in all)
    first = find_by_alias(all_docker_containers(cadvisor_url), name)
    time.sleep(5)  # the last stats of each answer may be up to 2 s old (cAdvisor's jitter)
    second = find_by_alias(all_docker_containers(cadvisor_url), name)

    assert first["name"] == second["name"] == f"/docker/{container_id}"
    assert set(second["aliases"]) == {name, container_id}
    assert second["namespace"] == "docker"

    cpu_spec = second["spec"]["cpu"]
    assert cpu_spec["quota"] == int(BURNER_CPUS * cpu_spec["period"])
    assert cpu_spec["mask"]  # cpuset, e.g. "0-1"
    assert "limit" in second["spec"]["memory"]

    a, b = first["stats"][-1], second["stats"][-1]
    elapsed_s = (parse_timestamp_ns(b["timestamp"]) - parse_timestamp_ns(a["timestamp"])) / 1e9
    assert 3 <= elapsed_s <= 8, f"stats {elapsed_s:.2f} s apart; housekeeping is not every 1 s"
    cores_used = (b["cpu"]["usage"]["total"] - a["cpu"]["usage"]["total"]) / 1e9 / elapsed_s
    print(f"burner used {cores_used:.3f} cores over {elapsed_s:.2f} s (limit {BURNER_CPUS})")
    assert cores_used == pytest.approx(BURNER_CPUS, abs=0.05)

    usage = b["cpu"]["usage"]
    if "per_cpu_usage" in usage:  # cgroup v1 only: v2 has no per-CPU accounting
        assert sum(usage["per_cpu_usage"]) == pytest.approx(usage["total"], rel=0.01)
    assert usage["user"] + usage["system"] > 0
    cfs = b["cpu"]["cfs"]
    assert cfs["throttled_periods"] > 0 and cfs["throttled_time"] > 0  # it is capped, so it is throttled
    assert cfs["periods"] >= cfs["throttled_periods"]
    memory = b["memory"]
    assert memory["usage"] > 0 and memory["usage"] >= memory["working_set"]
    assert "max_usage" in memory  # 0 on cgroup v2 kernels without memory.peak


def test_single_container_and_v2_stats_endpoints(cadvisor_url, burner):
    name, container_id = burner
    key = f"/docker/{container_id}"

    deadline = time.monotonic() + 30
    while True:
        response = requests.get(f"{cadvisor_url}/api/v1.3/docker/{name}", timeout=10)
        if response.status_code == 200 and len(response.json()[key]["stats"]) >= 2:
            break
        assert time.monotonic() < deadline, f"{name} not served by name within 30 s: {response.text[:300]}"
        time.sleep(1)
    # Looked up by id too, and keyed by the cgroup name either way.
    by_id = requests.get(f"{cadvisor_url}/api/v1.3/docker/{container_id}", timeout=10).json()
    assert list(by_id) == [key]

    stats = requests.get(f"{cadvisor_url}/api/v2.0/stats/{name}",
                         params={"type": "docker", "count": 2}, timeout=10).json()
    assert list(stats) == [key]
    assert len(stats[key]) == 2
    assert stats[key][-1]["has_cpu"] and stats[key][-1]["cpu"]["usage"]["total"] > 0

    missing = requests.get(f"{cadvisor_url}/api/v1.3/docker/no-such-container-{uuid.uuid4().hex}", timeout=10)
    assert missing.status_code == 500  # as the official API answers
