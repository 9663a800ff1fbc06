"""An A/B's twins' CPU read by bench itself at a window's edges
(bench.measure.cgroup_cpu), and what usage.container_usage makes of it.
Parsers on real cgroup files of this machine (cgroup v1 with the v2 tree
beside it: a hybrid host; one Docker container's files read at one moment);
the layout on directories laid out as the kernel's; the reading on this
process's own cgroup; the window on a real duet block's cAdvisor entries."""
import json
import time
from pathlib import Path

import pytest

from bench.measure.cadvisor import Counters
from bench.measure.cgroup_cpu import (CgroupCounters, CgroupError, CpuTimes, Reading, agrees, between, counter_file,
                                      cpu_files, parse_cpu_stat_usage, parse_cpuacct_usage, read_counter, read_times)
from bench.measure.usage import PER_REQUEST_EDGES, PER_REQUEST_RATE, container_usage

FIXTURES = Path(__file__).parent / "fixtures"
CGROUP = FIXTURES / "cgroup"
CONTAINER = "e240f8ce0a2012703ba2c99bf4b30dd0e6f0200d3769cc8d1a297f099fb4569c"


def test_v1_and_v2_counters_of_one_container_agree():
    """cpuacct.usage (ns) and the unified tree's cpu.stat (usage_usec) of
    one container, read at one moment: the same count, to the microsecond."""
    v1 = parse_cpuacct_usage((CGROUP / "v1-cpuacct.usage").read_text())
    v2 = parse_cpu_stat_usage((CGROUP / "v2-hybrid-cpu.stat").read_text())
    assert v1 == 22_736_623_542 and v2 == 22_736_623_000
    assert 0 <= v1 - v2 < 1000


def test_a_file_of_another_kind_is_an_error_not_a_zero():
    # the v1 cpu controller's cpu.stat (throttling only): no usage_usec in it
    with pytest.raises(CgroupError, match="no usage_usec"):
        parse_cpu_stat_usage((CGROUP / "v1-cpu.stat").read_text())
    with pytest.raises(CgroupError, match="nanoseconds"):
        parse_cpuacct_usage((CGROUP / "v2-hybrid-cpu.stat").read_text())


def lay_out(root: Path, files: dict[str, str]) -> Path:
    for relative, source in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text((CGROUP / source).read_text() if source else "")
    return root


def test_the_counter_file_follows_the_hosts_cgroup_version(tmp_path):
    """v1 (this machine: cpu and cpuacct mounted apart, the unified tree
    beside them, no cgroup.controllers at the root): cpuacct.usage, never
    the unified tree's. v2 (cgroup.controllers at the root, systemd's
    names): cpu.stat. The cgroup's name is cAdvisor's for the container."""
    v1 = lay_out(tmp_path / "v1", {f"cpuacct/docker/{CONTAINER}/cpuacct.usage": "v1-cpuacct.usage",
                                   f"unified/docker/{CONTAINER}/cpu.stat": "v2-hybrid-cpu.stat",
                                   "unified/cgroup.controllers": ""})
    found = counter_file(v1, f"/docker/{CONTAINER}")
    assert found == v1 / "cpuacct" / "docker" / CONTAINER / "cpuacct.usage"
    assert read_counter(found) == 22_736_623_542
    # the two controllers mounted together, as many distributions do
    joined = lay_out(tmp_path / "joined", {f"cpu,cpuacct/docker/{CONTAINER}/cpuacct.usage": "v1-cpuacct.usage"})
    assert counter_file(joined, f"/docker/{CONTAINER}").parent.parent.parent.name == "cpu,cpuacct"

    scope = f"system.slice/docker-{CONTAINER}.scope"
    v2 = lay_out(tmp_path / "v2", {"cgroup.controllers": "", f"{scope}/cpu.stat": "v2-hybrid-cpu.stat"})
    assert read_counter(counter_file(v2, f"/{scope}")) == 22_736_623_000
    assert counter_file(v2, f"/docker/{CONTAINER}") is None  # not there: cAdvisor's fallback, not a guess
    with pytest.raises(CgroupError):
        counter_file(v2, "/system.slice/../../etc")


def test_the_whole_accounting_is_read_from_either_version(tmp_path):
    """make overload's samples (cAdvisor's Counters): the counter, user and
    system, and CFS throttling. v1: cpuacct.stat's USER_HZ ticks (10 ms),
    throttling from the cpu controller's own tree, or beside the counter
    where the two are mounted together; v2: cpu.stat alone."""
    ticks = "user 1830\nsystem 443\n"
    throttled = (CGROUP / "v1-cpu.stat").read_text().replace("nr_throttled 0", "nr_throttled 7")
    v1 = lay_out(tmp_path / "v1", {f"cpuacct/docker/{CONTAINER}/cpuacct.usage": "v1-cpuacct.usage",
                                   f"cpu/docker/{CONTAINER}/cpu.stat": ""})
    (v1 / "cpuacct" / "docker" / CONTAINER / "cpuacct.stat").write_text(ticks)
    (v1 / "cpu" / "docker" / CONTAINER / "cpu.stat").write_text(throttled)
    assert read_times(cpu_files(v1, f"/docker/{CONTAINER}")) == CpuTimes(22_736_623_542, 18_300_000_000,
                                                                         4_430_000_000, 7)
    joined = lay_out(tmp_path / "joined", {f"cpu,cpuacct/docker/{CONTAINER}/cpuacct.usage": "v1-cpuacct.usage",
                                           f"cpu,cpuacct/docker/{CONTAINER}/cpu.stat": "v1-cpu.stat"})
    (joined / "cpu,cpuacct" / "docker" / CONTAINER / "cpuacct.stat").write_text(ticks)
    files = cpu_files(joined, f"/docker/{CONTAINER}")
    assert files.throttle == files.usage.parent / "cpu.stat" and read_times(files).throttled_periods == 0
    # no cpu controller found: no throttling said, the rest read
    alone = lay_out(tmp_path / "alone", {f"cpuacct/docker/{CONTAINER}/cpuacct.usage": "v1-cpuacct.usage"})
    (alone / "cpuacct" / "docker" / CONTAINER / "cpuacct.stat").write_text(ticks)
    assert read_times(cpu_files(alone, f"/docker/{CONTAINER}")).throttled_periods == 0

    scope = f"system.slice/docker-{CONTAINER}.scope"
    v2 = lay_out(tmp_path / "v2", {"cgroup.controllers": "", f"{scope}/cpu.stat": "v2-hybrid-cpu.stat"})
    (v2 / scope / "cpu.stat").write_text((CGROUP / "v2-hybrid-cpu.stat").read_text() + "nr_throttled 3\n")
    assert read_times(cpu_files(v2, f"/{scope}")) == CpuTimes(22_736_623_000, 18_302_656_000, 4_433_966_000, 3)
    assert cpu_files(v2, f"/docker/{CONTAINER}") is None
    # a file of another kind is an error, not zeros
    (v2 / scope / "cpu.stat").write_text((CGROUP / "v1-cpu.stat").read_text())
    with pytest.raises(CgroupError):
        read_times(cpu_files(v2, f"/{scope}"))


def own_cgroup(proc_self_cgroup: str) -> str:
    """This process's cgroup in the hierarchy that counts CPU: v1's cpuacct, else v2's."""
    lines = [line.split(":", 2) for line in proc_self_cgroup.splitlines()]
    return next((path for _, names, path in lines if "cpuacct" in names.split(",")),
                next(path for _, names, path in lines if names == ""))


def test_this_processs_own_counter_rises_by_at_least_its_own_cpu():
    """The real kernel's counter through the same code, for this process's
    own cgroup (its CPU, time.process_time(), is the baseline: the cgroup
    counts at least that, and other processes' work besides)."""
    path = counter_file(Path("/sys/fs/cgroup"), own_cgroup(Path("/proc/self/cgroup").read_text()))
    assert path is not None
    counters = CgroupCounters({"me": path})
    own = time.process_time()
    before = counters.read(["me", "not-watched"])
    assert list(before) == ["me"]
    spin = sum(i * i for i in range(2_000_000))
    after = counters.read(["me"])
    own = time.process_time() - own
    assert spin and own > 0.02
    assert after["me"].at_ns > before["me"].at_ns
    assert after["me"].cpu_ns - before["me"].cpu_ns >= 0.9 * own * 1e9
    assert between(before, after) == {"me": (before["me"].cpu_ns, after["me"].cpu_ns)}


def test_an_unreadable_counter_leaves_its_role_out(tmp_path):
    """A twin restarting has no cgroup for a moment: that window is cAdvisor's."""
    gone = CgroupCounters({"a": tmp_path / "docker" / CONTAINER / "cpuacct.usage"})
    assert gone.read(["a"]) == {}
    assert between({"a": Reading(1, 5)}, {}) == {}


def test_a_counter_agrees_with_cadvisors_reading_of_the_same_container():
    counter = parse_cpuacct_usage((CGROUP / "v1-cpuacct.usage").read_text())
    read_at = 1_795_960_000 * 10**9
    # cAdvisor read it 1.5 s earlier, 0.4 core-seconds lower: one core could have done that
    assert agrees(counter, read_at, counter - 400_000_000, read_at - 1_500_000_000, cores=1.0)
    # below cAdvisor's earlier reading, or more than its cores could have used: another cgroup's
    assert not agrees(counter, read_at, counter + 1, read_at - 1_500_000_000, cores=1.0)
    assert not agrees(counter, read_at, counter - 3_000_000_000, read_at - 1_500_000_000, cores=1.0)


def duet_block() -> dict:
    return json.loads((FIXTURES / "cadvisor" / "duet-1MB-block.json").read_text())


def series(entries: list[list[int]]) -> list[Counters]:
    return [Counters(t, cpu, 0, 0, 0, ws, 0) for t, cpu, ws in entries]


def test_both_twins_get_the_same_window_where_cadvisors_stamps_gave_each_its_own():
    """What the readings at the edges replace: in this A/A block, cAdvisor's
    entries put A's CPU over 1.47 s and B's over 1.29 s of the 3.07 s
    window, stretches 0.8 s apart, and their CPU per request 13% apart (the
    figures bench recorded, kept beside as cadvisor_*); read at the edges,
    both cover the window itself."""
    block = duet_block()
    start, end = block["started_ns"], block["ended_ns"]
    used = {}
    for side in (block["a"], block["b"]):
        before = 10**9 * (1 if side == block["a"] else 2)  # any counts: each twin's own
        used[side] = container_usage(series(block["series"][side]), start, end, block["whole"][side],
                                     block["rps"][side], 1.0, counters=(before, before + 1_500_000_000))
        recorded = block["recorded"][side]
        assert used[side]["cadvisor_window_seconds"] == recorded["window_seconds"]
        assert used[side]["cadvisor_cpu_ms_per_request"] == pytest.approx(recorded["cpu_ms_per_request"], rel=2e-3)
    a, b = used[block["a"]], used[block["b"]]
    assert a["cadvisor_window_seconds"] == 1.466 and b["cadvisor_window_seconds"] == 1.291
    assert b["cadvisor_cpu_ms_per_request"] / a["cadvisor_cpu_ms_per_request"] == pytest.approx(0.874, abs=0.002)
    assert a["window_seconds"] == b["window_seconds"] == round((end - start) / 1e9, 3)
    assert a["cpu_ms_per_request_from"] == b["cpu_ms_per_request_from"] == PER_REQUEST_EDGES


def test_counters_read_at_the_edges_are_the_windows_cpu():
    """With bench's own readings the window is the run for both twins: its
    CPU over its whole answers; cAdvisor's figure is kept beside it. Figures
    worked by hand: 1.50 s of CPU over 809 answers is 1.854 ms each."""
    block = duet_block()
    start, end, a = block["started_ns"], block["ended_ns"], block["a"]
    counters = (22_736_623_542, 22_736_623_542 + 1_500_000_000)
    used = container_usage(series(block["series"][a]), start, end, block["whole"][a], block["rps"][a], 1.0,
                           counters=counters)
    seconds = (end - start) / 1e9
    assert used["cpu_ms_per_request_from"] == PER_REQUEST_EDGES and used["inner_window"]
    assert used["window_seconds"] == round(seconds, 3) == 3.072
    assert used["cpu_seconds"] == 1.5 and used["cores"] == round(1.5 / seconds, 4)
    assert used["cpu_ms_per_request"] == round(1500 / 809, 6)
    assert used["cadvisor_cpu_ms_per_request"] == pytest.approx(block["recorded"][a]["cpu_ms_per_request"], rel=2e-3)
    assert used["cadvisor_window_seconds"] == 1.466
    # the idle rate taken off in the same proportion, as for cAdvisor's figure
    net = container_usage(series(block["series"][a]), start, end, block["whole"][a], block["rps"][a], 1.0,
                          idle=0.05, counters=counters)
    assert net["cpu_ms_per_request_net"] == pytest.approx(1500 / 809 * (1 - 0.05 / (1.5 / seconds)), rel=1e-4)


def test_a_counter_that_went_back_falls_back_to_cadvisors_window():
    """The twin restarted between the two readings (its cgroup made anew,
    its counter from zero): no figure from them, cAdvisor's instead."""
    block = duet_block()
    start, end, a = block["started_ns"], block["ended_ns"], block["a"]
    used = container_usage(series(block["series"][a]), start, end, block["whole"][a], block["rps"][a], 1.0,
                           counters=(2_000_000_000, 18_685_290))
    assert used["cpu_ms_per_request_from"] == PER_REQUEST_RATE and "cadvisor_cores" not in used
    assert used["window_seconds"] == 1.466


def test_the_page_says_whose_cpu_covers_the_window_exactly():
    from bench.report.change import render_change
    from bench.results import Results
    ab = {"a": "flask-postgres", "b": "flask-postgres-b", "kind": "A/A", "change": "", "blocks": 12,
          "threshold": 0.05, "machine": {}, "cases": [], "rows": [],
          "cpu_counters": {"read_by_bench": ["flask-postgres", "postgres"],
                           "from_cadvisor": {"flask-postgres-b": "on another host than bench's (paths)"}}}
    page = render_change(Results(run_id="r", started_at="s", environment={}, ab=ab))
    assert ("**CPU read at each window's edges** by bench, from the cgroups' counters: `flask-postgres`, "
            "`postgres`; **from cAdvisor's stamps**") in page
    assert "`flask-postgres-b` (on another host than bench's (paths))" in page
    # a run from before these readings: nothing said
    del ab["cpu_counters"]
    assert "window's edges" not in render_change(Results(run_id="r", started_at="s", environment={}, ab=ab))


def test_without_a_tree_or_cadvisor_every_role_says_why_it_falls_back(tmp_path):
    from support.processes import free_port

    from bench.measure.monitor import CadvisorClient, Monitor
    monitor = Monitor(CadvisorClient(f"http://127.0.0.1:{free_port()}", timeout=1), ["flask"], ["postgres"])
    roles = ["flask", "postgres"]
    assert monitor.find_counters("", roles) == dict.fromkeys(roles, "CGROUP_DIR is empty")
    assert monitor.find_counters(str(tmp_path / "none"), roles) == dict.fromkeys(
        roles, f"{tmp_path / 'none'} is not there (compose.yaml mounts it)")
    found = monitor.find_counters(str(tmp_path), roles)
    assert set(found) == set(roles) and all(why.startswith("cAdvisor did not list the containers") for why in
                                            found.values())
    assert monitor.read_counters(roles) == {}  # nothing found, nothing read: cAdvisor's windows
