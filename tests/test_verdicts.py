"""A row's verdicts from its repetitions (bench.measure.verdicts): the
flags it takes from any repetition, noisy, and why it failed."""
from bench.measure.usage import CORE_SATURATED, LOADGEN_BOUND, SHORT_WINDOW
from bench.measure.verdicts import failure, flags_of_any_repetition, noisy


def rep(requests=100, failed=0, refused=0, flags=()):
    return {"requests": requests, "failed": failed, "refused": refused, "flags": list(flags)}


def test_a_doubt_in_any_repetition_is_the_rows_once():
    reps = [rep(flags=[LOADGEN_BOUND]), rep(flags=[CORE_SATURATED, SHORT_WINDOW]), rep()]
    assert flags_of_any_repetition([], reps) == [LOADGEN_BOUND, CORE_SATURATED]
    assert flags_of_any_repetition([LOADGEN_BOUND], reps) == [CORE_SATURATED]  # SHORT_WINDOW: the shown one's only


def test_one_repetition_is_never_noisy():
    assert noisy({"noisy": True}, 3) and not noisy({"noisy": True}, 1)
    assert not noisy({"noisy": False}, 3) and not noisy(None, 3)


def test_failed_requests_or_a_repetition_all_refused_fail_the_row():
    assert failure([rep(), rep()], 0, 200) is None
    assert failure([rep(failed=2), rep(failed=1)], 0, 200) == "3 failed requests over 2 repetitions"
    assert failure([rep(refused=100), rep(refused=10)], 110, 200) == (
        "every answer of a repetition was refused (110 of 200 over 2 repetitions were not 2xx)")
    assert failure([rep(refused=10)], 10, 100) is None  # some refused: flagged, not failed
