"""Every flag a row can carry is in the one flags registry (measure/flags.py:
its mark, its legend, how a row takes it from its repetitions), and its
legend text is written there only: a flag without an entry would show
unexplained, and a second copy of its words would drift from the first."""
import ast
import re
from pathlib import Path

from bench.measure import verdicts
from bench.measure import flags, usage
from bench.report.markdown import legend_lines

FLAG = re.compile(r"[a-z]+(?:-[a-z]+)*")  # a flag's spelling: loadgen-bound, refused
# usage.py's constants spelled like a flag that are not one.
NOT_FLAGS = {"LOADGEN": "the load generator's role among the containers, not a flag on a row"}
BENCH = Path(__file__).parent.parent / "loadgen" / "bench"


def usage_flags() -> dict[str, str]:
    return {name: value for name, value in vars(usage).items()
            if name.isupper() and isinstance(value, str) and FLAG.fullmatch(value) and name not in NOT_FLAGS}


def test_every_flag_of_usage_is_in_the_registry():
    found = usage_flags()
    assert {"FEW_ROUNDS", "CACHE_MISSED", "LOADGEN_BOUND", "REFUSED"} <= found.keys()
    missing = {name: value for name, value in found.items() if value not in flags.FLAGS}
    assert not missing, f"flags of measure/usage.py without a registry entry: {missing}"


def test_the_flags_set_elsewhere_are_in_it_too():
    for flag in (flags.NOISY, flags.NONCONFORMING, flags.TWIN_BUSY):
        entry = flags.FLAGS[flag]
        assert entry.mark and entry.legend and entry.combine in (flags.ANY, flags.MEDIAN, flags.ROW), flag


def test_the_legend_says_what_few_rounds_and_cache_missed_mean():
    assert legend_lines({usage.FEW_ROUNDS, usage.CACHE_MISSED}) == [
        "Flags:", "",
        f"- ◔ `few-rounds`: {flags.FLAGS[usage.FEW_ROUNDS].legend}",
        f"- ◇ `cache-missed`: {flags.FLAGS[usage.CACHE_MISSED].legend}", ""]
    assert f"fewer than {usage.ROUNDS_WANTED} requests" in flags.FLAGS[usage.FEW_ROUNDS].legend
    assert "fewer than 99%" in flags.FLAGS[usage.CACHE_MISSED].legend


def test_marks_are_one_per_flag():
    marks = [f.mark for f in flags.FLAGS.values()]
    assert len(set(marks)) == len(marks) and flags.BASELINE_MARK not in marks


def test_a_row_takes_from_any_repetition_the_flags_the_registry_says():
    assert set(verdicts.FLAGS_OF_ANY_REPETITION) == {"link-bound", "loadgen-bound", "core-saturated", "throttled"}


def _literal_text(source: str) -> str:
    """A module's string literals, f-strings' fixed parts included (adjacent
    literals joined, as Python joins them), one per line."""
    pieces = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            pieces += [v.value for v in node.values if isinstance(v, ast.Constant)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            pieces.append(node.value)
    return "\n".join(pieces)


def test_each_legend_text_is_written_in_one_place_only():
    """Every stretch of a legend's words between the figures it quotes
    appears among loadgen/bench's string literals in measure/flags.py only."""
    texts = {str(p.relative_to(BENCH)): _literal_text(p.read_text()) for p in BENCH.rglob("*.py")}
    for flag in flags.FLAGS.values():
        stretches = [s for s in re.split(r"[\d.,%]+", flag.legend) if len(s) >= 25]
        assert stretches, flag.name
        for words in stretches:
            places = [name for name, text in texts.items() if words in text]
            assert places == ["measure/flags.py"], f"{flag.name}'s legend {words!r} is written in {places}"
