"""CPU and memory of a timed window, its flags, and how report.md and the
charts show them; every figure derived from the real cAdvisor JSON and
/proc/stat lines in tests/fixtures/cadvisor."""
import dataclasses
import json
from pathlib import Path

import pytest

from bench.cadvisor import parse_docker_list, services_of_project
from bench.charts import cpu_chart
from bench.report import render_markdown
from bench.results import Results, Run, TargetResult
from bench.usage import (LOADGEN, LOADGEN_BOUND, LOADGEN_BOUND_SHARE, SHORT_WINDOW, SHORT_WINDOW_SECONDS, THROTTLED,
                         Snapshot, container_usage, cores_series,
                         host_busy_seconds, window)

FIXTURES = Path(__file__).parent / "fixtures" / "cadvisor"
TARGET, DATABASE = "nginx-static", "mongo"
REQUESTS = 3000  # the capture ran `ab -n 3000 -c 5` between the first and last entries


def compose_containers():
    return parse_docker_list(json.loads((FIXTURES / "v1.3-docker-compose-ab.json").read_text()))


def edge(index: int, proc_stat: str | None = None) -> Snapshot:
    """A window edge made of stats entry `index` of every container."""
    containers = compose_containers()
    ours = services_of_project(containers, "gridfs-lab-cpu")
    roles = {TARGET: ours[TARGET], DATABASE: ours[DATABASE], LOADGEN: ours["bench"]}
    return Snapshot(
        watched={role: c.stats[index] for role, c in roles.items()},
        allowance={role: c.cpu_allowance for role, c in roles.items()},
        containers={c.id: c.stats[index] for c in containers},
        host_busy_seconds=host_busy_seconds((FIXTURES / proc_stat).read_text()) if proc_stat else None)


def busy_seconds(start: Snapshot, end: Snapshot) -> float:
    return (end.watched[TARGET].timestamp_ns - start.watched[TARGET].timestamp_ns) / 1e9


@pytest.fixture
def measured():
    start, end = edge(0, "proc-stat-start.txt"), edge(-1, "proc-stat-end.txt")
    return start, end, window(start, end, TARGET, REQUESTS, busy_seconds(start, end))


def test_window_cpu_per_container(measured):
    start, end, (cpu, flags, figures) = measured
    assert set(cpu) == {TARGET, DATABASE, LOADGEN}
    for role in cpu:
        a, b = start.watched[role], end.watched[role]
        seconds = (b.cpu_total_ns - a.cpu_total_ns) / 1e9
        assert cpu[role]["cpu_seconds"] == pytest.approx(seconds, abs=1e-6)
        assert cpu[role]["cpu_ms_per_request"] == pytest.approx(seconds * 1000 / REQUESTS, abs=1e-6)
        assert cpu[role]["cores"] == pytest.approx(seconds / busy_seconds(start, end), abs=1e-4)
        assert cpu[role]["user_seconds"] == pytest.approx((b.cpu_user_ns - a.cpu_user_ns) / 1e9, abs=1e-3)
        assert cpu[role]["peak_memory_bytes"] == b.max_usage_bytes  # cgroup v1: max_usage is there
        assert cpu[role]["allowance_cores"] == 1.0
    # nginx served 3000 x 100 KB in the window; the database was idle.
    assert cpu[TARGET]["cpu_seconds"] > 0.1 > cpu[DATABASE]["cpu_seconds"]
    # Pinned by cpuset, no CFS quota, ab far from a whole core over the window:
    assert flags == []
    assert cpu[TARGET]["throttled_periods"] == 0


def test_window_figures_for_a_host_cross_check(measured):
    start, end, (_, _, figures) = measured
    both = start.containers.keys() & end.containers.keys()
    assert figures["containers"] == len(both) == 6
    assert figures["containers_cpu_seconds"] == pytest.approx(
        sum(end.containers[i].cpu_total_ns - start.containers[i].cpu_total_ns for i in both) / 1e9, abs=1e-6)
    stat = [[int(v) for v in (FIXTURES / f).read_text().split()[1:]] for f in ("proc-stat-start.txt", "proc-stat-end.txt")]
    busy = [sum(row[i] for i in (0, 1, 2, 5, 6, 7)) for row in stat]
    assert figures["host_cpu_seconds"] == pytest.approx((busy[1] - busy[0]) / 100, abs=1e-3)
    # The host (shared with other work when captured) did at least what the containers did.
    assert figures["host_cpu_seconds"] >= figures["containers_cpu_seconds"] > 0
    assert figures["seconds"] == pytest.approx((figures["end_ns"] - figures["start_ns"]) / 1e9, abs=1e-3)


def burner_stats():
    (burner,) = parse_docker_list(json.loads((FIXTURES / "v1.3-docker-lab-burner.json").read_text()))
    return burner


def test_flags_loadgen_bound_and_throttled():
    """The burner (spinning, capped at 0.5 core by CFS quota) stands in for a
    saturated load generator and a throttled target."""
    burner = burner_stats()
    a, b = burner.stats[0], burner.stats[-1]
    start = Snapshot({"burner": a, LOADGEN: a}, {"burner": burner.cpu_allowance, LOADGEN: burner.cpu_allowance})
    end = Snapshot({"burner": b, LOADGEN: b}, start.allowance)
    seconds = (b.timestamp_ns - a.timestamp_ns) / 1e9
    cpu, flags, _ = window(start, end, "burner", 1, seconds)
    assert cpu[LOADGEN]["cores"] == pytest.approx(0.5, abs=0.05)
    assert cpu["burner"]["throttled_periods"] == b.throttled_periods - a.throttled_periods > 0
    assert flags == [LOADGEN_BOUND, THROTTLED]

    # Under two seconds of ab, bench's container figure is mostly its own
    # cAdvisor reads at the edges: flagged short, not loadgen-bound on it.
    assert seconds > SHORT_WINDOW_SECONDS
    _, flags, _ = window(start, end, "burner", 1, SHORT_WINDOW_SECONDS / 2)
    assert flags == [THROTTLED, SHORT_WINDOW]

    # ab is one thread: a whole core of it is loadgen-bound whatever the cpuset.
    idle_target = edge(0), edge(-1)
    bench = idle_target[1].watched[LOADGEN]
    ab_cpu = (bench.cpu_total_ns - idle_target[0].watched[LOADGEN].cpu_total_ns) / 1e9
    busy = busy_seconds(*idle_target)
    assert busy > SHORT_WINDOW_SECONDS and ab_cpu < busy / 2
    cpu, flags, _ = window(*idle_target, TARGET, REQUESTS, busy, ab_cpu_seconds=ab_cpu)
    assert cpu[LOADGEN]["ab_cores"] == pytest.approx(ab_cpu / busy, abs=1e-4) and flags == []
    cpu, flags, _ = window(*idle_target, TARGET, REQUESTS, busy, ab_cpu_seconds=busy * LOADGEN_BOUND_SHARE)
    assert flags == [LOADGEN_BOUND]


def test_peak_memory_falls_back_to_working_set_without_max_usage():
    """cgroup v2 may report max_usage 0: the highest working set in the window."""
    stats = [dataclasses.replace(s, max_usage_bytes=0) for s in burner_stats().stats]
    used = container_usage(stats[0], stats[-1], 1, 1.0, None, stats)
    assert used["peak_memory_bytes"] == max(s.working_set_bytes for s in stats)
    assert container_usage(stats[-1], stats[0], 1, 1.0, None) is None  # counters went back: restarted


def test_cores_series_uses_cadvisor_timestamps():
    stats = burner_stats().stats
    series = cores_series(list(stats))
    assert len(series) == len(stats) - 1
    assert [t for t, _ in series] == [s.timestamp_ns / 1e9 for s in stats[1:]]
    assert all(cores == pytest.approx(0.5, abs=0.08) for _, cores in series)


def results_with_cpu(measured) -> Results:
    start, end, (cpu, flags, figures) = measured
    run = Run(TARGET, "100KB.bin", 102400, 5, REQUESTS, 0, 1000.0, 1.0, 100000.0, 4.0, 9.0,
              "nginx-static-100KB-c5.txt", cpu=cpu, flags=flags, cpu_window=figures)
    flagged = Run(TARGET, "1KB.bin", 1024, 5, REQUESTS, 0, 3000.0, 0.3, 3000.0, 1.0, 2.0,
                  "nginx-static-1KB-c5.txt", cpu=cpu, flags=[LOADGEN_BOUND], cpu_window=figures)
    ours = services_of_project(compose_containers(), "gridfs-lab-cpu")
    samples = {role: [[s.timestamp_ns, s.cpu_total_ns, s.working_set_bytes] for s in ours[service].stats]
               for role, service in ((TARGET, TARGET), (DATABASE, DATABASE), (LOADGEN, "bench"))}
    return Results(run_id="20261122T034800Z", started_at="2026-11-22T03:47:50+00:00",
                   parameters={"BENCH_CONCURRENCY": "5"},
                   environment={"server": {"product": "FerretDB", "version": "v1.24.2", "wire_version": "7.0.42"}},
                   targets=[TargetResult(TARGET, "http://nginx-static:8080", True)],
                   runs=[flagged, run], cpu_samples=samples, charts={TARGET: "cpu-nginx-static.png"})


def test_report_shows_cpu_per_request_flags_memory_and_chart(measured):
    results = results_with_cpu(measured)
    cpu = results.runs[1].cpu
    md = render_markdown(results)
    assert "## CPU ms per request (target / mongo; lower is better)" in md
    assert (f"| 100KB | {cpu[TARGET]['cpu_ms_per_request']:.3f} / "
            f"{cpu[DATABASE]['cpu_ms_per_request']:.3f} |") in md
    assert f"| 1KB | {cpu[TARGET]['cpu_ms_per_request']:.3f} / {cpu[DATABASE]['cpu_ms_per_request']:.3f} ⚑ |" in md
    assert f"| {TARGET} | 1KB | 5 | {cpu[TARGET]['cores']:.2f} of 1 |" in md
    assert f"| {LOADGEN_BOUND} |" in md
    assert f"| mongo | {cpu[DATABASE]['peak_memory_bytes'] / 2**20:.1f} |" in md
    assert "![nginx-static: CPU cores over time](cpu-nginx-static.png)" in md
    prose = md.replace("\n", " ")
    assert "On FerretDB the GridFS rows are bound by the database" in prose
    assert "its own CPU per request is the fairer comparison" in prose


def test_report_warns_when_cpu_was_not_measured():
    results = Results(run_id="r", started_at="t", targets=[TargetResult(TARGET, "u", True)],
                      runs=[Run(TARGET, "1KB.bin", 1024, 5, 500, 0, 1.0, 1.0, 1.0, 1.0, 1.0, "x.txt")],
                      warnings=["CPU and memory were not measured: cAdvisor at http://cadvisor:8080 never answered"])
    md = render_markdown(results)
    assert "> **Warning:** CPU and memory were not measured: cAdvisor" in md
    assert "## CPU ms per request" not in md
    assert "## Time per request" in md  # the timing results are all still there


def test_results_round_trip_with_cpu_and_old_results_still_load(measured, tmp_path):
    results = results_with_cpu(measured)
    results.write_json(tmp_path / "results.json")
    assert Results.load(tmp_path / "results.json") == results

    old = results.to_dict()
    for key in ("warnings", "cpu_samples", "charts"):
        del old[key]
    for run in old["runs"]:
        for key in ("cpu", "flags", "cpu_window"):
            del run[key]
    again = Results.from_dict(old)
    assert again.runs[0].cpu is None and again.runs[0].flags == [] and again.warnings == []
    assert "## CPU ms per request" not in render_markdown(again)


def test_chart_is_a_png_per_target(measured, tmp_path):
    results = results_with_cpu(measured)
    path = tmp_path / "cpu-nginx-static.png"
    assert cpu_chart(results, TARGET, DATABASE, LOADGEN, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    assert not cpu_chart(results, "flask", DATABASE, LOADGEN, tmp_path / "cpu-flask.png")  # never timed
    assert not (tmp_path / "cpu-flask.png").exists()
