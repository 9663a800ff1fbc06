"""LAB_TEST_SPIN_US (lab_http/spin.py), the A/B's known change on the Python
paths: read strictly, and each spin costs the thread the CPU time it names,
on the thread's own clock, so these hold with every core busy. No servers:
the functions themselves, and create_app as a path builds it."""
import hashlib
import re
import statistics
import threading
import time

import pytest

from lab_http import create_app
from lab_http.spin import SPIN_MAX_US, spin, spin_microseconds

TRIALS = 9


def thread_cpu_ns(work) -> int:
    start = time.thread_time_ns()
    work()
    return time.thread_time_ns() - start


def measuring_nothing_ns() -> float:
    """What the measurement itself costs, in this test and on this machine now."""
    return statistics.median(thread_cpu_ns(lambda: None) for _ in range(101))


@pytest.mark.parametrize("env, spin_us", [({}, 0), ({"LAB_TEST_SPIN_US": ""}, 0), ({"LAB_TEST_SPIN_US": "0"}, 0),
                                          ({"LAB_TEST_SPIN_US": "84"}, 84),
                                          ({"LAB_TEST_SPIN_US": str(SPIN_MAX_US)}, SPIN_MAX_US)])
def test_the_spin_is_read_in_whole_microseconds_and_unset_is_none(env, spin_us):
    assert spin_microseconds(env) == spin_us


@pytest.mark.parametrize("text", ["-1", "40.5", "40us", " 40", "forty", "٤٠", str(SPIN_MAX_US + 1)])
def test_a_bad_spin_is_refused_naming_the_variable_and_the_value(text):
    with pytest.raises(ValueError, match=rf"LAB_TEST_SPIN_US must be a whole number of microseconds from 0 to "
                                         rf"{SPIN_MAX_US}.*got {re.escape(repr(text))}"):
        spin_microseconds({"LAB_TEST_SPIN_US": text})


def test_a_path_with_a_bad_spin_does_not_start(monkeypatch):
    monkeypatch.setenv("LAB_TEST_SPIN_US", "1e3")
    with pytest.raises(ValueError, match="LAB_TEST_SPIN_US"):
        create_app(None, "gridfs-lab-test")  # refused before the store is ever asked anything


@pytest.mark.parametrize("spin_us", [40, 2000])
def test_a_spin_costs_the_thread_its_microseconds_and_little_more(spin_us):
    nothing = measuring_nothing_ns()
    costs = [thread_cpu_ns(lambda: spin(spin_us)) for _ in range(TRIALS)]
    assert min(costs) >= spin_us * 1000
    # Past its end the loop reads the clock once more and returns: a few
    # measurements' worth (a trial the kernel interrupted is charged more).
    assert statistics.median(costs) - spin_us * 1000 <= 10 * nothing, (costs, nothing)


def test_a_spin_of_zero_does_nothing():
    nothing = measuring_nothing_ns()
    assert statistics.median(thread_cpu_ns(lambda: spin(0)) for _ in range(101)) <= 10 * nothing


def test_another_threads_work_does_not_shorten_the_spin():
    stop = threading.Event()

    def hash_until_stopped():  # hashlib lets go of the GIL on large inputs: it runs beside the spin
        data = bytes(1 << 20)
        while not stop.is_set():
            hashlib.sha256(data)

    worker = threading.Thread(target=hash_until_stopped)
    worker.start()
    try:
        costs = [thread_cpu_ns(lambda: spin(20_000)) for _ in range(3)]
    finally:
        stop.set()
        worker.join()
    assert min(costs) >= 20_000_000
