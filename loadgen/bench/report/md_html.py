"""The few Markdown forms the A/B, resilience and overload reports write
(headings, paragraphs, lists, quotes, pipe tables, **bold**, `code`) as
HTML, for those runs' pages: their reports are written as Markdown only
(report/ab.py, resilience.py, overload.py), unlike a bench run's, whose
sections both backends render from one model (report/sections.py). Not a
general Markdown parser."""
import re


def _cells(line: str) -> list[str]:
    cells = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [c.strip().replace("\\|", "|") for c in cells]


def to_html(lines: list[str]) -> str:
    from .html import inline, table  # the page's own: html.py imports this module
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            block = []
            while i < len(lines) and lines[i].startswith("|"):
                block.append(lines[i])
                i += 1
            out.append(table(_cells(block[0]), [_cells(b) for b in block[2:]]))
            continue
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            out.append(f"<h{level + 1}>{inline(line[level:].strip())}</h{level + 1}>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{inline(lines[i][2:])}</li>")
                i += 1
            out.append(f"<ul>{''.join(items)}</ul>")
            continue
        elif line.startswith(">"):
            quote = []
            while i < len(lines) and lines[i].startswith(">"):
                quote.append(lines[i][1:].strip())
                i += 1
            out.append(f"<blockquote>{inline(' '.join(quote))}</blockquote>")
            continue
        elif line.startswith("!["):
            pass  # report.md's PNGs: the page draws its own charts
        elif line.strip():
            para = [line]
            while i + 1 < len(lines) and lines[i + 1].strip() and lines[i + 1][0] not in "|#->!":
                i += 1
                para.append(lines[i])
            out.append(f"<p>{inline(' '.join(para))}</p>")
        i += 1
    return "\n".join(out)
