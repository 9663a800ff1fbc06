"""tests/support/refusal_cost.py's reading of a process's CPU time: /proc/PID/stat's
utime and stime (fields 14 and 15, after a command name that may hold
spaces), checked against the kernel's own answer for this process,
os.times(), with CPU spent in both user space and the kernel first."""
import os
import time

from support.refusal_cost import cpu_seconds


def spend_cpu(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        os.getppid()  # a system call: some of it is kernel time


def test_cpu_seconds_are_the_kernels_user_and_system_time_of_the_process():
    spend_cpu(0.2)
    before = os.times()
    user, system = cpu_seconds(os.getpid())
    after = os.times()
    tick = 1 / os.sysconf("SC_CLK_TCK")  # both count in clock ticks
    assert before.user - tick <= user <= after.user + tick
    assert before.system - tick <= system <= after.system + tick
    assert user + system >= 0.2 - tick
