"""Writes the report's sections (report/sections.py) as index.html: one file
that opens offline from disk (style and charts inline, no script, nothing
fetched), in report.md's order and words; flags are explained on hover and
in a legend, and what is there to check rather than read first is folded.
Also the pages of A/B, resilience and overload runs, from their own
sections (report/change.py, resilience.py, overload.py), and write_page, which
picks the page."""
import json
import re
from html import escape
from pathlib import Path

from .change import change_report
from .model import Bullets, Cell, Charts, Figure, Legend, Para, Part, Row, Table
from .overload import overload_part
from .resilience import resilience_part
from .sections import head, sections
from ..measure.flags import BASELINE_MARK, BASELINE_NOTE, FLAGS, shown
from ..results import Results

PAGE = "index.html"
CSS = (Path(__file__).parent / "page.css").read_text()  # the page's style, inline in every page
_STRONG, _CODE = re.compile(r"\*\*(.+?)\*\*"), re.compile(r"`([^`]+)`")
_NUMBER = re.compile(r"^[-+]?[\d,.]+( ±\d+%)?$")
LINKED = ("report.md", "results.json", "results.csv", "bencher.json")  # beside a run's page, linked when there


def inline(text: str) -> str:
    """The model's two inline marks, **strong** and `code`, as HTML."""
    return _CODE.sub(r"<code>\1</code>", _STRONG.sub(r"<strong>\1</strong>", escape(text, quote=False)))


def _abbr(title: str, html: str) -> str:
    """Text that explains itself on hover: a flag's mark, the dagger, a cell's note."""
    return f'<abbr class="flag" title="{escape(title)}">{html}</abbr>'


def _flag(name: str, with_name: bool) -> str:
    flag = FLAGS.get(name)
    return _abbr(flag.legend if flag else name,
                 " ".join(escape(x) for x in ((flag.mark if flag else ""), name if with_name else "") if x))


def _td(cell) -> str:
    if not isinstance(cell, Cell):
        cell = Cell(cell, num=bool(_NUMBER.match(cell)))
    flags = (" " if cell.names else "").join(_flag(f, cell.names) for f in cell.flags)
    text = _abbr(cell.note, inline(cell.text)) if cell.note else inline(cell.text)
    dagger = _abbr(BASELINE_NOTE, BASELINE_MARK) if cell.dagger else ""
    body = (flags + text) if cell.names else text + dagger + (f" {flags}" if flags else "") + inline(cell.after)
    attrs = (' class="num"' if cell.num else "") + (f' data-col="{cell.col}"' if cell.col else "")
    return f"<td{attrs}>{body}</td>"


def _tr(row) -> str:
    row = row if isinstance(row, Row) else Row(row)
    attrs = (' class="failed"' if row.failed else "") + "".join(f' data-{k}="{escape(str(v))}"'
                                                              for k, v in row.key.items())
    return f"<tr{attrs}>{''.join(_td(c) for c in row.cells)}</tr>"


def _blocks(blocks: list, level: int) -> str:
    return "".join(_block(b, level) for b in blocks)


def _block(block, level: int) -> str:
    if isinstance(block, Para) and block.quote:
        return f"<blockquote>{inline(block.text)}</blockquote>"
    if isinstance(block, Para):
        return f'<p{" class=answer" if block.answer else ""}>{inline(block.text)}</p>'
    if isinstance(block, Bullets):
        return f"<ul>{''.join(f'<li>{inline(item)}</li>' for item in block.items)}</ul>"
    if isinstance(block, Table):  # in a scrolling box: wide tables scroll, the page does not
        head_, id_ = "".join(f"<th>{inline(h)}</th>" for h in block.header), f' id="{block.id}"' if block.id else ""
        return (f'<div class="table"><table{id_}><thead><tr>{head_}</tr></thead>'
                f"<tbody>{''.join(_tr(r) for r in block.rows)}</tbody></table></div>")
    if isinstance(block, Legend):
        items = [f"<li>{_flag(f.name, True)}: {escape(f.legend)}</li>" for f in shown(block.flags)]
        items += [f"<li>{BASELINE_MARK} {escape(BASELINE_NOTE)}</li>"] if block.baseline else []
        return f'<p>Flags:</p><ul class="legend">{"".join(items)}</ul>'
    if isinstance(block, Charts):
        return f'<div class="charts">{figures}</div>' if (figures := _blocks(block.figures, level)) else ""
    if isinstance(block, Figure):  # inline: the page opens offline, report.md links the same SVG as a file
        return f"<figure>{block.svg}<figcaption>{escape(block.caption)}</figcaption></figure>" if block.svg else ""
    if not (body := _blocks(block.blocks, level + 1)):
        return ""
    if block.folded:
        return f"<details><summary>{inline(block.title)}</summary>{body}</details>"
    return f"<h{level}>{inline(block.title)}</h{level}>{body}"


def _page(title: str, links: list[str], all_runs: bool, body: str) -> str:
    links = ([f'<a href="../{PAGE}">All runs</a>'] if all_runs else []) + [f'<a href="{n}">{n}</a>' for n in links]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{CSS}</style></head><body><p>{' · '.join(links)}</p>{body}</body></html>\n")


def _body(first: list, parts: list[Part], nav: bool = False) -> str:
    """What a reader must know first, a table of contents (nav), then each section under its anchor."""
    toc = "".join(f'<a href="#{s.anchor}">{escape(s.title)}</a>' for s in parts) if nav else ""
    return (_blocks(first, 2) + (f"<nav>{toc}</nav>" if nav else "")
            + "".join(f'<section id="{s.anchor}">{_block(s, 2)}</section>' for s in parts))


def render_html(results: Results, linked: tuple = LINKED, all_runs: bool = True) -> str:
    """The run's page; linked: the files beside it to link; all_runs: link results/index.html."""
    failed = results.status != "complete" or results.failed
    status = "complete, with failures" if results.status == "complete" and failed else results.status
    title = f"GridFS Serving Lab: run {escape(results.run_id)}"
    return _page(title, list(linked), all_runs, f'<h1>{title} <span class="status{" bad" if failed else ""}">'
                 f"{escape(status)}</span></h1>{_body(head(results), sections(results), nav=True)}")


def render_change_page(results: Results, all_runs: bool = True) -> str:
    """An A/B run's page: its ab.md's sections (verdicts, the table, every
    block) and a chart of the paired changes per case."""
    report = change_report(results)
    return _page(f"GridFS Serving Lab: {escape(report.title)}", ["ab.md", "ab.json", "results.json"], all_runs,
                 f"<h1>{escape(report.title)}</h1>{_body(report.head, report.sections)}")


def write_page(run_dir: Path, results: Results | None = None, all_runs: bool | None = None) -> Path:
    """run_dir/index.html from its results.json (or from the run's own
    Results, which results.json serialises), linking the files that are
    there and, when there is one (or all_runs), results/index.html."""
    doc = results.to_dict() if results else json.loads((run_dir / "results.json").read_text())
    linked = tuple(name for name in LINKED if (run_dir / name).exists())
    all_runs = (run_dir.parent / PAGE).exists() if all_runs is None else all_runs
    if "runs" not in doc and ("resilience" in doc or "overload" in doc):  # their report.md's tables are all they hold
        parts = [part(doc) for key, part in (("resilience", resilience_part), ("overload", overload_part))
                 if doc.get(key) is not None]
        page = _page(f"GridFS Serving Lab: {escape(str(doc.get('run_id', '?')))}", ["report.md", "results.json"],
                     all_runs, _blocks(parts, 2))
    else:
        results = results or Results.from_dict(doc)
        page = render_change_page(results, all_runs) if doc.get("ab") else render_html(results, linked, all_runs)
    (run_dir / PAGE).write_text(page)
    return run_dir / PAGE
