"""Charts as inline SVG, drawn here in Python. Why not a JS charting library:
the page must open offline from disk and results/example/index.html is
committed, so any library would be inlined into a committed file (its
source in our tree) and into every run's page; SVG needs no script, scales
with the viewBox from 390 px to print, and a test can count its marks.
Every mark carries a <title>, the browser's hover tooltip. The same SVG,
with the page's chart style inside it, is the file report.md links
(figure_files): one drawing of each figure for both."""
import math
import re
from dataclasses import dataclass, field
from html import escape, unescape

from .model import Charts, Figure, Part

# Okabe-Ito: tells apart under the common colour-vision deficiencies.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
WIDTH, LABEL_W, RIGHT, ROW_H, TOP, BOTTOM = 640, 130, 16, 22, 26, 34


@dataclass
class Point:
    value: float
    kind: str          # a key of the chart's kinds: its colour and legend entry
    tip: str           # the hover text


@dataclass
class Row:
    label: str
    points: list[Point] = field(default_factory=list)
    bar: float | None = None   # drawn as a bar from the axis (e.g. the median), with bar_tip
    bar_tip: str = ""
    note: str = ""             # after the label when there is nothing to draw (e.g. "failed")


def _fmt(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


class _Scale:
    def __init__(self, top: float, log: bool, low: float = 0.0):
        self.log, self.x0, self.x1 = log, LABEL_W, WIDTH - RIGHT
        if log:
            self.low = 10 ** math.floor(math.log10(max(low, 1e-9)))
            self.high = 10 ** math.ceil(math.log10(max(top, self.low * 10)))
        else:
            self.low, self.high = 0.0, _nice(top)

    def __call__(self, v: float) -> float:
        if self.log:
            v = max(v, self.low)
            share = (math.log10(v) - math.log10(self.low)) / (math.log10(self.high) - math.log10(self.low))
        else:
            share = v / self.high if self.high else 0
        return self.x0 + share * (self.x1 - self.x0)

    def ticks(self) -> list[float]:
        if self.log:
            n = round(math.log10(self.high / self.low))
            return [self.low * 10 ** i for i in range(n + 1)]
        return [self.high * i / 4 for i in range(5)]


def _nice(top: float) -> float:
    """The axis' end: 1, 2, 2.5 or 5 times a power of ten at or above top."""
    if top <= 0:
        return 1.0
    base = 10 ** math.floor(math.log10(top))
    return next(m * base for m in (1, 2, 2.5, 5, 10) if m * base >= top)


def _svg(height: float, title: str, body: list[str], kinds: dict[str, str]) -> str:
    legend, x = [], LABEL_W
    for i, (kind, colour) in enumerate(kinds.items()):
        legend.append(f'<rect x="{x}" y="6" width="10" height="10" fill="{colour}"/>'
                      f'<text x="{x + 14}" y="15">{escape(kind)}</text>')
        x += 22 + 7 * len(kind)
    return (f'<svg class="chart" viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{escape(title)}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{escape(title)}</title>{"".join(legend)}'
            f'{"".join(body)}</svg>')


def _axis(scale: _Scale, y_top: float, y_bottom: float, unit: str) -> list[str]:
    out, ticks = [], scale.ticks()
    for t in ticks:
        x = scale(t)
        anchor = "end" if t == ticks[-1] else "middle"  # the last label inside the chart's edge
        out.append(f'<line class="grid" x1="{x:.1f}" y1="{y_top}" x2="{x:.1f}" y2="{y_bottom}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{y_bottom + 13}" text-anchor="{anchor}">{_fmt(t)}</text>')
    out.append(f'<text class="tick" x="{WIDTH - RIGHT}" y="{y_bottom + 27}" text-anchor="end">{escape(unit)}'
               f'{" (log scale)" if scale.log else ""}</text>')
    return out


def strip_chart(title: str, rows: list[Row], kinds: dict[str, str], unit: str, log: bool = False) -> str:
    """A row per label: a bar (the row's figure) and a dot per point (e.g.
    each repetition), on one shared horizontal axis."""
    values = [p.value for r in rows for p in r.points] + [r.bar for r in rows if r.bar is not None]
    values = [v for v in values if v is not None and v > 0] or [1.0]
    scale = _Scale(max(values), log, min(values))
    height = TOP + ROW_H * len(rows) + BOTTOM
    body = _axis(scale, TOP, TOP + ROW_H * len(rows), unit)
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        body.append(f'<text x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end">{escape(row.label)}</text>')
        if row.bar is not None:
            x = scale(row.bar)
            body.append(f'<rect class="mark bar" x="{LABEL_W}" y="{y + 5}" width="{max(x - LABEL_W, 1):.1f}" '
                        f'height="{ROW_H - 10}"><title>{escape(row.bar_tip)}</title></rect>')
        for p in row.points:
            body.append(f'<circle class="mark" cx="{scale(p.value):.1f}" cy="{y + ROW_H / 2}" r="4" '
                        f'fill="{kinds[p.kind]}"><title>{escape(p.tip)}</title></circle>')
        if row.note:
            body.append(f'<text class="note" x="{LABEL_W + 4}" y="{y + 15}">{escape(row.note)}</text>')
    return _svg(height, title, body, kinds)


def stacked_bars(title: str, rows: list[tuple[str, list[tuple[str, float, str]]]], kinds: dict[str, str],
                 unit: str) -> str:
    """A row per label: segments (kind, value, tip) end to end."""
    totals = [sum(v for _, v, _ in segs) for _, segs in rows] or [1.0]
    scale = _Scale(max(totals), False)
    height = TOP + ROW_H * len(rows) + BOTTOM
    body = _axis(scale, TOP, TOP + ROW_H * len(rows), unit)
    for i, (label, segs) in enumerate(rows):
        y, x = TOP + i * ROW_H, float(LABEL_W)
        body.append(f'<text x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        for kind, value, tip in segs:
            w = scale(value) - LABEL_W
            body.append(f'<rect class="mark" x="{x:.1f}" y="{y + 4}" width="{max(w, 0.5):.1f}" height="{ROW_H - 8}" '
                        f'fill="{kinds[kind]}"><title>{escape(tip)}</title></rect>')
            x += w
    used = {kind for _, segs in rows for kind, _, _ in segs}
    return _svg(height, title, body, {k: c for k, c in kinds.items() if k in used})


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], x_unit: str, y_unit: str,
               x_log: bool = True, y_log: bool = False, x_ticks: list[tuple[float, str]] | None = None,
               dots: bool = True, bands: list[tuple[float, float, str]] = ()) -> str:
    """One line per series (e.g. requests per second against concurrency
    over a log x axis). x_ticks: [(x, label)] in place of one tick per x;
    dots: a dot with its tip per point (not for a time series' hundreds);
    bands: [(x from, x to, tip)] shaded behind the lines."""
    plot_h, left = 220, 56
    xs = [x for pts in series.values() for x, _ in pts] or [1]
    ys = [y for pts in series.values() for _, y in pts] or [1]
    if x_log:
        lo, hi = math.log10(max(min(xs), 1e-9)), math.log10(max(max(xs), min(xs) * 10))
    else:
        lo, hi = min(xs + [x for x, _ in x_ticks or []]), max(xs + [x for x, _ in x_ticks or []])
    y_scale = _Scale(max(ys), y_log, min(y for y in ys if y > 0) if y_log and any(y > 0 for y in ys) else 0.0)
    top = y_scale.high

    def px(x):
        return left + ((math.log10(x) if x_log else x) - lo) / (hi - lo or 1) * (WIDTH - RIGHT - left)

    def py(y):
        if y_log:
            share = (math.log10(max(y, y_scale.low)) - math.log10(y_scale.low)) / \
                (math.log10(y_scale.high) - math.log10(y_scale.low))
            return TOP + plot_h - share * plot_h
        return TOP + plot_h - y / top * plot_h

    body = [f'<rect x="{px(x0):.1f}" y="{TOP}" width="{max(px(x1) - px(x0), 1):.1f}" height="{plot_h}" '
            f'fill="{"#e6e6e6" if i % 2 else "#f0f0f0"}"><title>{escape(tip)}</title></rect>'
            for i, (x0, x1, tip) in enumerate(bands)]
    for y in (y_scale.ticks() if y_log else [top * i / 4 for i in range(5)]):
        body.append(f'<line class="grid" x1="{left}" y1="{py(y):.1f}" x2="{WIDTH - RIGHT}" y2="{py(y):.1f}"/>'
                    f'<text class="tick" x="{left - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{_fmt(y)}</text>')
    for x, label in x_ticks or [(x, _fmt(x)) for x in sorted(set(xs))]:
        body.append(f'<text class="tick" x="{px(x):.1f}" y="{TOP + plot_h + 14}" text-anchor="middle">'
                    f'{escape(label)}</text>')
    body.append(f'<text class="tick" x="{WIDTH - RIGHT}" y="{TOP + plot_h + 28}" text-anchor="end">'
                f'{escape(x_unit)}{" (log scale)" if x_log else ""}; y: {escape(y_unit)}'
                f'{" (log scale)" if y_log else ""}</text>')
    kinds = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    for name, pts in series.items():
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        body.append(f'<polyline class="mark" fill="none" stroke="{kinds[name]}" stroke-width="2" points="{path}">'
                    f'<title>{escape(name)}</title></polyline>')
        body += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{kinds[name]}"><title>{escape(name)}: '
                 f'{_fmt(y)} {escape(y_unit)} at {_x_label(x, x_ticks)}</title></circle>' for x, y in pts if dots]
    legend_rows = math.ceil(len(kinds) / 4)
    height = TOP + plot_h + 36
    svg = _svg(height, title, body, {})
    # the legend below the plot, four to a line, so long names fit at any width
    legend = "".join(f'<rect x="{left + (i % 4) * 145}" y="{height + 4 + (i // 4) * 16}" width="10" height="10" '
                     f'fill="{c}"/><text x="{left + 14 + (i % 4) * 145}" y="{height + 13 + (i // 4) * 16}">'
                     f'{escape(n)}</text>' for i, (n, c) in enumerate(kinds.items()))
    taller = f'viewBox="0 0 {WIDTH} {height + 8 + 16 * legend_rows:.0f}"'
    return svg.replace(f'viewBox="0 0 {WIDTH} {height:.0f}"', taller).replace("</svg>", legend + "</svg>")


def _x_label(x: float, x_ticks: list[tuple[float, str]] | None) -> str:
    """A point's x in the axis' own words where a tick names it."""
    return next((label for at, label in x_ticks or [] if abs(at - x) < 1e-9), f"{x:g}")


@dataclass
class IntervalRow:
    """One metric of an A/B case on the log scale: each block's log(B/A),
    the estimate and its interval (None: no interval)."""
    label: str
    log_ratios: list[float]
    estimate: float
    low: float | None
    high: float | None
    tip: str


def _change(log_ratio: float) -> str:
    return f"{(math.exp(log_ratio) - 1) * 100:+.0f}%"


def interval_chart(title: str, rows: list[IntervalRow], threshold: float) -> str:
    """B against A on a log axis, symmetric (x2 and /2 equally far from 0),
    ticks labelled as changes in percent: the interval as a band with the
    estimate, a dot per block, +-threshold dashed (clear of zero: a
    verdict; wholly between the dashes: no change)."""
    bound = math.log1p(threshold)
    values = [abs(v) for r in rows for v in r.log_ratios] + [abs(v) for r in rows for v in (r.low, r.high)
                                                            if v is not None]
    top = max(values + [2 * bound, 0.01]) * 1.05
    x0, x1 = LABEL_W, WIDTH - RIGHT

    def x(v: float) -> float:
        return x0 + (v + top) / (2 * top) * (x1 - x0)
    height = TOP + ROW_H * len(rows) + BOTTOM
    y_end = TOP + ROW_H * len(rows)
    body = []
    for t in (-top, -top / 2, 0.0, top / 2, top):
        anchor = "end" if t == top else "start" if t == -top else "middle"
        body.append(f'<line class="grid" x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{y_end}"/>'
                    f'<text class="tick" x="{x(t):.1f}" y="{y_end + 13}" text-anchor="{anchor}">{_change(t)}</text>')
    for t in (-bound, bound):
        body.append(f'<line x1="{x(t):.1f}" y1="{TOP}" x2="{x(t):.1f}" y2="{y_end}" stroke="{PALETTE[5]}" '
                    f'stroke-dasharray="4 3"/>')
    body.append(f'<text class="tick" x="{x1}" y="{y_end + 27}" text-anchor="end">B against A (log scale; '
                f'dashed: ±{threshold * 100:g}%)</text>')
    for i, row in enumerate(rows):
        y = TOP + i * ROW_H
        body.append(f'<text x="{LABEL_W - 6}" y="{y + 15}" text-anchor="end">{escape(row.label)}</text>')
        if row.low is not None and row.high is not None:
            body.append(f'<rect class="mark bar" x="{x(row.low):.1f}" y="{y + 5}" '
                        f'width="{max(x(row.high) - x(row.low), 1):.1f}" height="{ROW_H - 10}">'
                        f'<title>{escape(row.tip)}</title></rect>')
        body.append(f'<line class="mark" x1="{x(row.estimate):.1f}" y1="{y + 3}" x2="{x(row.estimate):.1f}" '
                    f'y2="{y + ROW_H - 3}" stroke="{PALETTE[0]}" stroke-width="2"><title>{escape(row.tip)}</title>'
                    '</line>')
        for n, v in enumerate(row.log_ratios, 1):
            body.append(f'<circle class="mark" cx="{x(v):.1f}" cy="{y + ROW_H / 2}" r="3" fill="{PALETTE[1]}">'
                        f'<title>block {n}: {_change(v)}</title></circle>')
    return _svg(height, title, body, {"a block": PALETTE[1], "estimate": PALETTE[0]})


# page.css's chart rules, for a figure's file, which has no page around it
FILE_STYLE = ("<style>svg { font: 13px system-ui, sans-serif; fill: #1b1f24; background: #fff; } "
              ".grid { stroke: #d0d7de; } .tick { fill: #57606a; } .bar { fill: #9ecae1; } "
              ".note { fill: #b00020; font-weight: 600; }</style>")


def file_name(svg: str) -> str:
    """The file beside report.md holding a chart: its title, as a file name."""
    title = unescape(re.search(r"<title>(.*?)</title>", svg).group(1))
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") + ".svg"


def standalone(svg: str) -> str:
    """A page's chart as a file of its own: sized as drawn, with its style."""
    width, height = re.search(r'viewBox="0 0 (\d+) (\d+)"', svg).groups()
    tag_end = svg.index(">") + 1
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<svg width="{width}" height="{height}"{svg[4:tag_end]}'
            f"{FILE_STYLE}{svg[tag_end:]}\n")


def figure_files(blocks: list) -> dict[str, str]:
    """Every drawn figure among a report's blocks (in its parts and chart
    groups) as the file report.md links: file name -> standalone SVG."""
    files = {}
    for block in blocks:
        if isinstance(block, Figure) and block.svg:
            files[file_name(block.svg)] = standalone(block.svg)
        elif isinstance(block, (Part, Charts)):
            files |= figure_files(block.blocks if isinstance(block, Part) else block.figures)
    return files
