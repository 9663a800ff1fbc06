"""The report as data: sections of paragraphs, tables of typed cells, legends
and figures, built once from a Results (report/sections.py; an A/B run's in
report/change.py, a resilience or overload run's in report/resilience.py and
overload.py) and written by two small backends, report.md (report/markdown.py)
and index.html (report/html.py), so both list the same sections in one order
and wording.
Text may hold two inline marks, **strong** and `code`: Markdown keeps them,
HTML writes <strong> and <code>. The sections' fixed prose is data, in
report/text.toml, read by text()."""
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

TEXT = tomllib.loads((Path(__file__).parent / "text.toml").read_text(encoding="utf-8"))


def text(key: str, **figures) -> str:
    """The prose text.toml holds under key, its {figures} filled in."""
    return TEXT[key].format(**figures)


@dataclass
class Cell:
    """A table cell: its text, then its flags as marks (or by name, for a
    flags column), and a dagger when its ratio rests on a flagged baseline."""
    text: str
    flags: tuple = ()
    names: bool = False  # a flags column: each flag by its name
    dagger: bool = False
    after: str = ""      # after the marks: the ratio and seed 000's figure beside a req/s
    num: bool = False
    col: str = ""        # its data-col, read by tests/support/browser_check.py
    note: str = ""       # what the cell means, on hover


@dataclass
class Row:
    cells: list
    key: dict = field(default_factory=dict)  # the page's data- attributes of the row
    failed: bool = False


@dataclass
class Table:
    header: list[str]
    rows: list  # of Row, or of lists of str and Cell
    id: str = ""
    align: str = ""  # a letter per column, "r" for one of figures (report.md's --:); the rest left


@dataclass
class Para:
    text: str
    answer: bool = False  # the run's answer, set apart on the page
    quote: bool = False   # what a reader must know first: a quote in report.md, set apart on the page too


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Legend:
    """What the marks of these flags mean, in the flags registry's order."""
    flags: set
    baseline: bool = False


@dataclass
class Figure:
    """A chart (report/svg.py): inline on the page, a file beside report.md."""
    caption: str
    svg: str = ""


@dataclass
class Charts:
    figures: list[Figure]


@dataclass
class Part:
    """A section (with its anchor on the page), or a subsection, folded on the
    page when it is there to check, not to read first."""
    title: str
    blocks: list
    folded: bool = False
    anchor: str = ""


@dataclass
class Report:
    """A page: its title, what a reader must know first, then its sections."""
    title: str
    head: list
    sections: list[Part]
