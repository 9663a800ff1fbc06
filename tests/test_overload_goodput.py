"""make overload's goodput check, its pure parts: real vegeta answers
(tests/fixtures/vegeta: nginx on loopback shedding with limit_req's 503,
cutting a proxied body, answering 404; and a closed loop of 2 workers)
tallied; the capacity climb; the flags that leave a window unjudged; the
verdict's arithmetic; the report. Then `python -m bench overload-window`
against a real nginx with a real vegeta."""
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench.env_file import read_env_file
from bench.clients.vegeta_output import Answer, parse_result, parse_results
from bench.faults.overload import (HOLDS_SHARE, ContainerAfter, Measured, Window, climbing, failure_kind,
                                   goodput_row, goodput_windows, loadgen_starved, rejudged, tally, window_flags)
from bench.measure.bottleneck import LATENCY, LOADGEN_CPU, SHARED_CORE
from bench.measure.cgroup_cpu import cpu_files
from bench.measure.usage import BEHIND_SCHEDULE, CORE_SATURATED, LOADGEN_BOUND
from bench.report.overload import render
from support.kept_runs import example_rounds
from support.modules import module_from_file

ROOT = Path(__file__).resolve().parent.parent

VEGETA = ROOT / "tests" / "fixtures" / "vegeta"
OPEN = VEGETA / "overload-shed-cut-404-rate100.jsonl"      # 100/s for 1 s over 6 URLs
CLOSED = VEGETA / "closed-loop-2workers-slow100KB.jsonl"   # -rate=0, 2 workers, answers ~0.1 s
RUNNING = ContainerAfter(oom_kills=0, status="running", oom_killed=False, exit_code=0, peak_bytes=None,
                         limit_bytes=0)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_an_open_loop_window_tallies_whole_refused_and_each_failure():
    raw = [json.loads(line) for line in lines(OPEN)]
    w = tally((parse_result(line) for line in lines(OPEN)), 100, 1000, 1.0)
    codes = [r["code"] for r in raw]
    assert w.sent == len(raw)
    assert w.whole == codes.count(200) and w.refused == codes.count(503)
    # the proxied body cut after its headers is status 0 with the reader's error
    assert w.failures == {"cut": codes.count(0), "status 404": codes.count(404)}
    assert w.whole + w.refused + sum(w.failures.values()) == w.sent
    # vegeta kept its schedule: 100 requests, first to last in 0.99 s
    assert 95 <= w.sent_rate <= 105
    refused_ms = sorted(r["latency"] / 1e6 for r in raw if r["code"] == 503)
    assert refused_ms[0] <= w.refused_p50_ms <= w.refused_p99_ms <= refused_ms[-1]
    whole_ms = [r["latency"] / 1e6 for r in raw if r["code"] == 200]
    assert min(whole_ms) <= w.admitted_p99_ms <= max(whole_ms)
    # every answer within the second asked: whole answers over that second
    assert w.whole_rate == pytest.approx(w.whole / 1.0)


def test_a_closed_loop_window_reads_at_its_workers_over_their_latency():
    answers = parse_results(CLOSED.read_text())
    w = tally(answers, 0, 2, 1.0)
    assert w.whole == len(answers) and w.refused == 0 and w.failures == {}
    # Little's law: 2 clients, each answer ~0.1 s; the window stretches past
    # the second asked to its last answer, so the rate is not cut short
    per_answer = sorted(a.latency for a in answers)[len(answers) // 2]
    assert w.whole_rate == pytest.approx(2 / per_answer, rel=0.1)
    assert w.last_done - w.first_sent > 1.0


def test_failures_are_named_by_what_vegeta_saw():
    report = json.loads((VEGETA / "refused-rate20.json").read_text())  # a port nothing listened on
    refused = Answer(0.0, 0.001, 0, 0, "", report["errors"][0])
    assert failure_kind(refused) == "connection refused"
    timeout = Answer(0.0, 30.0, 0, 0, "", 'Get "http://flask:8080/files/1MB.bin": context deadline exceeded '
                                          "(Client.Timeout exceeded while awaiting headers)")
    assert failure_kind(timeout) == "client timeout"
    assert failure_kind(Answer(0.0, 0.1, 503, 0, "", "503 Service Unavailable")) is None
    assert failure_kind(Answer(0.0, 0.1, 500, 0, "", "500 Internal Server Error")) == "status 500"


def test_the_capacity_climb_stops_when_the_rate_stops_rising():
    assert climbing([10.0]) and climbing([10.0, 19.0])
    assert not climbing([10.0, 19.0, 19.5])      # within 5% of the best: stop
    assert not climbing([10.0, 19.0, 30.0, 25.0])  # fell
    assert climbing([0.0]) and not climbing([0.0, 0.0])


def window(rate: float, whole_rate: float, refused_p99: float | None = 5.0, failures: dict | None = None,
           workers: int = 10000) -> Window:
    return Window(rate=rate, workers=workers, seconds=10.0, sent=int(rate * 10), sent_rate=rate,
                  whole=int(whole_rate * 10), whole_rate=whole_rate, refused=int((rate - whole_rate) * 10),
                  failures=failures or {}, refused_p50_ms=1.0 if refused_p99 else None, refused_p99_ms=refused_p99,
                  admitted_p99_ms=900.0, first_sent=0.0, last_done=10.0)


def steps(*rates: float) -> list[Measured]:
    return [Measured("flask", 0, 1, window(0, r, None, workers=2 ** i), [], LATENCY) for i, r in enumerate(rates)]


def overload(shares: dict[int, list[float]], cap: float = 100.0, bound: str = LATENCY, **kw) -> list[Measured]:
    return [Measured("flask", m, i + 1, window(m * cap, s * cap, **kw), [], bound)
            for m, ss in shares.items() for i, s in enumerate(ss)]


def test_a_path_holds_on_the_median_of_its_judged_windows():
    row = goodput_row("flask", steps(60, 100, 101), overload({3: [0.9, 0.7, 0.95], 10: [0.85, 0.82, 0.99]}), RUNNING)
    assert row.capacity_rps == 101 and row.capacity_workers == 4
    assert row.verdict == "holds"
    three = row.conditions[0]
    # capacity 101/s from the third step: 90.9 / 101 and so on
    assert three["multiple"] == 3 and three["judged"] == 3 and three["offered_rps"] == 303
    assert three["share"] == pytest.approx(90 / 101, abs=0.001)
    assert three["share_low"] == pytest.approx(70 / 101, abs=0.001)
    assert three["share_high"] == pytest.approx(95 / 101, abs=0.001)


def test_what_does_not_hold_is_named():
    windows = overload({3: [0.9, 0.9, 0.9]}) + overload({10: [0.3, 0.5, 0.4]}, refused_p99=250.0,
                                                        failures={"cut": 2})
    after = ContainerAfter(oom_kills=1, status="running", oom_killed=False, exit_code=0, peak_bytes=None,
                           limit_bytes=0)
    row = goodput_row("flask", steps(100), windows, after)
    assert row.verdict == "10x keeps 40%; 10x refusals' p99 250 ms; 6 x cut; 1 OOM kills"
    assert row.failures == {"cut": 6}
    assert HOLDS_SHARE == 0.8


def test_windows_the_load_generator_or_a_shared_core_bound_are_named_not_judged():
    windows = overload({3: [0.9, 0.9, 0.2]}) + overload({10: [0.1, 0.1, 0.1]}, bound=LOADGEN_CPU)
    windows[2] = Measured("flask", 3, 3, windows[2].window, [CORE_SATURATED], SHARED_CORE)
    row = goodput_row("flask", steps(100), windows, RUNNING)
    three, ten = row.conditions
    assert three["judged"] == 2 and three["share"] == pytest.approx(0.9) and three["not_judged"] == [
        "3x #3: shared core"]
    assert ten["judged"] == 0 and ten["share"] is None and len(ten["not_judged"]) == 3
    assert row.verdict == "10x not judged: every window's load generator saturated or shared a saturated core"


def test_window_flags_are_the_labs_own():
    def used(cores, cpus):
        return {"cores": cores, "inner_window": True, "allowance_cores": float(len(cpus)), "cpuset": list(cpus)}
    # bench on core 0 beside the database, the path on core 1 (cpus-2.env's pins)
    cpu = {"bench": used(0.5, [0]), "flask": used(0.99, [1]), "mongo": used(0.45, [0])}
    assert window_flags(cpu, "flask", 0.5, 1.0, {"cpu0": 0.6, "cpu1": 1.0}, 300, 300) == ([], "target's core")
    flags, bound = window_flags(cpu, "flask", 0.5, 1.0, {"cpu0": 0.97, "cpu1": 1.0}, 300, 300)
    assert flags == [CORE_SATURATED] and bound == SHARED_CORE
    cpu["bench"] = used(0.95, [0])
    flags, bound = window_flags(cpu, "flask", 0.95, 1.0, {"cpu0": 0.8}, 300, 250)
    assert flags == [LOADGEN_BOUND, BEHIND_SCHEDULE] and bound == LOADGEN_CPU


def test_a_starved_load_generators_client_timeouts_are_not_the_paths():
    """nginx-static answers from page cache on core 1 (0.31 of it); vegeta on
    core 0 kept its schedule, but work outside the lab's containers (a busy
    machine) filled that core: 0.58 of it vegeta's own, 97% busy in all. It
    read its answers late and timed out on them (2,196 over the three windows,
    as in a full test suite's make overload). Capacity as kept in
    results/evidence/overload-20261128T234415Z: 1,241/s at c=32."""
    def used(cores, cpus):
        return {"cores": cores, "inner_window": True, "allowance_cores": float(len(cpus)), "cpuset": list(cpus),
                "throttled_periods": 0}
    cpu = {"bench": {**used(0.62, [0]), "tool_cores": 0.58}, "nginx-static": used(0.31, [1])}
    busy = {"cpu": 0.74, "cpu0": 0.97, "cpu1": 0.51}
    flags, bound = window_flags(cpu, "nginx-static", 0.58, 1.0, busy, 3724, 3711)
    assert flags == [LOADGEN_BOUND] and bound == LOADGEN_CPU
    # a tenth of its core idle: vegeta could have read sooner, so its timeouts are the path's
    assert window_flags(cpu, "nginx-static", 0.58, 1.0, {**busy, "cpu0": 0.8}, 3724, 3711) == ([], LATENCY)

    late = Window(rate=3724, workers=10000, seconds=10.0, sent=37240, sent_rate=3711.0, whole=34800,
                  whole_rate=1160.0, refused=0, failures={"client timeout": 732}, refused_p50_ms=None,
                  refused_p99_ms=None, admitted_p99_ms=9650.0, first_sent=0.0, last_done=20.0)
    windows = [Measured("nginx-static", 3, r, late, flags, bound, cpu, busy) for r in (1, 2, 3)]
    capacity = [Measured("nginx-static", 0, 1, window(0, 1241.23, None, workers=32), [], LATENCY)]
    row = goodput_row("nginx-static", capacity, windows, RUNNING)
    assert row.failures == {} and row.verdict == ("3x not judged: every window's load generator saturated or shared "
                                                  "a saturated core")
    assert row.conditions[0]["not_judged"] == ["3x #1: load generator", "3x #2: load generator",
                                               "3x #3: load generator"]
    # the figures the flags were decided on are kept, and the report says why in words
    kept = [m.to_dict() for m in capacity + windows]
    assert Measured.from_dict(kept[1]) == windows[0]
    doc = {"run_id": "overload-x", "env_file": "local.env", "started": "a", "finished": "b",
           "settings": {"clients": 1000, "file": "1MB", "seconds": 30, "large_file": "100MB", "large_clients": 50,
                        "large_mem": "256m", "concurrencies": [1, 2, 4, 8, 16, 32], "window_seconds": 10},
           "goodput": [row.to_dict()], "goodput_windows": kept, "overload": [], "failed": []}
    text = render(doc)
    assert ("nginx-static 3x #1: loadgen-bound (the load generator's cores 97% busy, 0.58 cores of it its own) "
            "(not judged)") in text
    assert "a starved client reads its answers late and times out on answers the path sent" in text
    # a run from before the figures were kept reads as it did
    old = {k: v for k, v in kept[1].items() if k not in ("cpu", "busy_shares")}
    assert "nginx-static 3x #1: loadgen-bound (not judged)" in render({**doc, "goodput_windows": [old]})


def test_a_window_is_not_judged_when_the_load_generators_core_saturated_only():
    """A real window of the lab on this 2-core machine (the pinned example,
    nginx-gridfs 1KB at c=100, cpus-2.env's pins): FerretDB at 0.82 of core
    0, vegeta 0.12 of it beside it, core 0 98% busy: the load generator
    shared the saturated core, so the window says nothing of the path. The
    same figures with the databases on the target's core (make overload's
    placement) saturate a core the path and its database share: the path's
    own limit, judged."""
    run = next(r for r in example_rounds()["runs"]
               if (r["target"], r["file"], r["concurrency"]) == ("nginx-gridfs", "1KB.bin", 100))
    rep = run["repetitions"][0]
    cpu, busy = rep["cpu"], rep["cpu_window"]["busy_shares"]
    assert rep["flags"] == [CORE_SATURATED] and busy["cpu0"] > 0.9 and cpu["bench"]["cpuset"] == [0]
    assert window_flags(cpu, "nginx-gridfs", cpu["bench"]["tool_cores"], 1.0, busy, 0, 0) == (
        [CORE_SATURATED], SHARED_CORE)
    assert loadgen_starved(SHARED_CORE, cpu, busy)
    placed = {**cpu, "mongo": {**cpu["mongo"], "cpuset": [1]}, "postgres": {**cpu["postgres"], "cpuset": [1]}}
    swapped = {**busy, "cpu0": busy["cpu1"], "cpu1": busy["cpu0"]}
    flags, bound = window_flags(placed, "nginx-gridfs", cpu["bench"]["tool_cores"], 1.0, swapped, 0, 0)
    assert (flags, bound) == ([CORE_SATURATED], SHARED_CORE) and not loadgen_starved(bound, placed, swapped)
    # a window kept without its figures cannot say whose core it was: not judged
    assert loadgen_starved(SHARED_CORE, {}, {}) and loadgen_starved(LOADGEN_CPU, placed, swapped)
    assert not loadgen_starved(LATENCY, {}, {})


KEPT = ROOT / "results" / "evidence" / "overload-20261128T234415Z" / "results.json.gz"


def test_a_kept_runs_verdict_says_what_its_windows_show():
    """overload-20261128T234415Z was judged under a rule since withdrawn (a
    window on a saturated shared core judged, its verdict saying "3 of 3
    windows on a saturated shared core"). Every GridFS window there but
    gridfs-fuse's at 3x flagged core-saturated: on cpus-2.env's pins, core 0
    holds vegeta, FerretDB and PostgreSQL. Rendered again, each row is judged
    from its windows by the rule in force: the table's judged windows, the
    verdict and the flagged windows agree."""
    doc = json.loads(gzip.decompress(KEPT.read_bytes()))
    kept = {r["path"]: r for r in doc["goodput"]}
    assert "3 of 3 windows on a saturated shared core" in kept["nginx-gridfs"]["verdict"]
    rows = {r.path: r for r in rejudged(doc)}
    windows = goodput_windows(doc)
    for path in ("nginx-gridfs", "flask", "node", "flask-postgres"):
        assert all(not m.judged for m in windows if m.path == path and m.multiple), path
        assert [c["judged"] for c in rows[path].conditions] == [0, 0], path
        assert rows[path].verdict == ("3x, 10x not judged: every window's load generator saturated or shared a "
                                      "saturated core"), path
    fuse = rows["gridfs-fuse"]
    three = [m for m in windows if m.path == "gridfs-fuse" and m.multiple == 3]
    assert [c["judged"] for c in fuse.conditions] == [3, 0] and all(m.judged for m in three)
    # its client timeouts counted over the judged windows only
    assert fuse.failures == {"client timeout": sum(m.window.failures["client timeout"] for m in three)}
    assert fuse.verdict.startswith("3x keeps 78%; 963 x client timeout; 10x not judged")
    text = render(doc)
    assert "on a saturated shared core" not in text
    assert f"**{rows['nginx-gridfs'].verdict}**" in text
    assert "nginx-gridfs 3x #1: core-saturated (not judged)" in text


PLACED = ROOT / "results" / "evidence" / "overload-20261129T124554Z" / "results.json.gz"


def test_a_capacity_is_a_floor_only_where_its_step_was_not_judged():
    """overload-20261129T124554Z ran the databases on the target's core:
    the GridFS paths' best capacity steps flagged core-saturated, the path's
    own core with its database (judged: the capacity itself), where
    nginx-static's was loadgen-bound (a floor of the path's)."""
    doc = json.loads(gzip.decompress(PLACED.read_bytes()))
    rows = {r.path: r for r in rejudged(doc)}
    assert rows["nginx-gridfs"].capacity_flags == ["core-saturated"] and not rows["nginx-gridfs"].capacity_floor
    assert "loadgen-bound" in rows["nginx-static"].capacity_flags and rows["nginx-static"].capacity_floor
    text = render(doc)
    assert f"| nginx-gridfs | {rows['nginx-gridfs'].capacity_rps:g} at c=1 (core-saturated) |" in text
    assert f"{rows['nginx-static'].capacity_rps:g} at c=16 (a floor: loadgen-bound" in text


def test_windows_kept_without_workers_load_and_a_capacity_step_takes_them_from_its_row():
    """Runs tools/lab/keep_evidence.py slimmed before it kept a window's
    `workers`: a capacity step's concurrency is in its path's row
    ("c=2: 100/s"), matched by its rate; not found there, the report says
    it was not recorded."""
    climbed = steps(60, 100, 99)
    row = goodput_row("flask", climbed, overload({3: [0.9]}), RUNNING)
    assert row.steps == ["c=1: 60/s", "c=2: 100/s", "c=4: 99/s"]

    def slimmed(m: Measured) -> dict:
        d = m.to_dict()
        return {**d, "window": {k: v for k, v in d["window"].items() if k != "workers"}}

    kept = [slimmed(m) for m in climbed + overload({3: [0.9]})]
    assert Window.from_dict(kept[0]["window"]).workers is None
    found = goodput_windows({"goodput": [row.to_dict()], "goodput_windows": kept})
    assert [m.window.workers for m in found] == [1, 2, 4, None]
    assert [m.name for m in found] == ["c=1 #1", "c=2 #1", "c=4 #1", "3x #1"]
    # a row whose steps do not match the windows' rates names none of them
    other = {**row.to_dict(), "steps": ["c=1: 60/s", "c=2: 101/s"]}
    found = goodput_windows({"goodput": [other], "goodput_windows": kept})
    assert [m.name for m in found] == ["c=1 #1", "c not recorded #1", "c not recorded #1", "3x #1"]
    # a window that kept its workers keeps them
    assert goodput_windows({"goodput": [other], "goodput_windows": [m.to_dict() for m in climbed]}) == climbed


def test_the_report_gives_each_condition_and_verdict():
    windows = overload({3: [0.9, 0.85, 0.95], 10: [0.3, 0.2, 0.4]})
    row = goodput_row("flask", steps(100), windows, RUNNING)
    doc = {"run_id": "overload-x", "env_file": "local.env", "started": "a", "finished": "b",
           "settings": {"clients": 1000, "file": "1MB", "seconds": 30, "large_file": "100MB", "large_clients": 50,
                        "large_mem": "256m", "concurrencies": [1, 2, 4], "window_seconds": 10},
           "goodput": [row.to_dict()], "goodput_windows": [m.to_dict() for m in steps(100) + windows],
           "overload": [], "failed": []}
    text = render(doc)
    assert "## Goodput: `1MB` offered open loop at 3x and 10x each path's capacity (judged)" in text
    refused = sum(m.window.refused for m in windows if m.multiple == 3)
    assert (f"| flask | 100 at c=1 | 3x = 300 | 300 | 90 | 90% [85%-95%], 3 of 3 | {refused} | 1.0 / 5.0 | 900 "
            "| - |") in text
    assert "| flask | c=1: 100/s | none | 0 | running | **10x keeps 30%** |" in text
    assert "Cores:" not in text  # a run from before the pins were kept
    pins = {"TARGET_CPUS": "1", "MONGO_CPUS": "1", "POSTGRES_CPUS": "1", "LOADGEN_CPUS": "0"}
    text = render({**doc, "pins": pins, "pins_moved": ["MONGO_CPUS", "POSTGRES_CPUS"]})
    assert ("Cores: target `1`, mongo `1`, postgres `1`, loadgen `0` (MONGO_CPUS, POSTGRES_CPUS moved to the "
            "target's cores, so the load generator has its core to itself).") in text


def driver():
    return module_from_file(ROOT / "tools" / "lab" / "overload.py", "overload_driver")


def test_settings_of_the_goodput_check():
    d = driver()
    s = d.read_settings({}, {"BENCH_TARGETS": "flask"})
    assert s["checks"] == ["goodput", "clients", "large"]
    assert (s["concurrencies"], s["window_seconds"]) == ([1, 2, 4, 8, 16, 32, 64], 10)
    assert d.read_settings({"OVERLOAD_CONCURRENCIES": "1 4", "OVERLOAD_WINDOW_SECONDS": "1.5"},
                           {})["concurrencies"] == [1, 4]
    for env, words in [({"OVERLOAD_CONCURRENCIES": "4 2"}, "expected rising"),
                       ({"OVERLOAD_CONCURRENCIES": "1 x"}, "OVERLOAD_CONCURRENCIES='1 x'"),
                       ({"OVERLOAD_WINDOW_SECONDS": "0"}, "OVERLOAD_WINDOW_SECONDS='0'")]:
        with pytest.raises(d.LabError, match=words):
            d.read_settings(env, {})
    assert d.cpuset("0,2-3") == (0, 2, 3) and d.cpuset("") == ()
    assert d.PINS[0] == "TARGET_CPUS" and set(d.DATABASE_PINS) < set(d.PINS)
    assert d.allowance_of({"HostConfig": {"CpusetCpus": "0-1", "NanoCpus": 0, "CpuQuota": 0}}) == (2.0, (0, 1))
    assert d.allowance_of({"HostConfig": {"CpusetCpus": "1", "NanoCpus": 500000000}}) == (0.5, (1,))


def test_make_overload_gives_the_load_generator_its_core_where_a_database_shared_it():
    d = driver()
    two = read_env_file(ROOT / "cpus-2.env")
    four = read_env_file(ROOT / ".env")
    # cpus-2.env: vegeta, FerretDB and PostgreSQL on core 0, the target on 1
    assert d.placement(two) == {"MONGO_CPUS": "1", "POSTGRES_CPUS": "1"}
    # .env's 4-core pins give each role its own cores already
    assert d.placement(four) == {}
    # the environment's pins are the lab's too: one database beside vegeta moves
    assert d.placement({**four, "POSTGRES_CPUS": "3"}) == {"POSTGRES_CPUS": "2"}
    # a target sharing the load generator's core (one core), or no pins: nowhere to go
    assert d.placement({**two, "TARGET_CPUS": "0"}) == {} and d.placement({}) == {}
    assert d.placement({**two, "LOADGEN_CPUS": "0-1"}) == {}


def test_this_processs_own_cgroup_counts_its_cpu():
    """read_counters on a real cgroup: this test's own (v1 cpuacct or v2)."""
    d = driver()
    entries = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text().splitlines())
    own = next((path for name, path in entries.items() if "cpuacct" in name.split(",")), entries.get(""))
    files = cpu_files(Path("/sys/fs/cgroup"), own)
    before = d.read_counters(files, 1)
    spin = sum(i * i for i in range(3_000_000))  # about 0.2 s of CPU
    after = d.read_counters(files, 2)
    assert spin and after.cpu_total_ns - before.cpu_total_ns >= 0.05e9
    assert after.cpu_user_ns + after.cpu_system_ns > 0


@pytest.fixture(scope="module")
def vegeta():
    binary = subprocess.run([str(ROOT / "tools" / "install" / "install-vegeta.sh")], check=True, capture_output=True,
                            text=True, timeout=900).stdout.strip().splitlines()[-1]
    return binary


@pytest.fixture
def loopback_nginx():
    from support.service_processes import NginxStatic
    files = Path(tempfile.mkdtemp(prefix="lab-goodput-"))
    files.chmod(0o755)
    (files / "1KB.bin").write_bytes(os.urandom(1024))
    (files / "1KB.bin").chmod(0o644)
    server = NginxStatic(files).start()
    yield server
    server.stop()
    shutil.rmtree(files, ignore_errors=True)


def test_overload_window_runs_vegeta_open_and_closed_loop(vegeta, loopback_nginx):
    env = {**os.environ, "VEGETA": vegeta, "PYTHONPATH": str(ROOT / "loadgen")}
    url = f"{loopback_nginx.url}/files/1KB.bin"
    found = {}
    for rate, workers in ((0, 2), (200, 100)):
        p = subprocess.run([sys.executable, "-m", "bench", "overload-window", url, str(rate), "1", str(workers)],
                           env=env, capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        found[rate] = json.loads(p.stdout.strip().splitlines()[-1])
    closed, open_ = Window.from_dict(found[0]["window"]), Window.from_dict(found[200]["window"])
    assert closed.whole == closed.sent > 100 and closed.failures == {} and closed.workers == 2
    assert open_.whole == open_.sent and 190 <= open_.sent_rate <= 210 and open_.whole_rate <= 210
    for f in found.values():
        assert f["ended_ns"] - f["started_ns"] >= 0.9e9 and f["load_cpu_seconds"] > 0 and f["threads"] >= 1
