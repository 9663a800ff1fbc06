"""LAB_TEST_EXTRA_WORK: a known change for measuring the A/B itself, never
for a real run. Each file request first does that many units of fixed work,
so that `make ab ... B_ENV="LAB_TEST_EXTRA_WORK=44"` makes B slower by an
amount set beforehand (docs/ab.md). No compose list passes it, so only a twin
given it through make ab's B_ENV has it; unset or 0, a request pays one check
of a number.

Work, not time: a request's own cost moves from run to run (the machine's
speed, its caches, its neighbours), and a fixed amount of time would be a
share of it that moves with it; a fixed amount of work moves as the request's
own work does, as a real regression (code that does more) would. So a unit is
a fixed computation, not a clock read.

A unit is WORK_ROUNDS_PER_UNIT steps of a 32-bit linear congruential
generator in pure Python, one flat loop whose result the caller keeps:
bytecode the interpreter runs step by step (CPython neither skips a loop nor
caches a call's result), with the GIL held, like the path's own Python work.
Not hashlib: it runs C and lets go of the GIL on large buffers, so it would
scale with the machine as C does, not as the interpreter does, and would not
contend for the GIL as the path's own work does. The integers stay below
2**49: no step's numbers grow. Sized so that a unit costs about 1 µs of
CPU under the containers' CPython 3.12 on the machine it was sized on
(docs/ab.md); elsewhere it costs what it costs, and an A/B measures it."""
import os

EXTRA_WORK_MAX = 1_000_000  # about 1 s a request: far above what slows a path by 10%, short of its 3 s deadline
WORK_ROUNDS_PER_UNIT = 15
WORK_SEED = 1


def extra_work_units(env=os.environ) -> int:
    """LAB_TEST_EXTRA_WORK (default 0: no extra work), or a ValueError naming it."""
    text = env.get("LAB_TEST_EXTRA_WORK") or "0"
    if not text.isascii() or not text.isdigit() or int(text) > EXTRA_WORK_MAX:
        raise ValueError(f"LAB_TEST_EXTRA_WORK must be a whole number of work units from 0 to {EXTRA_WORK_MAX} "
                         f"(a test-only known change for make ab's B), got {text!r}")
    return int(text)


def extra_work(units: int) -> int:
    """Do `units` units of work on this thread; the result, for the caller to keep."""
    x = WORK_SEED
    for _ in range(units * WORK_ROUNDS_PER_UNIT):
        x = (x * 69069 + 1) & 0xFFFFFFFF
    return x
