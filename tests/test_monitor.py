"""bench.measure.monitor against a real cAdvisor (the image test_cadvisor_local
builds and runs): it finds a compose-labelled container, measures a window
of its CPU, samples it, and gives up cleanly when no cAdvisor answers."""
import time
import uuid

import pytest

from support.processes import free_port
from support.docker_helpers import BURNER_BASE_IMAGE, BURNER_CPUS, docker, docker_engine_answers, remove_container

from bench.measure.monitor import CadvisorClient, Monitor, MonitorError
from bench.measure.usage import LOADGEN_BOUND, THROTTLED, WindowInput

pytestmark = pytest.mark.skipif(not docker_engine_answers(), reason="no Docker engine answers on this machine")

PROJECT = f"lab-monitor-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def labelled_burner():
    """A CPU-capped spinning container labelled as compose service "burner"."""
    name = f"{PROJECT}-burner"
    try:
        container_id = docker("run", "-d", "--cpus", str(BURNER_CPUS), "--name", name,
                              "--label", f"com.docker.compose.project={PROJECT}",
                              "--label", "com.docker.compose.service=burner",
                              "--label", "lab.store=disk",
                              BURNER_BASE_IMAGE, "sh", "-c", "while :; do :; done")
        yield container_id
    finally:
        remove_container(name)


def test_window_of_a_capped_container(cadvisor_url, labelled_burner):  # noqa: F811
    monitor = Monitor(CadvisorClient(cadvisor_url), ["burner"], ["no-database"])
    warnings = monitor.connect(time.monotonic() + 10, own_id=None)
    assert len(warnings) == 1 and "no-database" in warnings[0]  # what it could not find, it says
    assert monitor.ids == {"burner": labelled_burner}
    assert monitor.allowance == {"burner": BURNER_CPUS}
    assert monitor.stores == {"burner": "disk"}  # its label lab.store, as a serving path's

    monitor.start_sampling()
    try:
        time.sleep(2)  # past the container's first seconds
        # a "run" of 6 s: the window is read after it, from cAdvisor's stored stats
        run = WindowInput(time.time_ns(), 0, 100, 25.0, 0.0, 1)
        time.sleep(6)
        run.end_ns = time.time_ns()
        cpu, flags, figures = monitor.window("burner", run, loadgen_allowance=1.0)
    finally:
        monitor.stop_sampling()

    used = cpu["burner"]
    # readings inside the run only: at least two (1-2 s apart), never past its 6 s
    assert used["inner_window"] and 2.0 <= used["window_seconds"] <= 6.0, used
    # It ran, and never above its quota; how close to it depends on what else
    # the machine runs (the 0.5 +- 0.05 cores check is test_cadvisor_local's).
    assert BURNER_CPUS / 2 <= used["cores"] <= BURNER_CPUS * 1.02, used
    assert used["cpu_ms_per_request"] == pytest.approx(used["cores"] * 1000 / 25.0, rel=1e-3)
    assert used["throttled_periods"] > 0 and THROTTLED in flags
    assert LOADGEN_BOUND not in flags  # no load generator watched
    # cAdvisor's root cgroup: the machine ran at least the burner's cores.
    assert figures["machine_cores"] >= used["cores"] * 0.9
    assert figures["containers_cores"] >= used["cores"] * 0.9

    samples = monitor.serialised_samples()["burner"]
    stamps = [s[0] for s in samples]
    assert stamps == sorted(set(stamps)) and len(stamps) >= 3
    # cAdvisor's stamps, 1 to 2 s apart (its housekeeping jitters up to 2x the interval)
    assert all(0.9e9 <= b - a <= 2.2e9 for a, b in zip(stamps, stamps[1:]))


def test_a_containers_counter_read_by_bench_matches_cadvisors(cadvisor_url, labelled_burner):  # noqa: F811
    """find_counters on this host's own /sys/fs/cgroup (v1 or v2), for the
    container cAdvisor lists: bench's readings at a window's edges give the
    burner's quota as cAdvisor's own window does; where it cannot read one
    (no tree mounted, a container on another host) it says why."""
    monitor = Monitor(CadvisorClient(cadvisor_url), ["burner"], ["no-database"])
    monitor.connect(time.monotonic() + 10, own_id=None)
    assert monitor.find_counters("/sys/fs/cgroup", ["burner", "no-database"]) == {
        "no-database": "not listed by cAdvisor"}
    time.sleep(2)  # past the container's first seconds
    run = WindowInput(time.time_ns(), 0, 100, 25.0, 0.0, 1)
    before = monitor.read_counters(["burner"])
    time.sleep(6)
    after = monitor.read_counters(["burner"])
    run.end_ns = time.time_ns()
    run.counters = {"burner": (before["burner"].cpu_ns, after["burner"].cpu_ns)}
    used = monitor.window("burner", run, loadgen_allowance=1.0)[0]["burner"]
    assert used["cpu_ms_per_request_from"] == "run's edges" and used["window_seconds"] == pytest.approx(6.0, abs=0.1)
    assert BURNER_CPUS / 2 <= used["cores"] <= BURNER_CPUS * 1.02, used
    # the same counter over a steady spin: cAdvisor's stamps read the same rate, to a few percent
    assert used["cores"] == pytest.approx(used["cadvisor_cores"], rel=0.05), used
    assert monitor.find_counters("/nonexistent", ["burner"]) == {"burner": "/nonexistent is not there "
                                                                           "(compose.yaml mounts it)"}
    monitor.client.local = "elsewhere"
    assert monitor.find_counters("/sys/fs/cgroup", ["burner"]) == {"burner": "on another host than bench's"}


def test_no_cadvisor_answering_is_an_error_not_a_hang():
    monitor = Monitor(CadvisorClient(f"http://127.0.0.1:{free_port()}", timeout=1), ["burner"], ["mongo"])
    began = time.monotonic()
    with pytest.raises(MonitorError, match="never answered"):
        monitor.connect(time.monotonic() + 2, own_id=None)
    assert time.monotonic() - began < 10


def test_a_missing_service_is_a_warning(cadvisor_url):  # noqa: F811
    monitor = Monitor(CadvisorClient(cadvisor_url), ["no-such-service"], ["no-such-database"])
    warnings = monitor.connect(time.monotonic() + 2, own_id=None)
    assert len(warnings) == 2 and "no-such-service" in warnings[0] and "no-such-database" in warnings[1]
    assert monitor.ids == {}


def test_several_hosts_cadvisors_read_as_one(cadvisor_url, labelled_burner):  # noqa: F811
    """Two hosts' cAdvisors, here one cAdvisor named twice: each container
    is counted once, on the first host that lists it, and a machine two
    cAdvisors share (namespace hosts on one kernel) is counted once."""
    from bench.measure.monitor import CadvisorHosts
    read = CadvisorHosts({"here": CadvisorClient(cadvisor_url), "there": CadvisorClient(cadvisor_url)})
    monitor = Monitor(read, ["burner"], ["no-database"])
    monitor.connect(time.monotonic() + 5, own_id=None)
    assert monitor.hosts == {"burner": "here"} and monitor.cpusets["burner"]
    ids = [c.id for c in read.containers()]
    assert len(ids) == len(set(ids)) and labelled_burner in ids
    machines = read.machines_by_host()
    assert machines["here"] == machines["there"] and machines["here"].cpus >= 1
    assert len(read.machines(num_stats=3)) == 1
    # listed by another host's cAdvisor only: that host's, its cpuset naming that host's CPUs, not compared here
    elsewhere = Monitor(CadvisorHosts({"here": CadvisorClient(cadvisor_url), "there": CadvisorClient(cadvisor_url)}),
                        ["burner"], ["no-database"])
    elsewhere.client.local = "there"
    elsewhere.connect(time.monotonic() + 5, own_id=None)
    assert elsewhere.hosts == {"burner": "here"} and elsewhere.cpusets["burner"] == ()
    # every host's cAdvisor must answer: none is left out of a window silently
    silent = CadvisorHosts({"here": CadvisorClient(cadvisor_url),
                            "there": CadvisorClient(f"http://127.0.0.1:{free_port()}", timeout=1)})
    with pytest.raises(MonitorError):
        silent.containers()
