"""LAB_TEST_SPIN_US: a known change for measuring the A/B itself, never for a
real run. Each file request first burns that many microseconds of CPU, so
that `make ab ... B_ENV="LAB_TEST_SPIN_US=40"` makes B slower by an amount
set beforehand (docs/ab.md, "A known change, run after run"). No compose
list passes it, so only a twin given it through make ab's B_ENV has it;
unset or 0, a request pays one check of a number.

CPU time, not wall clock: the loop runs on this thread's own CPU clock, so a
request preempted midway (the twins share a core) still costs the same CPU;
a sleep would cost none. The thread's clock, not the process's: another
thread's work does not shorten the spin."""
import os
import time

SPIN_MAX_US = 100_000  # 0.1 s a request: far above what slows a path by 10%, short of its deadline


def spin_microseconds(env=os.environ) -> int:
    """LAB_TEST_SPIN_US (default 0: no spin), or a ValueError naming it."""
    text = env.get("LAB_TEST_SPIN_US") or "0"
    if not text.isascii() or not text.isdigit() or int(text) > SPIN_MAX_US:
        raise ValueError(f"LAB_TEST_SPIN_US must be a whole number of microseconds from 0 to {SPIN_MAX_US} "
                         f"(a test-only known change for make ab's B), got {text!r}")
    return int(text)


def spin(microseconds: int) -> None:
    """Burn `microseconds` of this thread's CPU time in a busy loop."""
    end = time.thread_time_ns() + microseconds * 1000
    while time.thread_time_ns() < end:
        pass
