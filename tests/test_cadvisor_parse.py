"""bench.cadvisor parses real cAdvisor JSON (tests/fixtures/cadvisor, captured
from the lab's cAdvisor): containers, their compose service and project, CPU
allowance, counters, a path's store label; and finds bench's own container
from its mountinfo."""
import copy
import json
from pathlib import Path

import pytest

from bench.measure.cadvisor import (STORE_LABEL, CadvisorError, cpu_allowance, cpus_in_mask, find_by_id,
                                    own_container_id, parse_container, parse_counters, parse_docker_list,
                                    parse_timestamp_ns, services_of_project)

FIXTURES = Path(__file__).parent / "fixtures" / "cadvisor"
# Captured with `docker compose -p gridfs-lab-cpu ... run bench` while another
# copy of the lab (project gridfs-lab) ran on the same engine; bench ran
# `ab -n 3000 -c 5` against nginx-static between the first and last entries.
COMPOSE = "v1.3-docker-compose-ab.json"
PROJECT = "gridfs-lab-cpu"


def load(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


def raw_of(data: dict, alias: str) -> dict:
    return next(c for c in data.values() if alias in c["aliases"])


def test_timestamps_keep_nanoseconds():
    assert parse_timestamp_ns("2026-11-22T03:36:14.200778788Z") == 1795318574_200778788
    assert parse_timestamp_ns("2026-11-22T03:36:14Z") == 1795318574_000000000
    assert parse_timestamp_ns("2026-11-22T04:36:14.5+01:00") == 1795318574_500000000
    with pytest.raises(CadvisorError):
        parse_timestamp_ns("yesterday")


def test_list_of_plain_containers():
    data = load("v1.3-docker-list.json")
    containers = {c.aliases[0]: c for c in parse_docker_list(data)}
    assert set(containers) == {"lab-burner", "lab-idle"}

    burner, idle = containers["lab-burner"], containers["lab-idle"]
    assert burner.name == f"/docker/{burner.id}" and len(burner.id) == 64
    assert burner.project is None and burner.service is None  # started by `docker run`
    assert burner.cpu_allowance == 0.5        # --cpus 0.5: quota 50000 / period 100000
    assert idle.cpu_allowance == 1.0          # no quota: its cpuset "0"
    assert burner.memory_limit_bytes is None  # unlimited is reported as ~2^63
    assert idle.memory_limit_bytes == 64 * 2**20

    raw = raw_of(data, "lab-burner")
    assert [s.timestamp_ns for s in burner.stats] == sorted(parse_timestamp_ns(s["timestamp"]) for s in raw["stats"])
    last = raw["stats"][-1]
    assert burner.latest.cpu_total_ns == last["cpu"]["usage"]["total"]
    assert burner.latest.cpu_user_ns == last["cpu"]["usage"]["user"]
    assert burner.latest.cpu_system_ns == last["cpu"]["usage"]["system"]
    assert burner.latest.throttled_periods == last["cpu"]["cfs"]["throttled_periods"] > 0
    assert burner.latest.working_set_bytes == last["memory"]["working_set"]
    assert burner.latest.max_usage_bytes == last["memory"]["max_usage"]


def test_single_container_answer_and_v2_stats_parse_alike():
    one = parse_docker_list(load("v1.3-docker-lab-burner.json"))
    assert [c.aliases[0] for c in one] == ["lab-burner"]
    (v2_entries,) = load("v2.0-stats-lab-burner.json").values()
    v2_latest = parse_counters(v2_entries[-1])
    assert v2_latest.cpu_total_ns == v2_entries[-1]["cpu"]["usage"]["total"] > 0
    assert v2_latest.timestamp_ns == parse_timestamp_ns(v2_entries[-1]["timestamp"])


def test_compose_services_of_one_project_only():
    containers = parse_docker_list(load(COMPOSE))
    ours = services_of_project(containers, PROJECT)
    assert set(ours) == {"nginx-static", "mongo", "cadvisor", "bench"}
    assert all(c.project == PROJECT for c in ours.values())
    assert ours["nginx-static"].aliases[0] == "gridfs-lab-cpu-nginx-static-1"
    # Pinned by cpuset only (no quota): the allowance is the cpuset's size.
    assert ours["nginx-static"].cpu_allowance == cpus_in_mask(
        raw_of(load(COMPOSE), "gridfs-lab-cpu-nginx-static-1")["spec"]["cpu"]["mask"]) == 1.0
    # The image each ran: its name from the spec, its ID from Compose's label.
    raw = raw_of(load(COMPOSE), "gridfs-lab-cpu-nginx-static-1")["spec"]
    assert ours["nginx-static"].image == raw["image"] == "gridfs-lab-cpu-nginx-static"
    assert ours["nginx-static"].image_id == raw["labels"]["com.docker.compose.image"]
    assert ours["nginx-static"].image_id.startswith("sha256:")

    # Without a project, a service two projects run is ambiguous: left out.
    anyone = services_of_project(containers, None)
    assert "nginx-static" not in anyone and "mongo" not in anyone
    assert anyone["cadvisor"].id == ours["cadvisor"].id


def test_a_paths_store_is_its_lab_store_label():
    """The captured lab's nginx-static ran before compose.yaml labelled its
    store: no label, no store. The same capture with the label compose.yaml
    now sets (Docker hands cAdvisor every label, as com.docker.compose.*)."""
    data = load(COMPOSE)
    assert {c.service: c.store for c in services_of_project(parse_docker_list(data), PROJECT).values()} == {
        "nginx-static": None, "mongo": None, "cadvisor": None, "bench": None}
    labelled = copy.deepcopy(raw_of(data, "gridfs-lab-cpu-nginx-static-1"))
    labelled["spec"]["labels"][STORE_LABEL] = "disk"
    assert parse_container(labelled).store == "disk"
    labelled["spec"]["labels"][STORE_LABEL] = ""
    assert parse_container(labelled).store is None


def test_bench_finds_its_own_container_from_mountinfo():
    own_id = own_container_id((FIXTURES / "bench-mountinfo.txt").read_text())
    containers = parse_docker_list(load(COMPOSE))
    own = find_by_id(containers, own_id)
    assert own is not None and own.service == "bench" and own.project == PROJECT
    assert find_by_id(containers, own_id[:12]) is own  # the default hostname
    assert find_by_id(containers, own_id[:4]) is None  # too short to be sure
    assert own_container_id("25 1 0:23 / /proc rw - proc proc rw\n") is None


def test_cpu_allowance_rules():
    assert cpus_in_mask("0-1") == 2
    assert cpus_in_mask("0-1,3") == 3
    spec = raw_of(load("v1.3-docker-list.json"), "lab-burner")["spec"]["cpu"]
    assert cpu_allowance(spec) == spec["quota"] / spec["period"]
    assert cpu_allowance({**spec, "quota": 0}) == cpus_in_mask(spec["mask"])
    assert cpu_allowance({"period": spec["period"]}) is None  # cpuset metrics disabled: unknown


def test_not_a_container_map_is_an_error():
    with pytest.raises(CadvisorError):
        parse_docker_list([])


def test_root_cgroup_is_the_whole_host():
    """GET /api/v1.3/containers/: the root cgroup, bench's machine_cpu_seconds."""
    raw = load("v1.3-containers-root.json")
    root = parse_container(raw)
    assert root.name == "/" and root.service is None
    assert root.latest.cpu_total_ns == raw["stats"][-1]["cpu"]["usage"]["total"] > 0
    assert root.cpu_allowance == cpus_in_mask(raw["spec"]["cpu"]["mask"]) == 2  # this machine's 2 cores


def test_a_machine_as_its_cadvisor_describes_it():
    from bench.measure.cadvisor import parse_machine
    info = json.loads((FIXTURES / "machine-2cores.json").read_text())  # this machine's cAdvisor, as captured
    machine = parse_machine(info)
    assert (machine.cpus, machine.memory_bytes) == (2, 25276514304)
    assert machine.identity == f"{info['machine_id']}/{info['boot_id']}"
    for bad in ({"num_cores": 0}, {"num_cores": "2"}, {"num_cores": True}, {"memory_capacity": -1},
                {"memory_capacity": None}):
        with pytest.raises(CadvisorError, match="num_cores|memory_capacity"):
            parse_machine({**info, **bad})
