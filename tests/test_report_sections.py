"""report.md and index.html are two renderings of one section list
(report/sections.py): the same sections, under the same titles, in the same
order, from the committed example run and from a run with a failed case."""
import json
import re
from html import unescape
from pathlib import Path

import pytest

from bench.report.html import render_html
from bench.report.markdown import render_markdown
from bench.report.model import TEXT
from bench.report.sections import sections
from bench.results import Results

ROOT = Path(__file__).parent.parent
RUNS = [ROOT / "results" / "example" / "results.json",
        *sorted((ROOT / "tests" / "fixtures" / "compare").glob("*.json"))]


@pytest.mark.parametrize("source", RUNS, ids=lambda p: p.stem if p.parent.name == "compare" else p.parent.name)
def test_report_md_and_index_html_list_the_same_sections_in_order(source):
    results = Results.from_dict(json.loads(source.read_text()))
    titles = [s.title for s in sections(results)]
    assert len(titles) >= 5
    in_markdown = re.findall(r"^## (.+)$", render_markdown(results), re.M)
    in_page = [unescape(t) for t in re.findall(r'<section id="[^"]+"><h2>(.+?)</h2>', render_html(results))]
    assert in_markdown == titles
    assert in_page == titles


def test_neither_backend_reads_the_other():
    report = ROOT / "loadgen" / "bench" / "report"
    assert "from .markdown" not in (report / "html.py").read_text()
    assert "from .html" not in (report / "markdown.py").read_text()


# Issue 41: the renderers, the section model and headline.py within 75% of
# the 1,359 lines they had (1,019); its fixed prose is data (report/text.toml).
# They stand at 1,018, within it: this holds them there.
REPORT_CODE = ("markdown.py", "model.py", "html.py", "headline.py", "sections.py")
REPORT_CODE_LINES = 1018


def test_the_report_code_stays_within_its_line_budget():
    report = ROOT / "loadgen" / "bench" / "report"
    lines = {name: len((report / name).read_text().splitlines()) for name in REPORT_CODE}
    assert sum(lines.values()) <= REPORT_CODE_LINES, lines


def test_text_toml_holds_the_prose_the_code_asks_for_and_no_other():
    """A key no code asks for is dead prose; one asked for and missing would
    fail only when its section is rendered."""
    report = ROOT / "loadgen" / "bench" / "report"
    asked = {key for name in REPORT_CODE for key in re.findall(r'\btext\("(\w+)"', (report / name).read_text())}
    assert asked == set(TEXT)
