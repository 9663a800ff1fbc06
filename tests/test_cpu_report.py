"""CPU and memory of a timed run, its flags, and how report.md and the charts
show them; every figure derived from the real cAdvisor JSON and /proc/stat
lines in tests/fixtures/cadvisor (a compose run of `ab -c 5` against
nginx-static, on 2 cores: mongo, bench and cAdvisor pinned to core 0)."""
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.measure.cadvisor import Counters, parse_docker_list, services_of_project
from bench.report.cpu_time import cpu_over_time
from bench.report.markdown import render_markdown
from bench.results import Results, TargetResult, failed_run, repeated_run
from bench.measure.usage import (CORE_SATURATED, LOADGEN, LOADGEN_BOUND, SHORT_WINDOW, HostReading, WindowInput,
                                busy_between, busy_shares, container_usage, cores_series, edges, flags, host_at,
                                parse_proc_stat, window)

FIXTURES = Path(__file__).parent / "fixtures" / "cadvisor"
TARGET, DATABASE = "nginx-static", "mongo"
SVG = "{http://www.w3.org/2000/svg}"
RPS = 1000.0  # a rate for the arithmetic; CPU per request is cores / rate


def compose():
    containers = parse_docker_list(json.loads((FIXTURES / "v1.3-docker-compose-ab.json").read_text()))
    ours = services_of_project(containers, "gridfs-lab-cpu")
    return {TARGET: ours[TARGET], DATABASE: ours[DATABASE], LOADGEN: ours["bench"]}, containers


def stamps(role: str) -> list[int]:
    return [c.timestamp_ns for c in compose()[0][role].stats]


def busy() -> dict[str, float]:
    return busy_shares(parse_proc_stat((FIXTURES / "proc-stat-cpus-start.txt").read_text()),
                       parse_proc_stat((FIXTURES / "proc-stat-cpus-end.txt").read_text()))


def host_readings(start_ns: int, end_ns: int) -> list[HostReading]:
    """The fixture's two /proc/stat readings, just outside a run."""
    return [HostReading(start_ns - 1, parse_proc_stat((FIXTURES / "proc-stat-cpus-start.txt").read_text())),
            HostReading(end_ns + 1, parse_proc_stat((FIXTURES / "proc-stat-cpus-end.txt").read_text()))]


def measure(start_ns: int, end_ns: int, requests: int = 3000, tool_cores: float = 0.3):
    roles, containers = compose()
    run = WindowInput(start_ns, end_ns, requests, RPS, tool_cores, 1, busy(), host_readings(start_ns, end_ns))
    return window({r: list(c.stats) for r, c in roles.items()}, {r: c.cpu_allowance for r, c in roles.items()},
                  {r: c.cpuset for r, c in roles.items()}, TARGET, run, 1.0,
                  all_series={c.id: list(c.stats) for c in containers}, host_cpus=2)


def test_the_window_is_the_first_and_last_reading_inside_the_run():
    target = stamps(TARGET)
    start, end = target[3] - 1, target[-1] + 1  # the run covers the last three readings
    cpu, found, figures = measure(start, end)
    series = compose()[0][TARGET].stats
    first, last = series[3], series[-1]
    used = cpu[TARGET]
    assert used["inner_window"] is True
    seconds = (last.cpu_total_ns - first.cpu_total_ns) / 1e9
    assert used["cpu_seconds"] == pytest.approx(seconds, abs=1e-6)
    assert used["window_seconds"] == pytest.approx((last.timestamp_ns - first.timestamp_ns) / 1e9, abs=1e-3)
    assert used["cores"] == pytest.approx(seconds / used["window_seconds"], abs=1e-3)
    assert used["cpu_ms_per_request"] == pytest.approx(used["cores"] * 1000 / RPS, rel=1e-3)
    assert used["peak_memory_bytes"] == last.max_usage_bytes  # cgroup v1: max_usage is there
    assert figures["seconds"] == pytest.approx((end - start) / 1e9, abs=1e-3)


def test_a_run_shorter_than_two_readings_falls_back_to_the_readings_around_it_and_is_flagged():
    target = stamps(TARGET)
    start, end = target[4] + 1, target[5] - 1  # between two readings: none inside
    cpu, found, _ = measure(start, end, requests=300)
    series = compose()[0][TARGET].stats
    assert cpu[TARGET]["inner_window"] is False
    cpu_seconds = (series[5].cpu_total_ns - series[4].cpu_total_ns) / 1e9
    assert cpu[TARGET]["cpu_ms_per_request"] == pytest.approx(cpu_seconds * 1000 / 300, rel=1e-3)
    assert SHORT_WINDOW in found


def test_short_window_is_about_the_containers_that_worked():
    """An idle container (PostgreSQL during a GridFS case) and the load
    generator with fewer than two readings leave the figures exact; the
    target or its working database with fewer do not."""
    def used(cores: float, inner: bool) -> dict:
        return {"cores": cores, "inner_window": inner, "cpuset": [1], "throttled_periods": 0}

    busy = {"cpu0": 0.5, "cpu1": 0.5}
    exact = {"flask": used(0.9, True), "mongo": used(0.8, True), "postgres": used(0.002, False),
             LOADGEN: used(0.06, False)}
    assert SHORT_WINDOW not in flags(exact, "flask", 0.06, 1.0, busy)
    for role in ("flask", "mongo"):
        rough = {**exact, role: used(exact[role]["cores"], False)}
        assert SHORT_WINDOW in flags(rough, "flask", 0.06, 1.0, busy), role
    idle_target = {**exact, "flask": used(0.0, False)}
    assert SHORT_WINDOW in flags(idle_target, "flask", 0.06, 1.0, busy)


def test_a_series_that_does_not_reach_past_the_run_gives_no_window():
    series = compose()[0][TARGET].stats
    assert edges(list(series), series[-1].timestamp_ns + 1, series[-1].timestamp_ns + 10**9) is None


def test_no_container_is_ever_above_its_allowance_on_real_readings():
    """Every window between readings of the capture: cores stay within the
    cpuset (1 core each); rates over cAdvisor's own stamps cannot exceed it."""
    roles, _ = compose()
    for role, c in roles.items():
        stats = list(c.stats)
        for i in range(len(stats)):
            for j in range(i + 1, len(stats)):
                used = container_usage(stats, stats[i].timestamp_ns, stats[j].timestamp_ns, 100, RPS,
                                       c.cpu_allowance)
                assert 0 <= used["cores"] <= c.cpu_allowance * 1.02, (role, i, j, used)


def test_busy_shares_from_proc_stat_per_cpu():
    start = parse_proc_stat((FIXTURES / "proc-stat-cpus-start.txt").read_text())
    end = parse_proc_stat((FIXTURES / "proc-stat-cpus-end.txt").read_text())
    shares = busy()
    for cpu in ("cpu", "cpu0", "cpu1"):
        expected = (end.busy[cpu] - start.busy[cpu]) / (end.total[cpu] - start.total[cpu])
        assert shares[cpu] == pytest.approx(expected, abs=1e-4)
        assert 0 <= shares[cpu] <= 1


def test_the_host_between_two_readings_is_interpolated_and_not_read_past_them():
    a = parse_proc_stat("cpu  100 0 0 900 0 0 0 0\ncpu0 100 0 0 900 0 0 0 0\n")
    b = parse_proc_stat("cpu  700 0 0 1300 0 0 0 0\ncpu0 700 0 0 1300 0 0 0 0\n")
    readings = [HostReading(1_000, a), HostReading(2_000, b)]
    middle = host_at(readings, 1_250)
    assert middle.busy["cpu"] == 250 and middle.total["cpu"] == 1_250
    assert host_at(readings, 999) is None and host_at(readings, 2_001) is None
    assert host_at(readings, 2_000) == b
    assert busy_between(readings, 1_250, 1_750) == {"cpu": 0.6, "cpu0": 0.6}
    assert busy_between(readings, 500, 1_750) == {}


def test_the_host_figure_covers_the_machine_readings_stretch_not_the_runs_edges():
    """/proc/stat over the run's edges took in ab's start and the idle second
    after it: 1.056 cores against cAdvisor's 1.18 in CI. Over the machine's
    own readings' stretch the two agree."""
    def stat(busy_ticks: int, at_s: float) -> HostReading:
        total = int(at_s * 200)  # two cores, 100 ticks a second each
        return HostReading(int(at_s * 1e9), parse_proc_stat(f"cpu  {busy_ticks} 0 0 {total - busy_ticks} 0 0 0 0\n"))
    # idle (0.1 cores) until 1 s, 1.2 cores from 1 s to 9 s, idle again to 10 s
    readings = [stat(0, 0.0), stat(10, 1.0), *(stat(10 + int(120 * (t - 1)), t) for t in range(2, 10)),
                stat(970, 10.0)]
    machine = [Counters(int(t * 1e9), int((1.2 * t) * 1e9), 0, 0, 0, 0, 0) for t in range(1, 10)]
    run = WindowInput(int(0.05e9), int(9.95e9), 900, 100.0, 0.1, 1, host=readings)
    _, _, figures = window({}, {}, {}, "flask", run, None, machines=[machine], host_cpus=2)
    assert figures["machine_cores"] == pytest.approx(1.2)
    assert figures["host_cores"] == pytest.approx(1.2, abs=0.01)
    assert busy_between(readings, run.start_ns, run.end_ns)["cpu"] * 2 < 1.0  # what the run's edges read


def test_steal_is_not_work_done_here():
    # user nice system idle iowait irq softirq steal guest guest_nice: the
    # hypervisor's steal is wall time no cgroup of this machine can count
    stat = parse_proc_stat("cpu  100 0 50 800 10 5 5 30 7 0\ncpu0 100 0 50 800 10 5 5 30 7 0\n")
    assert stat.busy["cpu"] == 160 and stat.total["cpu"] == 1000


def usage_on(cpuset: tuple[int, ...], cores: float = 0.5, inner: bool = True, allowance: float = 1.0) -> dict:
    return {"cores": cores, "inner_window": inner, "allowance_cores": allowance, "cpuset": list(cpuset),
            "throttled_periods": 0}


def test_core_saturated_only_for_a_busy_core_that_two_containers_share():
    shared = {TARGET: usage_on((1,)), DATABASE: usage_on((0,)), LOADGEN: usage_on((0,))}
    assert CORE_SATURATED in flags(shared, TARGET, 0.3, 1, {"cpu0": 0.95, "cpu1": 0.2})
    assert CORE_SATURATED not in flags(shared, TARGET, 0.3, 1, {"cpu0": 0.85, "cpu1": 0.99})
    apart = {TARGET: usage_on((2,)), DATABASE: usage_on((1,)), LOADGEN: usage_on((3,))}
    assert CORE_SATURATED not in flags(apart, TARGET, 0.3, 1, {f"cpu{i}": 0.99 for i in range(4)})


def test_loadgen_bound_from_the_tools_own_cpu_or_its_container_never_above_one_core():
    idle = {TARGET: usage_on((1,)), LOADGEN: usage_on((0,), cores=0.2)}
    assert LOADGEN_BOUND not in flags(idle, TARGET, 0.5, 1, {})
    assert LOADGEN_BOUND in flags(idle, TARGET, 0.95, 1, {})  # ab's rusage over its wall time
    busy_container = {TARGET: usage_on((1,)), LOADGEN: usage_on((0,), cores=0.93)}
    assert LOADGEN_BOUND in flags(busy_container, TARGET, 0.5, 1, {})
    # a fallback window's cores are diluted by idle edges: not evidence either way
    assert LOADGEN_BOUND not in flags({LOADGEN: usage_on((0,), cores=0.93, inner=False)}, TARGET, 0.5, 1, {})


def test_cross_check_sums_every_container_against_the_machine_and_host():
    target = stamps(TARGET)
    _, _, figures = measure(target[3] - 1, target[-1] + 1)
    assert figures["containers"] >= 3
    assert figures["containers_cores"] > 0
    assert figures["host_cores"] == pytest.approx(busy()["cpu"] * 2, abs=1e-3)


def test_cores_series_uses_cadvisor_timestamps():
    series = compose()[0][TARGET].stats
    points = cores_series(list(series))
    assert len(points) == len(series) - 1
    a, b = series[-2], series[-1]
    assert points[-1] == (b.timestamp_ns / 1e9,
                          pytest.approx((b.cpu_total_ns - a.cpu_total_ns) / (b.timestamp_ns - a.timestamp_ns)))


# --- the report ------------------------------------------------------------------
def rep(rps: float, p99: float, cpu_ms: float, flags_=(), start_ns: int = 0) -> dict:
    """A repetition as bench keeps it (a Measurement dict plus its window)."""
    return {"tool": "ab", "requests": int(rps * 4), "failed": 0, "seconds": 4.0, "rps": rps,
            "time_per_request_ms": 1000 / rps, "transfer_kbps": rps, "p50_ms": p99 / 3, "p90_ms": p99 / 2,
            "p99_ms": p99, "max_ms": p99 * 2, "threads": 1, "loadgen_cpu_seconds": 1.0, "raw_output": f"{rps}.txt",
            "cpu": {"t": {"cpu_ms_per_request": cpu_ms, "cores": 0.5, "allowance_cores": 1.0,
                          "peak_memory_bytes": 2**20}},
            "flags": list(flags_), "cpu_window": {"start_ns": start_ns, "end_ns": start_ns + 4 * 10**9}}


def with_target(reps: list[dict], target: str) -> list[dict]:
    return [{**r, "cpu": {target: r["cpu"]["t"], "mongo": {**r["cpu"]["t"], "cpu_ms_per_request": 2.0}}}
            for r in reps]


def results_of(runs) -> Results:
    names = list(dict.fromkeys(r.target for r in runs))
    # each path's store as bench records it from its label lab.store
    stores = {"nginx-static": "disk"}
    return Results(run_id="r", started_at="s", parameters={"BENCH_CONCURRENCY": "5"},
                   environment={"server": {"product": "MongoDB", "version": "7.0.14"}},
                   targets=[TargetResult(n, f"http://{n}:8080", True, store=stores.get(n, "GridFS")) for n in names],
                   runs=runs,
                   timing={"repetitions": 3, "duration_s": 4.0, "tools": ["ab"]}, status="complete")


def test_a_row_is_one_repetition_never_a_mix():
    reps = with_target([rep(1000, 9.0, 0.1), rep(1200, 3.0, 0.2), rep(900, 5.0, 0.3)], "flask")
    run = repeated_run("flask", "1KB.bin", 1024, 5, reps, 4.0)
    assert run.rps == 1000 and run.p99_ms == 9.0  # both from the median repetition, not medians of each
    assert run.cpu["flask"]["cpu_ms_per_request"] == 0.1
    assert run.spread["half_range"] == pytest.approx((1200 - 900) / 2 / 1000)
    assert run.noisy and "noisy" in run.flags


def test_a_failed_case_reads_failed_in_every_table_never_a_number():
    base = repeated_run("nginx-static", "1KB.bin", 1024, 5, with_target([rep(10000, 1, 0.05)] * 3, "nginx-static"))
    dead = failed_run("node", "1KB.bin", 1024, 5, "target stopped answering: connection refused")
    results = results_of([base, dead])
    assert results.failed
    report = render_markdown(results)
    headline = report.split("## Requests per second")[0]
    assert "| node | GridFS | 1KB | failed | failed |" in headline
    assert "1 case(s) failed" in headline and "connection refused" in headline
    rps_table = report.split("## Requests per second")[1].split("## CPU ms per request")[0]
    assert "| 1KB | 10000 " in rps_table and "| failed |" in rps_table
    assert "0.000" not in report.split("## Every case")[0]


def test_headline_first_with_ratios_and_a_flagged_baseline_marked():
    base = repeated_run("nginx-static", "1MB.bin", 2**20, 5,
                        with_target([rep(2000, 2, 0.4, [LOADGEN_BOUND])] * 3, "nginx-static"))
    gridfs = repeated_run("nginx-gridfs", "1MB.bin", 2**20, 5, with_target([rep(20, 60, 2.4)] * 3, "nginx-gridfs"))
    report = render_markdown(results_of([base, gridfs]))
    first_screen = report.split("## Requests per second")[0]
    assert "## Headline" in first_screen
    assert "| nginx-gridfs | GridFS | 1MB | 20 | 0.01† | 6.00† |" in first_screen
    assert "**nginx-gridfs** (GridFS) at 0.01× nginx-static's requests per second" in first_screen
    assert "⚑ `loadgen-bound`" in first_screen and "† a ratio taken against a flagged" in first_screen


def test_results_round_trip(tmp_path):
    base = repeated_run("nginx-static", "1KB.bin", 1024, 5, with_target([rep(10000, 1, 0.05)] * 3, "nginx-static"))
    results = results_of([base, failed_run("flask", "1KB.bin", 1024, 5, "ab exited with 22")])
    results.write_json(tmp_path / "results.json")
    again = Results.load(tmp_path / "results.json")
    assert again.to_dict() == results.to_dict()
    assert render_markdown(again) == render_markdown(results)


def test_cpu_over_time_is_an_svg_per_target_with_its_database_the_load_generator_and_each_repetition_shaded():
    roles, _ = compose()
    series = roles[TARGET].stats
    reps = [rep(1000, 1, 0.1, start_ns=series[i].timestamp_ns) for i in (1, 3)]
    results = results_of([repeated_run(TARGET, "1KB.bin", 1024, 5, with_target(reps, TARGET))])
    results.cpu_samples = {role: [[s.timestamp_ns, s.cpu_total_ns, s.working_set_bytes] for s in c.stats]
                           for role, c in roles.items()}
    (figure,) = cpu_over_time(results)
    root = ET.fromstring(figure.svg)
    lines = {line.find(f"{SVG}title").text for line in root.iter(f"{SVG}polyline")}
    assert lines == {f"{TARGET} (target)", f"{DATABASE} (database)", f"{LOADGEN} (load generator)"}
    assert [band.find(f"{SVG}title").text for band in root.iter(f"{SVG}rect") if band.find(f"{SVG}title") is not None
            ] == ["1KB c=5", "1KB c=5"]
    assert "### CPU over time" in render_markdown(results)
    assert "](cpu-cores-over-time-nginx-static.svg)" in render_markdown(results)
    results.cpu_samples = {}  # nothing sampled: no chart, no empty section
    assert cpu_over_time(results) == [] and "### CPU over time" not in render_markdown(results)


def test_a_caching_paths_hits_are_counted_and_a_missing_cache_is_flagged():
    from bench.measure.cache_log import counts
    from bench.measure.usage import CACHE_MISSED
    words = ["HIT"] * 990 + ["MISS"] * 9 + ["EXPIRED"]
    c = counts(words)
    assert (c["hits"], c["misses"], c["other"], c["requests"]) == (990, 9, {"EXPIRED": 1}, 1000)
    assert c["hit_ratio"] == 0.99
    run = repeated_run("nginx-cache", "1KB.bin", 1024, 5, with_target([rep(1000, 1, 0.1)], "nginx-cache"))
    run.cache = counts(["HIT"] * 90 + ["MISS"] * 10)
    run.flags.append(CACHE_MISSED)
    report = render_markdown(results_of([run]))
    assert "| nginx-cache | 1KB | 5 | 90 | 10 | 0 | 0.9000 |" in report
    assert "◇ `cache-missed`" in report


def test_cpu_per_request_net_of_the_idle_rate_measured_before_the_case():
    from bench.measure.monitor import Monitor
    from bench.measure.usage import idle_cores
    roles, containers = compose()
    series = list(roles[DATABASE].stats)
    # the database's rate over the capture's first readings stands for its rate at rest
    idle = idle_cores(series, series[0].timestamp_ns, series[2].timestamp_ns)
    assert idle == pytest.approx((series[2].cpu_total_ns - series[0].cpu_total_ns) / 1e9
                                 / ((series[2].timestamp_ns - series[0].timestamp_ns) / 1e9))

    class Client:  # cAdvisor's answer, as captured
        def containers(self, num_stats):
            return containers
    monitor = Monitor(Client(), [TARGET], [DATABASE])
    monitor.ids = {role: c.id for role, c in roles.items()}
    at_rest = monitor.idle(series[0].timestamp_ns, series[2].timestamp_ns)
    assert at_rest[DATABASE] == pytest.approx(idle, abs=1e-4) and TARGET in at_rest
    # a container whose stored stats do not reach back that far is left out, not guessed
    assert all(idle_cores(list(roles[r].stats), series[0].timestamp_ns, series[2].timestamp_ns) is None
               for r in set(roles) - set(at_rest))

    target = stamps(TARGET)
    start, end = target[3] - 1, target[-1] + 1
    roles_series = {r: list(c.stats) for r, c in roles.items()}
    run = WindowInput(start, end, 3000, RPS, 0.3, 1, busy(), idle={DATABASE: 0.01})
    cpu, _, _ = window(roles_series, {r: c.cpu_allowance for r, c in roles.items()},
                       {r: c.cpuset for r, c in roles.items()}, TARGET, run, 1.0)
    db = cpu[DATABASE]
    assert db["idle_cores"] == 0.01
    assert db["cpu_ms_per_request_net"] == pytest.approx(max(db["cores"] - 0.01, 0) * 1000 / RPS, abs=1e-5)
    assert cpu[TARGET]["idle_cores"] is None and cpu[TARGET]["cpu_ms_per_request_net"] is None  # not measured


def test_work_outside_the_containers_during_a_run_flags_it_disturbed():
    """The quiet check before a run cannot see what starts during it: the
    machine's cores less every container's can. Figures from a real A/A
    window here (block 6, an ab run on the host beside it) and a clean one."""
    from bench.measure.usage import DISTURBED, outside_cores
    clean = {"containers_cores": 1.9166, "containers": 13, "machine_cores": 1.9775, "host_cores": 1.9506}
    shared = {"containers_cores": 1.3141, "containers": 13, "machine_cores": 1.9145, "host_cores": 1.897}
    assert outside_cores(clean) == pytest.approx(0.0609)
    assert outside_cores(shared) == pytest.approx(0.6004)
    # without cAdvisor's root cgroup, /proc/stat's whole-host figure
    assert outside_cores({**shared, "machine_cores": None}) == pytest.approx(0.5829)
    assert outside_cores({"containers_cores": 0.0, "containers": 0, "machine_cores": 1.0}) is None

    def series(cores: float) -> list[Counters]:  # a reading a second, `cores` busy
        return [Counters(int(t * 1e9), int(t * cores * 1e9), 0, 0, 0, 0, 0) for t in range(6)]

    run = WindowInput(int(0.5e9), int(4.5e9), 400, 100.0, 0.1, 1)
    for machine, disturbed in ((1.0, False), (1.6, True)):
        _, found, figures = window({"flask": series(0.9)}, {"flask": 1.0}, {}, "flask", run, None,
                                   all_series={"flask": series(0.9)}, machines=[series(machine)])
        assert (DISTURBED in found) is disturbed and figures["outside_cores"] == pytest.approx(machine - 0.9)


def test_a_window_too_short_for_two_readings_is_not_judged_disturbed():
    """Under two readings, each container's rate spans its own stretch just
    outside the run (warm-up on one side, rest on the other): the gap to the
    machine is no evidence of outside work, and the block is not re-run."""
    from bench.measure.usage import DISTURBED

    def series(cores: float, first: float = 0.0) -> list[Counters]:
        return [Counters(int((first + t) * 1e9), int((first + t) * cores * 1e9), 0, 0, 0, 0, 0) for t in range(6)]

    run = WindowInput(int(2.2e9), int(2.8e9), 60, 100.0, 0.1, 1)
    # the target's readings fall on whole seconds, the database's are not fetched past the run yet
    _, found, figures = window({"flask": series(0.9)}, {"flask": 1.0}, {}, "flask", run, None,
                               all_series={"flask": series(0.9), "mongo": series(0.5)[:3]}, machines=[series(1.6)])
    assert not figures["inner_window"] and "outside_cores" not in figures
    assert DISTURBED not in found and SHORT_WINDOW in found


def test_a_split_lab_lists_its_hosts_and_the_link_in_both_renderings():
    from bench.report.html import render_html
    run = repeated_run("nginx-static", "1MB.bin", 2**20, 5, with_target([rep(12, 30, 0.5, ["link-bound"])],
                                                                        "nginx-static"))
    results = results_of([run])
    results.environment["hosts"] = [
        {"name": "10.99.0.1", "cadvisor": "http://cadvisor:8080", "bench": True, "cpus": 2, "memory_bytes": 2**34,
         "containers": ["loadgen"]},
        {"name": "10.99.0.2", "cadvisor": "http://10.99.0.2:18088", "bench": False, "cpus": 8,
         "memory_bytes": 2**35, "containers": ["mongo", "nginx-static"]}]
    results.environment["link"] = {"address": "10.99.0.2", "port": 5201, "direction": "paths' host to bench's",
                                   "bits_per_second": 95_526_378, "sent_bits_per_second": 99_287_788,
                                   "rtt_ms": None, "retransmits": 0, "seconds": 5.0}
    report = render_markdown(results)
    assert "| 10.99.0.1 (bench) | 2 | 16.0 GiB | loadgen |" in report
    assert "| 10.99.0.2 | 8 | 32.0 GiB | mongo, nginx-static |" in report
    assert "**95.5 Mbit/s** received, 0 retransmits" in report
    assert run.bottleneck == "link" and "link-bound" in run.flags
    page = render_html(results)
    assert "<h2>Hosts</h2>" in page or "Hosts</h" in page
    assert "95.5 Mbit/s" in page
    # one machine: no such section
    assert "## Hosts" not in render_markdown(results_of([run]))
