"""LAB_TEST_EXTRA_WORK (lab_http/extra_work.py), the A/B's known change on
the Python paths: read strictly, the same work every time, and its cost in
proportion to its units, measured on the thread's own CPU clock against a
baseline of the same test, so these hold with every core busy. No servers:
the functions themselves, and create_app as a path builds it."""
import math
import re
import statistics
import time

import pytest

from lab_http import create_app
from lab_http.extra_work import EXTRA_WORK_MAX, WORK_SEED, extra_work, extra_work_units

TRIALS = 9
UNITS = 2_000  # about 2 ms under CPython 3.12, where a unit was sized to about 1 µs


def thread_cpu_ns(work) -> int:
    start = time.thread_time_ns()
    work()
    return time.thread_time_ns() - start


def measuring_nothing_ns() -> float:
    """What the measurement itself costs, in this test and on this machine now."""
    return statistics.median(thread_cpu_ns(lambda: None) for _ in range(101))


@pytest.mark.parametrize("env, units", [({}, 0), ({"LAB_TEST_EXTRA_WORK": ""}, 0), ({"LAB_TEST_EXTRA_WORK": "0"}, 0),
                                        ({"LAB_TEST_EXTRA_WORK": "44"}, 44),
                                        ({"LAB_TEST_EXTRA_WORK": str(EXTRA_WORK_MAX)}, EXTRA_WORK_MAX)])
def test_the_extra_work_is_read_in_whole_units_and_unset_is_none(env, units):
    assert extra_work_units(env) == units


@pytest.mark.parametrize("text", ["-1", "40.5", "40u", " 40", "forty", "٤٠", str(EXTRA_WORK_MAX + 1)])
def test_a_bad_extra_work_is_refused_naming_the_variable_and_the_value(text):
    with pytest.raises(ValueError, match=rf"LAB_TEST_EXTRA_WORK must be a whole number of work units from 0 to "
                                         rf"{EXTRA_WORK_MAX}.*got {re.escape(repr(text))}"):
        extra_work_units({"LAB_TEST_EXTRA_WORK": text})


def test_a_path_with_a_bad_extra_work_does_not_start(monkeypatch):
    monkeypatch.setenv("LAB_TEST_EXTRA_WORK", "1e3")
    with pytest.raises(ValueError, match="LAB_TEST_EXTRA_WORK"):
        create_app(None, "gridfs-lab-test")  # refused before the store is ever asked anything


def test_a_path_with_extra_work_says_so(monkeypatch, capsys):
    monkeypatch.setenv("LAB_TEST_EXTRA_WORK", "44")
    create_app(None, "gridfs-lab-test")
    assert "LAB_TEST_EXTRA_WORK=44: every file request does 44 units of fixed work first" in capsys.readouterr().err


def test_the_work_is_the_same_every_time():
    assert extra_work(44) == extra_work(44)
    assert extra_work(44) != extra_work(43)  # every unit is done, none left out
    # A unit's definition, pinned: to change it is to change what a unit
    # costs, and docs/ab.md's sizing with it.
    assert extra_work(1) == 786_050_992
    assert extra_work(1_000) == 1_419_035_625


def test_no_units_do_nothing():
    assert extra_work(0) == WORK_SEED
    nothing = measuring_nothing_ns()
    assert statistics.median(thread_cpu_ns(lambda: extra_work(0)) for _ in range(101)) <= 10 * nothing


def test_the_cost_grows_in_proportion_to_the_units():
    """4x the units cost 4x the thread's CPU. Each trial measures UNITS, then
    4 x UNITS, then UNITS again, side by side in time, so that a trial's
    ratio meets one load (the other core busy or not) on both sides. The
    baseline is the same amount of work measured 2 x TRIALS times in this
    test: its costs spread as far as this machine's noise moves a cost now
    (the other core's work, this one's caches), and the ratio is allowed that
    much and 10% more either way. However noisy, it stays between 2 and 8: no
    fixed cost (1) nor one that grows faster than the units (16) passes."""
    ratios, baseline = [], []
    for _ in range(TRIALS):
        before = thread_cpu_ns(lambda: extra_work(UNITS))
        four = thread_cpu_ns(lambda: extra_work(4 * UNITS))
        after = thread_cpu_ns(lambda: extra_work(UNITS))
        ratios.append(four / ((before + after) / 2))
        baseline += [before, after]
    ratio = statistics.median(ratios)
    noise = math.log(max(baseline) / min(baseline))
    assert 2 < ratio < 8, (ratios, baseline)
    assert abs(math.log(ratio / 4)) <= math.log(1.1) + noise, (ratios, baseline)
