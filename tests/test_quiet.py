"""Waiting for a quiet machine, on /proc/stat captured here: a pair taken
while nothing ran, and a pair while `yes` kept both cores busy."""
from pathlib import Path

from bench.benchmark.quiet import QUIET_SAMPLE_S, QUIET_SHARE, is_quiet, wait_until_quiet
from bench.measure.usage import busy_shares, parse_proc_stat

FIXTURES = Path(__file__).parent / "fixtures" / "proc_stat"


def text(name: str) -> str:
    return (FIXTURES / f"{name}.txt").read_text()


def test_an_idle_machine_is_quiet_and_a_busy_one_is_not():
    assert is_quiet(parse_proc_stat(text("quiet-before")), parse_proc_stat(text("quiet-after")))
    assert not is_quiet(parse_proc_stat(text("busy-before")), parse_proc_stat(text("busy-after")))


def test_quiet_is_every_core_of_the_case_not_the_hosts_average():
    # captured with core 0 fully busy (another job) and core 1 at 7%
    before, after = parse_proc_stat(text("one-core-busy-before")), parse_proc_stat(text("one-core-busy-after"))
    shares = busy_shares(before, after)
    assert shares["cpu0"] > 0.9 and shares["cpu1"] < QUIET_SHARE
    assert is_quiet(before, after, {1})        # a case pinned to core 1 can start
    assert not is_quiet(before, after, {0, 1})  # one pinned to both cannot
    assert not is_quiet(before, after)          # unknown cpusets: every core of the host


def test_waiting_watches_the_cases_cores():
    readings = iter([text("one-core-busy-before"), text("one-core-busy-after")])
    waited, quiet = wait_until_quiet({1}, read=lambda: next(readings), sleep=lambda s: None, clock=lambda: 0.0)
    assert quiet


class Clock:
    """Time that passes only when the waiter sleeps."""

    def __init__(self):
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_the_wait_ends_at_the_first_quiet_reading():
    readings = iter([text("busy-before"), text("busy-after"), text("quiet-before"), text("quiet-after")])
    clock = Clock()
    waited, quiet = wait_until_quiet(read=lambda: next(readings), sleep=clock.sleep, clock=clock)
    assert quiet and waited == 2 * QUIET_SAMPLE_S


def test_a_machine_that_stays_busy_is_waited_on_for_at_most_the_limit():
    pair = [text("busy-before"), text("busy-after")]
    count = iter(range(1000))
    clock = Clock()
    waited, quiet = wait_until_quiet(max_s=3, read=lambda: pair[next(count) % 2], sleep=clock.sleep, clock=clock)
    assert not quiet and 3 <= waited < 3 + QUIET_SAMPLE_S


def test_without_proc_stat_there_is_nothing_to_wait_on():
    waited, quiet = wait_until_quiet(read=lambda: None, sleep=lambda s: None, clock=lambda: 0.0)
    assert quiet and waited == 0
