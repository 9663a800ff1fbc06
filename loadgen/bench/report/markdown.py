"""Writes the report's sections (report/sections.py; ab.md's, resilience's
and overload's from their own modules) as report.md: a heading per section,
pipe tables, flags as their marks with the legend below, and each chart as a
link to its SVG file beside it (svg.figure_files: the page's charts)."""
from .model import Bullets, Cell, Charts, Figure, Legend, Para, Part, Report, Row, Table
from .sections import head, sections
from .svg import file_name
from ..measure.flags import BASELINE_MARK, BASELINE_NOTE, marks, shown
from ..results import Results


def legend_lines(flags, baseline: bool = False) -> list[str]:
    """The flags' meanings as a list (report.md, ab.md)."""
    lines = [f"- {f.mark} `{f.name}`: {f.legend}" if f.mark else f"- `{f.name}`" for f in shown(flags)]
    lines += [f"- {BASELINE_MARK} {BASELINE_NOTE}"] if baseline else []
    return ["Flags:", "", *lines, ""] if lines else []


def cell_text(cell) -> str:
    if not isinstance(cell, Cell):
        return cell
    if cell.names:
        return " ".join(cell.flags) + cell.text
    found = marks(cell.flags)
    return cell.text + (f" {found}" if found else "") + (BASELINE_MARK if cell.dagger else "") + cell.after


def block_lines(block, level: int) -> list[str]:
    if isinstance(block, Para):
        return [f"> {block.text}" if block.quote else block.text, ""]
    if isinstance(block, Bullets):
        return [*(f"- {item}" for item in block.items), ""]
    if isinstance(block, Table):
        cells = [[cell_text(c).replace("|", "\\|") for c in (r.cells if isinstance(r, Row) else r)] for r in block.rows]
        rule = "".join("--:|" if a == "r" else "---|" for a in block.align.ljust(len(block.header)))
        return ["| " + " | ".join(block.header) + " |", "|" + rule, *("| " + " | ".join(r) + " |" for r in cells), ""]
    if isinstance(block, Legend):
        return legend_lines(block.flags, block.baseline)
    if isinstance(block, Charts):
        return [line for f in block.figures for line in block_lines(f, level)]
    if isinstance(block, Figure):
        return [f"![{block.caption}]({file_name(block.svg)})", ""] if block.svg else []
    body = [line for b in block.blocks for line in block_lines(b, level + 1)]
    return [f"{'#' * level} {block.title}", "", *body] if body else []


def render_report(report: Report) -> str:
    return "\n".join(block_lines(Part(report.title, report.head + report.sections), 1))


def render_markdown(results: Results) -> str:
    return render_report(Report(f"GridFS Serving Lab report: run {results.run_id}", head(results), sections(results)))
