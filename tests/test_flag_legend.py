"""Every flag a row can carry has its mark and its meaning in the report's
legend (report/markdown.py's MARKS and LEGEND, which the HTML page and bench
compare draw from too): a flag without them would show unexplained, or not
at all in the page's legend."""
import re

from bench import results
from bench.measure import usage
from bench.report import markdown

FLAG = re.compile(r"[a-z]+(?:-[a-z]+)*")  # a flag's spelling: loadgen-bound, refused
# usage.py's constants spelled like a flag that are not one.
NOT_FLAGS = {"LOADGEN": "the load generator's role among the containers, not a flag on a row"}


def usage_flags() -> dict[str, str]:
    return {name: value for name, value in vars(usage).items()
            if name.isupper() and isinstance(value, str) and FLAG.fullmatch(value) and name not in NOT_FLAGS}


def test_every_flag_of_usage_has_a_mark_and_a_legend_entry():
    flags = usage_flags()
    assert {"FEW_ROUNDS", "CACHE_MISSED", "LOADGEN_BOUND", "REFUSED"} <= flags.keys()
    missing = {name: value for name, value in flags.items()
               if value not in markdown.LEGEND or value not in markdown.MARKS}
    assert not missing, f"flags of measure/usage.py without a mark or legend entry: {missing}"


def test_the_flags_set_elsewhere_have_them_too():
    for flag in (results.NOISY, markdown.NONCONFORMING):
        assert flag in markdown.LEGEND and flag in markdown.MARKS, flag


def test_the_legend_says_what_few_rounds_and_cache_missed_mean():
    assert markdown._legend({usage.FEW_ROUNDS, usage.CACHE_MISSED}) == [
        "Flags:", "",
        f"- ◔ `few-rounds`: {markdown.LEGEND[usage.FEW_ROUNDS]}",
        f"- ◇ `cache-missed`: {markdown.LEGEND[usage.CACHE_MISSED]}", ""]
    assert f"fewer than {usage.ROUNDS_WANTED} requests" in markdown.LEGEND[usage.FEW_ROUNDS]
    assert "fewer than 99%" in markdown.LEGEND[usage.CACHE_MISSED]
    # every legend entry belongs to a mark: none drawn without its meaning, nor the reverse
    assert markdown.LEGEND.keys() == markdown.MARKS.keys()
