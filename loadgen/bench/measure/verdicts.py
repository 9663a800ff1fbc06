"""What a row's repetitions decide about it: the flags it takes from any
repetition (not only the one shown), whether its spread is noisy, and
whether it failed. Decided here, beside the bottleneck
(bench.measure.bottleneck), so that bench.results only holds the data
model and every kind of row (a timed case, a working-set path, a store
pass) is judged alike."""
from .flags import ANY, FLAGS

# Flags a row takes from any of its repetitions, not only the one shown: a
# tool at its limit, a competed core or a throttled target in one repetition
# is a doubt on the case's spread, whichever repetition is the median.
FLAGS_OF_ANY_REPETITION = tuple(name for name, flag in FLAGS.items() if flag.combine == ANY)


def flags_of_any_repetition(shown: list[str], reps: list[dict]) -> list[str]:
    """FLAGS_OF_ANY_REPETITION that some repetition has and the shown flags lack."""
    return [f for f in FLAGS_OF_ANY_REPETITION if f not in shown and any(f in (r.get("flags") or ()) for r in reps)]


def noisy(spread: dict | None, repetitions: int) -> bool:
    """The repetitions' interval is wider than stats.NOISY_WIDTH (one
    repetition has no spread to judge)."""
    return bool(spread and spread.get("noisy")) and repetitions > 1


def failure(reps: list[dict], refused: int, answers: int) -> str | None:
    """Why a timed row failed: requests with no answer (or cut short) in any
    repetition, or a repetition whose every answer was refused; None when
    it did not."""
    failed = sum(r["failed"] for r in reps)
    if failed:
        return f"{failed} failed requests over {len(reps)} repetitions"
    if any(r["requests"] and r["requests"] == (r.get("refused") or 0) for r in reps):
        return (f"every answer of a repetition was refused ({refused} of {answers} over {len(reps)} repetitions "
                f"were not 2xx)")
    return None
