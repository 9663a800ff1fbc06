"""The bottleneck of a row, decided in one place (bench.measure.bottleneck),
core-saturated only among containers that worked in the window, and the
flags a row takes from every repetition."""
from bench.measure.bottleneck import (DATABASE_CORE, LATENCY, LOADGEN_CPU, NOT_MEASURED, SHARED_CORE, TARGET_CORE,
                                      bottleneck)
from bench.measure.usage import BEHIND_SCHEDULE, CORE_SATURATED, LOADGEN, LOADGEN_BOUND, THROTTLED, flags
from bench.report.markdown import render_markdown
from bench.results import Results, TargetResult, repeated_run

TARGET = "nginx-gridfs"


def used(cpuset, cores, allowance=1.0, inner=True):
    return {"cores": cores, "inner_window": inner, "allowance_cores": allowance, "cpuset": list(cpuset),
            "throttled_periods": 0}


def gridfs_case(mongo_cores=0.95, target_cores=0.4):
    # the compose layout on 4 cores: both databases pinned to core 2, the target to 1, bench to 0
    return {TARGET: used([1], target_cores), "mongo": used([2], mongo_cores), "postgres": used([2], 0.002),
            LOADGEN: used([0], 0.3)}


def test_an_idle_database_on_the_same_core_competed_with_nobody():
    busy = {"cpu0": 0.3, "cpu1": 0.4, "cpu2": 0.97, "cpu3": 0.01}
    assert CORE_SATURATED not in flags(gridfs_case(), TARGET, 0.3, 1, busy)
    # both at work on that core: they competed
    both = {**gridfs_case(), "postgres": used([2], 0.2)}
    assert CORE_SATURATED in flags(both, TARGET, 0.3, 1, busy)


def test_the_bottleneck_of_each_kind():
    assert bottleneck([], gridfs_case(), TARGET) == DATABASE_CORE
    assert bottleneck([], gridfs_case(mongo_cores=0.3, target_cores=0.97), TARGET) == TARGET_CORE
    assert bottleneck([THROTTLED], gridfs_case(mongo_cores=0.3), TARGET) == TARGET_CORE
    assert bottleneck([], gridfs_case(mongo_cores=0.3), TARGET) == LATENCY
    assert bottleneck([CORE_SATURATED], gridfs_case(), TARGET) == SHARED_CORE
    assert bottleneck([LOADGEN_BOUND, CORE_SATURATED], gridfs_case(), TARGET) == LOADGEN_CPU
    assert bottleneck([BEHIND_SCHEDULE], gridfs_case(), TARGET) == LOADGEN_CPU
    assert bottleneck([], None, TARGET) == NOT_MEASURED
    # a cpuset of two cores and no quota: saturated at 1.8 cores, not at 0.97
    two = {TARGET: used([1, 3], 0.97, allowance=None), LOADGEN: used([0], 0.3)}
    assert bottleneck([], two, TARGET) == LATENCY
    assert bottleneck([], {**two, TARGET: used([1, 3], 1.85, allowance=None)}, TARGET) == TARGET_CORE
    # a window that did not hold two readings is too rough to call saturated
    assert bottleneck([], {TARGET: used([1], 0.99, inner=False)}, TARGET) == LATENCY


# cpus-2.env's pins: the target on core 1, the databases and bench on core 0.
# Figures of results/evidence/20261128T230850Z, nginx-static 1KB c=100, its
# slowest repetition (4,672/s, the others 5,357-7,454/s and loadgen-bound):
# ab used 0.83 of core 0 while /proc/stat read it 93% busy, 0.19 of a core
# outside every container; nginx-static used 0.44 of its own core.
STARVED_AB = {"nginx-static": used([1], 0.4421), "mongo": used([0], 0.0038), "postgres": used([0], 0.0),
              LOADGEN: used([0], 0.831)}
STARVED_BUSY = {"cpu": 0.7573, "cpu0": 0.9305, "cpu1": 0.5929}


def test_a_load_generator_crowded_out_of_its_core_is_loadgen_bound():
    # below 90% of its allowance by its own CPU and its container's, but its
    # core had no more to give: work outside the case's containers took the rest
    found = flags(STARVED_AB, "nginx-static", 0.8298, 1, STARVED_BUSY)
    assert found == [LOADGEN_BOUND]
    assert bottleneck(found, STARVED_AB, "nginx-static") == LOADGEN_CPU  # not "none (latency-bound)"
    # the same tool with a tenth of its core idle could have had more
    assert flags(STARVED_AB, "nginx-static", 0.8298, 1, {**STARVED_BUSY, "cpu0": 0.85}) == []
    # without /proc/stat's figures nothing says the core was full
    assert flags(STARVED_AB, "nginx-static", 0.8298, 1, {}) == []
    # no cAdvisor figure of bench's container: the whole machine's busy share stands for its cores
    alone = {"nginx-static": used([1], 0.4421)}
    assert flags(alone, "nginx-static", 0.8298, 1, {"cpu": 0.95, "cpu0": 0.99, "cpu1": 0.91}) == [LOADGEN_BOUND]
    assert flags(alone, "nginx-static", 0.8298, 1, STARVED_BUSY) == []


def test_a_full_core_the_case_shares_stays_core_saturated_and_an_idle_tool_competed_with_nobody():
    # 20261128T115120Z, nginx-gridfs 1MB: mongo used 0.95 of core 0, 99.6% busy;
    # ab, waiting on the answers, 0.02 of it: the database's core, not the tool's
    idle_tool = {TARGET: used([1], 0.0905), "mongo": used([0], 0.9465), "postgres": used([0], 0.0003),
                 LOADGEN: used([0], 0.0185)}
    busy = {"cpu": 0.5603, "cpu0": 0.9963, "cpu1": 0.1179}
    assert flags(idle_tool, TARGET, 0.0155, 1, busy) == []
    assert bottleneck([], idle_tool, TARGET) == DATABASE_CORE
    # both at work on the full core: they competed, as before (shared core, not the tool alone)
    both = {**idle_tool, LOADGEN: used([0], 0.45), "mongo": used([0], 0.52)}
    found = flags(both, TARGET, 0.45, 1, busy)
    assert found == [CORE_SATURATED] and bottleneck(found, both, TARGET) == SHARED_CORE


def rep(rps, flags=(), cpu=None):
    return {"rps": rps, "requests": int(rps * 4), "failed": 0, "seconds": 4.0, "time_per_request_ms": 1000 / rps,
            "transfer_kbps": 1.0, "p50_ms": 1.0, "p90_ms": 1.0, "p99_ms": 2.0, "raw_output": None,
            "flags": list(flags), "cpu": cpu}


def test_a_row_takes_a_doubt_from_any_repetition_and_names_its_bottleneck():
    reps = [rep(900, [LOADGEN_BOUND]), rep(1000, cpu=gridfs_case()), rep(1100, [THROTTLED, "short-window"])]
    run = repeated_run(TARGET, "1KB.bin", 1024, 100, reps)
    assert run.rps == 1000  # the median repetition's figures
    assert LOADGEN_BOUND in run.flags and THROTTLED in run.flags
    assert "short-window" not in run.flags  # about the shown repetition's CPU figures only
    assert run.bottleneck == LOADGEN_CPU
    calm = repeated_run(TARGET, "1KB.bin", 1024, 100, [rep(990), rep(1000, cpu=gridfs_case()), rep(1010)])
    assert calm.flags == [] and calm.bottleneck == DATABASE_CORE
    report = render_markdown(Results("r", "s", targets=[TargetResult(TARGET, "http://x", True)], runs=[calm]))
    headline = report.split("## Requests per second")[0]
    assert "| p99 ms at a fixed rate | bottleneck | flags |" in headline
    assert f"| - | {DATABASE_CORE} |" in headline


def test_a_store_row_takes_a_doubt_from_any_pass():
    from bench.results import StorePass
    passes = [{**rep(10.0, [CORE_SATURATED]), "max_ms": 1.0}, {**rep(11.0), "max_ms": 1.0},
              {**rep(12.0), "max_ms": 1.0}]
    row = StorePass.of("gridfs", "write", 1, "in order", 100, 10**7, passes, "mongo")
    assert row.files_per_s == 11.0 and CORE_SATURATED in row.flags
