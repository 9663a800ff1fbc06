"""report.md's charts are the page's (report/svg.py), each written beside it
as a standalone SVG file by run.py's write_figures: report.md links exactly
the files written, one per figure the page inlines, each a valid SVG."""
import gzip
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench.report.change import render_change
from bench.report.html import render_change_page, render_html
from bench.report.markdown import render_markdown
from bench.results import Results
from bench.run import write_figures

ROOT = Path(__file__).parent.parent
EXAMPLE = ROOT / "results" / "example" / "results.json"
AB = sorted((ROOT / "results" / "evidence").glob("*/ab.json.gz"))[0]
LINK = re.compile(r"^!\[[^\]]*\]\(([^)]+)\)$", re.M)


def example_with_a_sweep() -> dict:
    """The example run and a sweep at two levels by ab and wrk: the line charts a kept run lacks."""
    doc = json.loads(EXAMPLE.read_text())
    doc["sweep"] = [{"target": r["target"], "file": r["file"], "size_bytes": r["size_bytes"], "concurrency": c,
                     "tool": tool, "requests": 100, "failed": 0, "rps": r["rps"] / c, "p50_ms": 1.0, "p99_ms": 2.0,
                     "loadgen_cores": 0.5, "raw_output": None, "flags": []}
                    for r in doc["runs"] for c in (1, 8) for tool in ("ab", "wrk")]
    return doc


def ab_run() -> dict:
    ab = json.loads(gzip.decompress(AB.read_bytes()))
    return Results(run_id=ab["run_id"], started_at="s", environment=dict(ab.get("machine") or {}), ab=ab).to_dict()


SOURCES = {"example": lambda: json.loads(EXAMPLE.read_text()), "example-with-a-sweep": example_with_a_sweep,
           "a-b": ab_run, **{f.stem: (lambda f=f: json.loads(f.read_text()))
                             for f in sorted((ROOT / "tests" / "fixtures" / "compare").glob("*.json"))}}


@pytest.mark.parametrize("name", SOURCES)
def test_report_md_links_exactly_the_svg_files_written_one_per_chart_on_the_page(name, tmp_path):
    results = Results.from_dict(SOURCES[name]())
    write_figures(results, tmp_path)
    assert not [w for w in results.warnings if "charts not written" in w]
    report = render_change(results) if results.ab else render_markdown(results)
    linked = LINK.findall(report)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert linked and sorted(linked) == written
    page = render_change_page(results, False) if results.ab else render_html(results)
    assert len(linked) == page.count("<figure><svg ")
    for name_ in written:
        root = ET.parse(tmp_path / name_).getroot()
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert root.get("width") and root.find("{http://www.w3.org/2000/svg}style") is not None
        assert root.find("{http://www.w3.org/2000/svg}title").text  # the chart's title, as on the page

