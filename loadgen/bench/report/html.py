"""Renders a Results as index.html: one file that opens offline from disk
(style and charts inline, no script, nothing fetched). The headline first
(report/headline.py, as report.md has it, flags explained on hover and in a
legend), then per case: requests per second with every repetition, CPU per
request by container, latency at a fixed rate, the sweep, the working set,
the stores, checks and the run's settings. The tables report.md already
writes come from markdown.py's own sections (report/md_html.py)."""
import json
import math
from html import escape
from pathlib import Path

from . import markdown as md
from .headline import (BASELINE, concurrencies, files, grouped, headline_level, headline_rows, open_loop_for,
                       ratio_words, sentences, size_label, timed_targets)
from .md_html import inline, table, to_html
from .ab import render_ab
from .svg import PALETTE, IntervalRow, Point, Row, interval_chart, line_chart, stacked_bars, strip_chart
from ..measure.latency import nines, percentile_curve
from ..measure.usage import LOADGEN
from ..results import Results, Run

PAGE = "index.html"
BOTTLENECK_NOTE = ("Bottleneck: what bound the row, decided in one place from its flags and CPU (the load "
                   "generator; a core two active containers shared; the target's or the database's own CPU "
                   "allowance used to 90%; else none: the path waited with CPU to spare).")
CSS = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg: #fff; --band: #f6f8fa; --accent: #0072B2; }
* { box-sizing: border-box; }
body { font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg);
       margin: 0 auto; max-width: 1120px; padding: 0 16px 48px; overflow-wrap: anywhere; }
h1 { font-size: 1.5rem; margin: 20px 0 4px; } h2 { margin-top: 36px; border-bottom: 1px solid var(--line); }
h3 { margin-top: 24px; font-size: 1.05rem; }
nav { font-size: .9rem; display: flex; flex-wrap: wrap; gap: 4px 14px; padding: 8px 0;
      border-bottom: 1px solid var(--line); }
nav a { color: var(--accent); text-decoration: none; }
.answer { font-size: 1.1rem; background: var(--band); border-left: 4px solid var(--accent); padding: 10px 14px; }
.status { display: inline-block; padding: 1px 8px; border-radius: 10px; font-size: .85rem; background: #dafbe1; }
.status.bad { background: #ffebe9; }
blockquote { margin: 12px 0; padding: 8px 12px; border-left: 4px solid #E69F00; background: #fff8e6; }
.table { overflow-x: auto; margin: 8px 0 12px; }
table { border-collapse: collapse; font-size: .88rem; }
th, td { border: 1px solid var(--line); padding: 3px 7px; overflow-wrap: normal; text-align: left;
         vertical-align: top; }
th { background: var(--band); } td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failed td { background: #ffebe9; }
abbr.flag { text-decoration: none; border-bottom: 1px dotted var(--muted); cursor: help; white-space: nowrap; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 500px), 1fr));
          gap: 8px 20px; }
figure { margin: 8px 0; min-width: 0; }
.charts > figure:only-child { max-width: 640px; } figcaption { font-size: .9rem; color: var(--muted); }
svg.chart { width: 100%; height: auto; font: 13px system-ui, sans-serif; fill: var(--fg); }
svg .grid { stroke: var(--line); } svg .tick { fill: var(--muted); } svg .bar { fill: #9ecae1; }
svg .note { fill: #b00020; font-weight: 600; }
details { margin: 6px 0; } summary { cursor: pointer; }
dl.answer-pair dt { font-weight: 600; }
dl.answer-pair dd { margin: 0 0 6px 12px; font-family: ui-monospace, monospace; }
code { font-size: .9em; }
.passed { font-size: .85rem; color: var(--muted); }
#headline td:first-child { white-space: nowrap; }
"""


def _flag(flag: str) -> str:
    mark = md.MARKS.get(flag, "")
    return f'<abbr class="flag" title="{escape(md.LEGEND.get(flag, flag))}">{mark} {escape(flag)}</abbr>'


def _section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{anchor}"><h2>{escape(title)}</h2>{body}</section>' if body else ""


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def _headline(results: Results) -> str:
    if not results.runs:
        return "<p>No case was timed.</p>"
    c = headline_level(results)
    dagger = f'<abbr class="flag" title="{escape(md.BASELINE_NOTE[2:])}">{md.BASELINE_MARK}</abbr>'
    rows, seen = [], set()
    for h in headline_rows(results):
        run, loop = h.run, h.loop
        key = f'data-target="{escape(h.target)}" data-file="{escape(run.file)}" data-concurrency="{c}"'
        if not run.ok:
            rows.append(f'<tr class="failed" {key}><td>{escape(h.target)}</td><td>{h.store}</td><td>{h.size}</td>'
                        f'<td data-col="rps">failed</td><td>failed</td><td>-</td><td>-</td><td>-</td>'
                        f'<td>{escape(run.error or "")}</td></tr>')
            continue
        seen |= set(run.flags) | set(loop.flags if loop else [])
        d = dagger if h.baseline_flagged else ""
        p99 = ("failed" if loop and not loop.ok else
               f"{loop.p99_ms:.2f} @ {loop.rate:.0f}/s " + " ".join(_flag(f) for f in loop.flags) if loop else "-")
        rows.append(f'<tr {key}><td>{escape(h.target)}</td><td>{h.store}</td><td>{h.size}</td>'
                    f'<td class="num" data-col="rps">{run.rps:.0f}</td>'
                    f'<td class="num" data-col="rps-ratio">{escape(ratio_words(h.rps, h.rps_ratio))}{d}</td>'
                    f'<td class="num" data-col="cpu-ratio">{escape(ratio_words(h.cpu, h.cpu_ratio))}{d}</td>'
                    f'<td class="num" data-col="p99">{p99}</td>'
                    f'<td data-col="bottleneck"><abbr class="flag" title="{escape(BOTTLENECK_NOTE)}">'
                    f'{escape(run.bottleneck or "-")}</abbr></td>'
                    f'<td>{" ".join(_flag(f) for f in run.flags)}</td></tr>')
    legend = "".join(f"<li>{_flag(f)}: {escape(md.LEGEND[f])}</li>" for f in md.MARKS if f in seen)
    if any(h.baseline_flagged for h in headline_rows(results)):
        legend += f"<li>{escape(md.BASELINE_NOTE)}</li>"
    head = ["target", "store", "size", f"req/s at c={c}", "req/s ratio to nginx-static",
            "CPU/request ratio to nginx-static", "p99 ms at a fixed rate", "bottleneck", "flags"]
    return (f'<p class="answer">{inline(" ".join(sentences(results)))}</p>'
            f'<div class="table"><table id="headline"><thead><tr>{"".join(f"<th>{escape(x)}</th>" for x in head)}'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'
            f"<p>Ratios: the target's figure over nginx-static's in the same run (higher req/s is better; lower CPU "
            f"per request is better). p99 at a fixed rate: an open-loop run (vegeta) at "
            f"{results.timing.get('open_loop_share', 0.5):.0%} of the path's keep-alive capacity, so it is "
            f"response time, not queueing. {escape(BOTTLENECK_NOTE)} Hover a flag for what it means.</p>"
            + (f'<p>Flags:</p><ul class="legend">{legend}</ul>' if legend else ""))


def _rps_charts(results: Results) -> str:
    kinds = {"repetition": PALETTE[0]}
    figures = []
    targets = grouped(timed_targets(results))
    for c in concurrencies(results):
        for file, _ in files(results):
            rows = []
            for t in targets:
                run = results.run_for(t, file, c)
                if run is None:
                    continue
                reps = [Point(r["rps"], "repetition", f"{t} {size_label(file)} c={c}, repetition {i + 1}: "
                              f"{r['rps']:.0f} req/s") for i, r in enumerate(run.repetitions) if r.get("rps")]
                rows.append(Row(t, reps, run.rps if run.ok else None,
                                f"{t}: median {run.rps:.0f} req/s", "" if run.ok else "failed"))
            figures.append(_figure(strip_chart(f"Requests per second, {size_label(file)}, c={c}", rows, kinds,
                                               "requests per second"),
                                   f"{size_label(file)} at concurrency {c}: the bar is the median repetition "
                                   "(the row's figure), each dot one repetition."))
    return f'<div class="charts">{"".join(figures)}</div>' + to_html(md._requests_per_second(results)[1:])


def _role_kind(role: str, run: Run, upstream: str | None) -> str:
    if role == run.target:
        return "path"
    if role == LOADGEN:
        return "load generator"
    return "upstream" if role == upstream else "database"


CPU_KINDS = {"path": PALETTE[0], "database": PALETTE[1], "upstream": PALETTE[2], "load generator": PALETTE[3]}


def _cpu_charts(results: Results) -> str:
    if not any(r.cpu for r in results.runs):
        return ""
    upstream = (results.parameters.get("CACHE_UPSTREAM") or "").split(":")[0] or None
    figures = []
    for c in concurrencies(results):
        for file, _ in files(results):
            rows = []
            for t in grouped(timed_targets(results)):
                run = results.run_for(t, file, c)
                if run is None or not run.ok or not run.cpu:
                    continue
                segs = [(_role_kind(role, run, upstream), used["cpu_ms_per_request"],
                         f"{t}: {role} ({_role_kind(role, run, upstream)}) {used['cpu_ms_per_request']:.3f} ms")
                        for role, used in run.cpu.items() if used.get("cpu_ms_per_request")]
                order = list(CPU_KINDS)
                rows.append((t, sorted(segs, key=lambda s: order.index(s[0]))))
            if rows:
                figures.append(_figure(stacked_bars(f"CPU ms per request by container, {size_label(file)}, c={c}",
                                                    rows, CPU_KINDS, "CPU ms per request"),
                                       f"{size_label(file)} at concurrency {c}: each container's CPU time per "
                                       "request in the row's repetition (hover a segment for the container)."))
    return (f'<div class="charts">{"".join(figures)}</div>'
            + to_html(md._cpu_per_request(results)[1:]) + _more(md._cpu_by_case(results)))


def _more(lines: list[str]) -> str:
    """A section of report.md folded: there to check, not to read first."""
    if not lines:
        return ""
    return f"<details><summary>{inline(lines[0].lstrip('# '))}</summary>{to_html(lines[1:])}</details>"


PERCENTILE_TICKS = [(0.5, "50%"), (0.9, "90%"), (0.99, "99%"), (0.999, "99.9%"), (0.9999, "99.99%"),
                    (0.99999, "99.999%")]


def _latency_against_load(results: Results, file: str) -> list[str]:
    """With a latency curve (BENCH_OPEN_LOOP with several shares): p99
    against the share of capacity, a line per path."""
    series = {}
    for o in results.open_loop:
        if o.file == file and o.ok and o.share:
            series.setdefault(o.target, []).append((o.share * 100, o.p99_ms))
    series = {t: pts for t, pts in series.items() if len(pts) > 1}
    if not series:
        return []
    return [_figure(line_chart(f"p99 against load, {size_label(file)}", series, "share of capacity, %",
                               "p99 milliseconds", x_log=False, y_log=True),
                    f"{size_label(file)}: p99 at each share of the path's keep-alive capacity (open loop).")]


def _open_loop(results: Results) -> str:
    if not results.open_loop:
        return ""
    kinds = {"p50": PALETTE[2], "p90": PALETTE[1], "p99": PALETTE[5], "max": PALETTE[7]}
    share = results.timing.get("open_loop_share", 0.5)
    figures = []
    for file, _ in files(results):
        rows, curves = [], {}
        for t in grouped(timed_targets(results)):
            o = open_loop_for(results, t, file)
            if o is None:
                continue
            pts = [] if not o.ok else [Point(getattr(o, f"{k}_ms"), k, f"{t} {size_label(file)} at {o.rate:.0f}/s: "
                                             f"{k} {getattr(o, f'{k}_ms'):.2f} ms") for k in kinds]
            rows.append(Row(t, pts, note="" if o.ok else "failed"))
            if o.ok and o.latency_histogram:
                curves[t] = percentile_curve(o.latency_histogram)
        figures.append(_figure(strip_chart(f"Latency at a fixed rate, {size_label(file)}", rows, kinds,
                                           "milliseconds", log=True),
                               f"{size_label(file)}: response time percentiles at {share:.0%} of each path's "
                               "best rate."))
        if curves:
            deepest = max(x for pts in curves.values() for x, _ in pts)
            ticks = [(nines(q), label) for q, label in PERCENTILE_TICKS if nines(q) <= deepest + 0.5]
            figures.append(_figure(line_chart(f"Latency distribution, {size_label(file)}", curves, "percentile",
                                              "milliseconds", x_log=False, y_log=True, x_ticks=ticks),
                                   f"{size_label(file)}: every request's response time at {share:.0%} of capacity, "
                                   "as a percentile curve (from the histogram kept in results.json; the last "
                                   "point is the slowest answer)."))
        figures += _latency_against_load(results, file)
    return f'<div class="charts">{"".join(figures)}</div>' + to_html(md._open_loop(results)[1:])


def _sweep(results: Results) -> str:
    if not results.sweep:
        return ""
    figures = []
    # a chart per size and tool: eight paths are as many lines as the palette tells apart
    for (file, _), tool in sorted({((p.file, p.size_bytes), p.tool) for p in results.sweep},
                                  key=lambda k: (k[0][1], k[1])):
        series: dict[str, list] = {}
        for p in results.sweep:
            if (p.file, p.tool) == (file, tool):
                series.setdefault(p.target, []).append((p.concurrency, p.rps))
        figures.append(_figure(line_chart(f"Concurrency sweep, {size_label(file)}, {tool}", series, "concurrency",
                                          "requests per second"),
                               f"{size_label(file)} by {tool}: requests per second at each concurrency, one short "
                               "run each."))
    return f'<div class="charts">{"".join(figures)}</div>' + to_html(md._sweep(results)[1:])


def _working_set(results: Results) -> str:
    ws = results.working_set
    if not ws or not ws.runs:
        return ""
    rows = [Row(r.target, [Point(x["rps"], "repetition", f"{r.target}: {x['rps']:.0f} req/s") for x in r.repetitions
                           if x.get("rps")], r.rps if r.ok else None, f"{r.target}: {r.rps:.0f} req/s",
                "" if r.ok else "failed") for r in sorted(ws.runs, key=lambda r: grouped([x.target for x in ws.runs])
                                                          .index(r.target))]
    chart = _figure(strip_chart(f"Working set {ws.spec}, c={ws.concurrency}", rows, {"repetition": PALETTE[0]},
                                "requests per second"), "Many files in random order: the bar is the median "
                    "repetition, each dot one repetition.")
    return f'<div class="charts">{chart}</div>' + to_html(md._working_set(results)[1:])


def _stores(results: Results) -> str:
    passes = results.writes + results.reads
    if not passes:
        return ""
    kinds = {"pass": PALETTE[0]}
    rows = [Row(f"{p.store} {p.operation} {p.threads}t", [Point(x["rps"] * p.file_bytes / 1e6, "pass",
                f"{p.store} {p.operation}, {p.threads} threads: {x['rps'] * p.file_bytes / 1e6:.1f} MB/s")
                for x in p.passes if x.get("rps")], p.mb_per_s if p.ok else None, f"median {p.mb_per_s:.1f} MB/s",
                "" if p.ok else "failed") for p in passes]
    chart = _figure(strip_chart("Stores: MB/s written and read", rows, kinds, "MB/s (10^6 bytes)"),
                    "Each store written then read back: the bar is the median pass, each dot one pass.")
    return f'<div class="charts">{chart}</div>' + to_html(md._store_benchmark(results)[1:])


def _checks(results: Results) -> str:
    rows = [[t.name, t.url, "yes" if t.verified else "**no**", t.error or ""] for t in results.targets]
    out = ["<h3>Verification</h3><p>Every file's body sha256 and Content-Length checked before timing; a target "
           "that fails is not timed.</p>", table(["target", "url", "verified", "error"], rows)]
    checked = [t for t in results.targets if t.conforming is not None]
    if checked:
        out.append("<h3>Conformance</h3><p>Every answer compared with nginx-static's for the same request; hostile "
                   "requests must be refused safely. Open a target for its cases; a failed case shows the request "
                   "and both answers.</p>")
        for t in checked:
            bad = [c for c in t.conformance if not c["passed"]]
            verdict = "conforming" if t.conforming else "NOT conforming"
            # A failed case opens to the request and both answers; a passed one's answers are equal, so
            # only its name is listed (the page stays small with hundreds of cases).
            failures = "".join(
                f'<details class="case"><summary>✗ {escape(c["case"])}</summary><dl class="answer-pair">'
                f"<dt>request</dt><dd>{escape(c['case'])}</dd><dt>reference ({BASELINE})</dt>"
                f"<dd>{escape(str(c['expected']))}</dd><dt>{escape(t.name)}</dt><dd>{escape(str(c['got']))}</dd>"
                f"</dl></details>" for c in bad)
            passed = ", ".join(escape(c["case"]) for c in t.conformance if c["passed"])
            out.append(f"<details{' open' if bad else ''}><summary><strong>{escape(t.name)}</strong>: {verdict}, "
                       f"{len(t.conformance) - len(bad)} passed, {len(bad)} failed</summary>{failures}"
                       f'<p class="passed">Passed: {passed or "none"}</p></details>')
    return "".join(out)


def _settings(results: Results) -> str:
    env = results.environment
    hosts = [[k, str(env[k])] for k in ("cpu_model", "host_cores", "loadgen_cores", "kernel", "cgroup_version",
                                        "ab_version", "wrk_version", "vegeta_version", "loadgen_allowance_cores",
                                        "duration_seconds") if env.get(k) is not None]
    hosts.insert(0, ["database", md.server_label(env)])
    params = [[k, f"`{v}`"] for k, v in results.parameters.items()]
    timing = [[k, f"`{json.dumps(v)}`"] for k, v in results.timing.items()]
    return ("<h3>Host and tools</h3>" + table(["", ""], hosts) + to_html(md._hosts(results) + md._images(results))
            + _more(["## Settings (.env as the run saw it)", "", *md._table(["variable", "value"], params)])
            + _more(["## Timing as applied", "", *md._table(["knob", "value"], timing)])
            + to_html(md._phases(results)))


def _fault_docs(doc: dict) -> str:
    """resilience and overload sections, when the run's results.json has them
    (their own runs' documents, or a bench run's should it carry them)."""
    out = []
    if doc.get("resilience") is not None:
        from .resilience import render
        out.append(to_html(render(doc).splitlines()))
    if doc.get("overload") is not None:
        from .overload import render
        out.append(to_html(render(doc).splitlines()))
    return "".join(out)


LINKED = ("report.md", "results.json", "results.csv", "bencher.json")


def render_html(results: Results, doc: dict | None = None, linked: tuple = LINKED, all_runs: bool = True) -> str:
    """The run's page; doc is results.json as read, for sections the model
    does not hold (resilience, overload); linked: the files beside it to
    link; all_runs: link results/index.html."""
    failed = results.status != "complete" or results.failed
    status = results.status if results.status != "complete" else ("complete, with failures" if results.failed
                                                                     else "complete")
    sections = [
        ("headline", "Headline", _headline(results)),
        ("rounds", "Rounds: what each ratio rests on", to_html(md._rounds(results)[1:])),
        ("rps", "Requests per second, every repetition", _rps_charts(results) if results.runs else ""),
        ("cpu", "CPU per request by container", _cpu_charts(results)),
        ("open-loop", "Latency at a fixed rate", _open_loop(results)),
        ("sweep", "Concurrency sweep", _sweep(results)),
        ("working-set", "Working set", _working_set(results)),
        ("stores", "Stores: writes and reads (seed 002)", _stores(results)),
        ("tools", "ab -k against wrk", to_html(md._agreement(results)[1:]) if results.comparisons else ""),
        ("faults", "Resilience and overload", _fault_docs(doc or {})),
        ("checks", "Verification and conformance", _checks(results)),
        ("cases", "Every case", (to_html(md._every_case(results)[1:]) + _more(md._cache(results))
                                 + _more(md._peak_memory(results))) if results.runs else ""),
        ("settings", "Settings, images and hosts", _settings(results)),
    ]
    nav = "".join(f'<a href="#{a}">{escape(t)}</a>' for a, t, body in sections if body)
    warnings = "".join(f"<blockquote><strong>Warning:</strong> {inline(w)}</blockquote>" for w in results.warnings)
    heading = to_html(md._heading(results)[1:])
    links = " · ".join(([f'<a href="../{PAGE}">All runs</a>'] if all_runs else [])
                       + [f'<a href="{name}">{name}</a>' for name in linked])
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>GridFS Serving Lab: run {escape(results.run_id)}</title><style>{CSS}</style></head><body>"
            f"<p>{links}</p>"
            f"<h1>GridFS Serving Lab: run {escape(results.run_id)} "
            f'<span class="status{" bad" if failed else ""}">{escape(status)}</span></h1>'
            f"{heading}{warnings}<nav>{nav}</nav>"
            + "".join(_section(a, t, body) for a, t, body in sections) + "</body></html>\n")


def render_fault_page(doc: dict, all_runs: bool = True) -> str:
    """The page of a resilience or overload run (tools/resilience.py,
    tools/overload.py): their report.md's tables, which is all they hold."""
    title = f"GridFS Serving Lab: {escape(str(doc.get('run_id', '?')))}"
    links = " · ".join(([f'<a href="../{PAGE}">All runs</a>'] if all_runs else [])
                       + ['<a href="report.md">report.md</a>', '<a href="results.json">results.json</a>'])
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{title}</title><style>{CSS}</style></head><body><p>{links}</p>"
            f"{_fault_docs(doc)}</body></html>\n")


AB_LABELS = {"rps": "req/s", "cpu_path": "CPU/req, path", "cpu_total": "CPU/req, total"}


def _ab_charts(ab: dict) -> str:
    """A chart per case: every metric's per-block changes, its interval and
    the threshold (bench.measure.paired's figures)."""
    figures = []
    for case in ab.get("cases", []):
        title = f"{case['file'].removesuffix('.bin')} c={case['concurrency']}"
        rows = []
        for r in (r for r in ab.get("rows", []) if r["case"] == title):
            log = lambda ratio: None if ratio is None else math.log(ratio)  # noqa: E731
            rows.append(IntervalRow(AB_LABELS.get(r["metric"], r["metric"]), r["log_ratios"], log(r["ratio"]),
                                    log(r["low"]), log(r["high"]), f"{r['what']}: {r['headline']}"))
        if rows:
            figures.append(_figure(interval_chart(f"B against A, {title}", rows, ab.get("threshold", 0.05)),
                                   f"{title}: a dot per block, the band the 95% interval, the line the estimate"))
    return f'<div class="charts">{"".join(figures)}</div>' if figures else ""


def render_ab_page(results: Results, all_runs: bool = True) -> str:
    """An A/B run's page: its ab.md (verdicts, the table, every block) and
    a chart of the paired changes per case."""
    lines = render_ab(results).splitlines()
    title = escape(lines[0].lstrip("# "))
    links = " · ".join(([f'<a href="../{PAGE}">All runs</a>'] if all_runs else [])
                       + ['<a href="ab.md">ab.md</a>', '<a href="ab.json">ab.json</a>',
                          '<a href="results.json">results.json</a>'])
    split = next((i for i, line in enumerate(lines) if line.startswith("## Blocks")), len(lines))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>GridFS Serving Lab: {title}</title><style>{CSS}</style></head><body><p>{links}</p>"
            f"<h1>{title}</h1>{to_html(lines[1:split])}"
            + _section("paired", "Paired changes per block", _ab_charts(results.ab))
            + to_html(lines[split:]) + "</body></html>\n")


def write_page(run_dir: Path, results: Results | None = None, all_runs: bool | None = None) -> Path:
    """run_dir/index.html from its results.json (or from the run's own
    Results, which results.json serialises), linking the files that are
    there and, when there is one (or all_runs), results/index.html."""
    doc = results.to_dict() if results else json.loads((run_dir / "results.json").read_text())
    linked = tuple(name for name in LINKED if (run_dir / name).exists())
    if all_runs is None:
        all_runs = (run_dir.parent / PAGE).exists()
    path = run_dir / PAGE
    if "runs" not in doc and ("resilience" in doc or "overload" in doc):
        path.write_text(render_fault_page(doc, all_runs))
    elif doc.get("ab"):
        path.write_text(render_ab_page(results or Results.from_dict(doc), all_runs))
    else:
        path.write_text(render_html(results or Results.from_dict(doc), doc, linked, all_runs))
    return path
