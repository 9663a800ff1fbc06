"""The report's sections, built once from a Results in the one order both
report.md and index.html show them (report/model.py says what a section
holds): first the headline, one row per target and size with the sentences
that say what the run found, then the details (sections() lists them). A
failed case reads "failed" in every table, never a number."""
import json

from . import study000, study002
from .cpu_time import cpu_over_time
from .headline import (BASELINE, concurrencies, cpu_condition, ferretdb, files, grouped, headline_level,
                       headline_rows, open_loop_for, ratio_words, runs_at, sentences, size_label as _size,
                       timed_targets)
from .model import Bullets, Cell, Charts, Figure, Legend, Para, Part, Row, Table, text
from .svg import PALETTE, Point, Row as ChartRow, line_chart, stacked_bars, strip_chart
from ..environment import server_label
from ..measure.flags import BASELINE_MARK
from ..measure.latency import nines, percentile_curve
from ..measure.rounds import flagged_baseline, mean_positions
from ..measure.stats import TOOLS_DISAGREE
from ..measure.usage import LOADGEN, SENT_RATE_KEPT
from ..results import Results, StorePass, median_repetition
from ..settings import OPEN_LOOP_MAX_S, OPEN_LOOP_REQUESTS, SERVICE_IMAGE_BASES

FAILED_CASES_SHOWN = 30  # per target; results.json keeps every case
CASE = ["target", "size", "concurrency"]  # the columns of a case's name (_case)


def _legend(rows: list, baseline: bool = False) -> list:
    """The legend of the flags the rows' cells show, and of † when a ratio
    rests on a flagged baseline: read off the cells, so it explains every
    mark the reader sees and no other."""
    cells = [c for r in rows for c in (r.cells if isinstance(r, Row) else r) if isinstance(c, Cell)]
    flags, baseline = {f for c in cells for f in c.flags}, baseline or any(c.dagger for c in cells)
    return [Legend(flags, baseline)] if flags or baseline else []


def _spread(spread: dict | None, count: int) -> str:
    """' ±12%': half the repetitions' (or passes') range, when there are two or more."""
    half = (spread or {}).get("half_range")
    return f" ±{half:.0%}" if half is not None and count > 1 else ""


def _rps_cell(item, after: str = "") -> Cell:
    """A case's (or one tool's) requests per second ± its spread, flagged."""
    spread = _spread(item.spread, len(item.repetitions))
    return Cell(f"{item.rps:.0f}{spread}", tuple(item.flags), num=True, after=after)


def _names(flags) -> Cell:
    """A flags column: each flag by its name."""
    return Cell("", tuple(flags), names=True)


def _case(item) -> list[str]:
    return [item.target, _size(item.file), str(item.concurrency)]


def _failed(figures: int) -> list[str]:
    """A failed item's figures: "failed" where the first would be and "-" for the rest, never a number."""
    return ["failed", *["-"] * (figures - 1)]


def _ms(run) -> str:
    """CPU ms per request: the path's own container's / the database's."""
    used = [run.cpu.get(role) or {} for role in (run.target, run.database_role)]
    return " / ".join("-" if u.get("cpu_ms_per_request") is None else f"{u['cpu_ms_per_request']:.3f}" for u in used)


def _part(title: str, about: str, table: Table, *more, folded: bool = False) -> list[Part]:
    """A subsection: what its table holds, the table, anything more; none when the table has no rows."""
    return [Part(title, [Para(about), table, *more], folded=folded)] if table.rows else []


def _by_size_and_target(results: Results, cell) -> list[Part]:
    """A part per concurrency level: a row per file size, a column per timed
    target (grouped by store); a completed run's cell is cell(run)."""
    targets = grouped(results)
    header = ["File size", *(f"{t} ({results.store_of(t)})" for t in targets)]
    return [Part(f"Concurrency {c}", [Table(header, [
        [_size(f), *("-" if (run := results.run_for(t, f, c)) is None else cell(run) if run.ok else "failed"
                     for t in targets)] for f in files(results)])]) for c in concurrencies(results)]


def _series(points) -> dict[str, list[tuple[float, float]]]:
    """A line chart's series from (line, x, y) triples, each line's points in their order."""
    series: dict[str, list] = {}
    for line, x, y in points:
        series.setdefault(line, []).append((x, y))
    return series


def _each_case(results: Results, chart) -> list[Figure]:
    """chart(results, file, c) for every size and concurrency, the ones drawn."""
    return [f for c in concurrencies(results) for file in files(results) if (f := chart(results, file, c))]


def _strip(caption: str, title: str, kind: str, unit: str, rows: list) -> Figure:
    """A strip chart: per row (label, median or None when failed, the bar's tip, dots as (value, tip)), the
    median as the bar and each repetition (or pass) as a dot."""
    return Figure(caption, strip_chart(title, [ChartRow(label, [Point(v, kind, tip) for v, tip in dots], median, bar,
                                                        "failed" if median is None else "")
                                               for label, median, bar, dots in rows], {kind: PALETTE[0]}, unit))


def head(results: Results) -> list:
    """What ran, where and for how long, and what a reader must know first."""
    env, params, timing = results.environment, results.parameters, results.timing
    loadgens = timing.get("loadgens", 1)
    cases = {k: timing.get(k, "?") for k in ("repetitions", "duration_s", "max_duration_s", "min_requests", "warmup_s")}
    load = text("load", ab=env.get("ab_version", "ab"), profile=timing.get("profile", "full"),
                concurrency=params.get("BENCH_CONCURRENCY"), tools=" ".join(timing.get("tools", ["ab"])),
                loadgens=text("loadgens", processes=loadgens) if loadgens > 1 else "", **cases)
    # the images: the shared bases, then any service's own base that was swapped
    images = [k for k in ("NGINX_BASE_IMAGE", "HTTPD_IMAGE", "PYTHON_IMAGE", "NODE_IMAGE") if params.get(k)]
    images += [k for k, base in SERVICE_IMAGE_BASES.items() if params.get(k) and params[k] != params.get(base)]
    stopped = results.status not in ("complete", "running")
    first = [text("stopped", state=results.status.split(":")[0], status=results.status)] if stopped else []
    first += [text("ferretdb")] if ferretdb(results) else []
    return [Bullets([
        f"Database: **{server_label(env)}** from image `{params.get('MONGO_IMAGE', '?')}`",
        "Images: " + ", ".join(f"{k}=`{params[k]}`" for k in images),
        text("pins", cpu=env.get("cpu_model", "?"), cores=env.get("host_cores", "?"),
             **{k: params.get(k) for k in ("TARGET_CPUS", "MONGO_CPUS", "LOADGEN_CPUS", "TARGET_MEM", "MONGO_MEM")}),
        load,
        f"Started {results.started_at}, finished {results.finished_at}"
        + (f" ({env['duration_seconds']:.0f} s)" if env.get("duration_seconds") else "")]),
        *(Para(line, quote=True) for line in first + [f"**Warning:** {w}" for w in results.warnings])]


# --- the headline --------------------------------------------------------------
def _headline(results: Results) -> list:
    if not results.runs:
        return [Para("No case was timed.")]
    c, rows = headline_level(results), []
    # same-moment CPU ratios rest on nginx-static in their own window, never flagged there
    cpu_in_rounds = cpu_condition(results) is None
    for h in headline_rows(results):
        run, loop, named = h.run, h.loop, [h.target, h.store, h.size]
        key = {"target": h.target, "file": run.file, "concurrency": c}
        if not run.ok:
            rows.append(Row([*named, Cell("failed", col="rps"), *_failed(4), run.error or ""], key, failed=True))
            continue
        p99 = (Cell("failed") if loop and not loop.ok else
               Cell(f"{loop.p99_ms:.2f} @ {loop.rate:.0f}/s", tuple(loop.flags)) if loop else Cell("-"))
        p99.col, p99.num = "p99", True
        rows.append(Row([*named, Cell(f"{run.rps:.0f}", num=True, col="rps"),
                         Cell(ratio_words(h.rps, h.rps_ratio), dagger=h.baseline_flagged, num=True, col="rps-ratio"),
                         Cell(ratio_words(h.cpu, h.cpu_ratio), dagger=h.baseline_flagged and cpu_in_rounds, num=True,
                              col="cpu-ratio"),
                         p99, Cell(run.bottleneck or "-", col="bottleneck", note=text("bottleneck")),
                         Cell(" (baseline flagged)" if h.baseline_flagged else "", tuple(run.flags), names=True)],
                        key))
    lines = sentences(results)
    return ([Para(" ".join(lines), answer=True)] if lines else []) + [
        Table(["target", "store", "size", f"req/s at c={c}", "req/s ratio to nginx-static",
               _cpu_heading(results, "CPU/request ratio to nginx-static"), "p99 ms at a fixed rate", "bottleneck",
               "flags"], rows, "headline"),
        Para(text("headline", share=results.timing.get("open_loop_share", 0.5), bottleneck=text("bottleneck"))),
        *_legend(rows)]


def _rounds(results: Results) -> list:
    """How the rounds ran and what each headline ratio rests on: its width,
    the per-round sd of its log, its rounds, and whether it converged."""
    found = results.rounds or {}
    rows = [r for r in found.get("rows", []) if r.get("headline")]
    if not rows:
        return []
    width, c = found.get("target_width"), rows[0]["concurrency"]

    def cells(ratio: dict | None) -> list[str]:
        return [ratio_words(ratio), f"x/÷{ratio['width']:.3f}" if ratio.get("width") else "-",
                f"{ratio['sd']:.3f}" if ratio.get("sd") is not None else "-"] if ratio else ["-"] * 3

    not_within = f"**not within x/÷{width:g}** ({found.get('stopped')})" if width else "fixed count"
    table = [[r["target"], _size(r["file"]), *cells(r.get("rps")), *cells(r.get("cpu")), str(r["rounds"]),
              f"within at round {r['converged_at']}" if r.get("converged_at") else not_within]
             for r in sorted(rows, key=lambda r: (r["file"], r["target"]))]
    orders = results.schedule.get("orders") or {}
    positions = mean_positions({k: v for k, v in orders.items() if k.endswith(f"c={c}")})
    return [Para(text("rounds", rounds=found.get("rounds"), c=c, stopped=found.get("stopped"),
                      width=f"; target width x/÷{width:g}" if width else "", estimator=found.get("estimator"),
                      positions=", ".join(f"{name} {p:g}" for name, p in positions.items()))),
            Table(["target", "size", "req/s ratio", "width", "sd", _cpu_heading(results, "CPU/request ratio"), "width",
                   "sd", "rounds", "interval"], table)]


def _cpu_heading(results: Results, words: str) -> str:
    """A CPU ratio column's heading, with its condition when the ratios come
    from same-moment windows (BENCH_CPU_DESIGN=same-moment)."""
    condition = cpu_condition(results)
    return f"{words} {condition}" if condition else words


# --- requests per second, CPU, latency ---------------------------------------------
def _rps_chart(results: Results, file: str, c: int) -> Figure:
    rows = [(r.target, r.rps if r.ok else None, f"{r.target}: median {r.rps:.0f} req/s",
             [(x["rps"], f"{r.target} {_size(file)} c={c}, repetition {i + 1}: {x['rps']:.0f} req/s")
              for i, x in enumerate(r.repetitions) if x.get("rps")]) for r in runs_at(results, file, c)]
    return _strip(text("rps_chart", size=_size(file), c=c), f"Requests per second, {_size(file)}, c={c}", "repetition",
                  "requests per second", rows)


def _requests_per_second(results: Results) -> list:
    flagged = []  # the ratios' flagged baselines: their dagger is in the cell's text, not its own

    def cell(run):
        base = results.run_for(BASELINE, run.file, run.concurrency)
        published = study000.time_per_request_ms(run.target, run.file)
        after = f" [{1000 / published:.0f}]" if published else ""
        if base and base.ok and base.rps and run.target != BASELINE:
            flagged.append(flagged_baseline(base.flags))
            after = f" ({run.rps / base.rps:.3f}{BASELINE_MARK if flagged[-1] else ''})" + after
        return _rps_cell(run, after)

    tables = _by_size_and_target(results, cell)
    return [Charts(_each_case(results, _rps_chart)),
            Para(text("rps", columns=", ".join(f'{ours} = "{theirs}"' for ours, theirs in study000.COLUMNS.items()))),
            *tables, *_legend([row for part in tables for row in part.blocks[0].rows], any(flagged))]


def _cpu_chart(results: Results, file: str, c: int) -> Figure | None:
    kinds = {"path": PALETTE[0], "database": PALETTE[1], "upstream": PALETTE[2], "load generator": PALETTE[3]}
    upstream = (results.parameters.get("CACHE_UPSTREAM") or "").split(":")[0] or None
    rows = []
    for run in (r for r in runs_at(results, file, c) if r.ok and r.cpu):
        # a later key wins: the row's own path is "path" even when it is another row's upstream
        kind_of = {upstream: "upstream", LOADGEN: "load generator", run.target: "path"}
        segs = [(kind, ms, f"{run.target}: {role} ({kind}) {ms:.3f} ms") for role, used in run.cpu.items()
                if (ms := used.get("cpu_ms_per_request")) for kind in [kind_of.get(role, "database")]]
        rows.append((run.target, sorted(segs, key=lambda s: list(kinds).index(s[0]))))
    return Figure(text("cpu_chart", size=_size(file), c=c),
                  stacked_bars(f"CPU ms per request by container, {_size(file)}, c={c}", rows, kinds,
                               "CPU ms per request")) if rows else None


def _cpu_per_request(results: Results) -> list:
    def cell(run):
        db = run.database_role
        return Cell(_ms(run) + (f" ({db})" if db and db != "mongo" else ""), tuple(run.flags)) if run.cpu else "-"

    return [Charts(_each_case(results, _cpu_chart)), Para(text("cpu")),
            *_by_size_and_target(results, cell), *_cpu_by_case(results),
            Part("CPU over time", [Charts(cpu_over_time(results))])]


def _cores(usage: dict | None) -> str:
    if not usage or usage.get("cores") is None:
        return "-"
    return f"{usage['cores']:.2f}" + (f" of {allowance:g}" if (allowance := usage.get("allowance_cores")) else "")


def _cpu_by_case(results: Results) -> list[Part]:
    rows = [[*_case(r), *(_cores(r.cpu.get(role)) for role in (r.target, r.database_role, LOADGEN)),
             ", ".join(f"{cpu[3:]}: {share:.0%}" for cpu, share in sorted(busy.items()) if cpu != "cpu"),
             _names(r.flags)] for r in results.runs if r.ok and r.cpu
            for busy in [(r.cpu_window or {}).get("busy_shares") or {}]]
    header = [*CASE, "target cores", "database cores", "load generator cores", "host cores busy", "flags"]
    return _part("CPU cores by case (mean over the timed interval, of the container's allowance)", text("cpu_by_case"),
                 Table(header, rows), folded=True)


def _latency_charts(results: Results, file: str) -> list[Figure]:
    """Percentiles at a fixed rate; every request's latency as a curve; and
    with several shares (BENCH_OPEN_LOOP), p99 against the share of capacity."""
    kinds = {"p50": PALETTE[2], "p90": PALETTE[1], "p99": PALETTE[5], "max": PALETTE[7]}
    share, rows, curves = results.timing.get("open_loop_share", 0.5), [], {}
    for o in [o for t in grouped(results) if (o := open_loop_for(results, t, file)) is not None]:
        pts = [Point(getattr(o, f"{k}_ms"), k, f"{o.target} {_size(file)} at {o.rate:.0f}/s: "
                     f"{k} {getattr(o, f'{k}_ms'):.2f} ms") for k in kinds] if o.ok else []
        rows.append(ChartRow(o.target, pts, note="" if o.ok else "failed"))
        if o.ok and o.latency_histogram:
            curves[o.target] = percentile_curve(o.latency_histogram)
    deepest = max((x for pts in curves.values() for x, _ in pts), default=0)
    ticks = [(nines(q), f"{q * 100:g}%") for q in (0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999) if nines(q) <= deepest + 0.5]
    series = {t: pts for t, pts in _series((o.target, o.share * 100, o.p99_ms) for o in results.open_loop
                                           if o.file == file and o.ok and o.share).items() if len(pts) > 1}
    return [Figure(f"{_size(file)}: response time percentiles at {share:.0%} of each path's best rate.",
                   strip_chart(f"Latency at a fixed rate, {_size(file)}", rows, kinds, "milliseconds", log=True)),
            *([Figure(text("latency_curve", size=_size(file), share=share),
                      line_chart(f"Latency distribution, {_size(file)}", curves, "percentile", "milliseconds",
                                 x_log=False, y_log=True, x_ticks=ticks))] if curves else []),
            *([Figure(f"{_size(file)}: p99 at each share of the path's keep-alive capacity (open loop).",
                      line_chart(f"p99 against load, {_size(file)}", series, "share of capacity, %",
                                 "p99 milliseconds", x_log=False, y_log=True))] if series else [])]


def _open_loop(results: Results) -> list:
    rows = []
    for o in results.open_loop:
        low, high = o.p99_interval_ms or (None, None)
        interval = "-" if low is None else f"{low:.2f}–" + ("?" if high is None else f"{high:.2f}")
        rate = f"{o.rate:g}" + (f" of {o.capacity:g} ({o.capacity_from})" if o.capacity_from else "") + (
            f", {o.share:.0%}" if o.share and results.timing.get("open_loop_curve") else "")
        figures = ([rate, f"{o.sent_rate:g}", f"{o.requests:,}", f"{o.p50_ms:.2f}", f"{o.p99_ms:.2f}", interval,
                    f"{o.p999_ms:.2f}", f"{o.max_ms:.1f}", _names(o.flags)] if o.ok
                   else [f"{o.rate:g}", *_failed(7), o.error or ""])
        rows.append([o.target, _size(o.file), *figures])
    return [Charts([f for file in files(results) for f in _latency_charts(results, file)]),
            Para(text("open_loop", requests=OPEN_LOOP_REQUESTS, max_s=OPEN_LOOP_MAX_S, kept=SENT_RATE_KEPT)),
            Table(["target", "size", "rate asked /s", "sent /s", "requests", "p50 ms", "p99 ms",
                   "p99 95% interval ms", "p99.9 ms", "max ms", "flags"], rows)]


def _sweep(results: Results) -> list:
    levels, order = sorted({p.concurrency for p in results.sweep}), timed_targets(results)
    keys = sorted({(p.target, p.size_bytes, p.file, p.tool) for p in results.sweep},
                  key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1], k[3]))
    cells = {(p.target, p.file, p.tool, p.concurrency): Cell(f"{p.rps:.0f}", tuple(p.flags), num=True,
                                                             after=f" ({p.failed} failed)" if p.failed else "")
             for p in reversed(results.sweep)}  # reversed: the first of any point timed twice
    rows = [[target, _size(file), tool, *(cells.get((target, file, tool, c), "-") for c in levels)]
            for target, _, file, tool in keys]
    # a chart per size and tool: eight paths are as many lines as the palette tells apart
    figures = [Figure(f"{_size(file)} by {tool}: requests per second at each concurrency, one short run each.",
                      line_chart(f"Concurrency sweep, {_size(file)}, {tool}", _series(
                          (p.target, p.concurrency, p.rps) for p in results.sweep if (p.file, p.tool) == (file, tool)),
                          "concurrency", "requests per second"))
               for _, tool, file in sorted({(p.size_bytes, p.tool, p.file) for p in results.sweep})]
    seconds = results.timing.get("sweep_duration_s")
    return [Charts(figures),
            Para(text("sweep", seconds=f" of {seconds:g} s" if seconds else "")),
            Table(["target", "size", "tool", *[f"c={c}" for c in levels]], rows), *_legend(rows)]


# --- the working set over HTTP and the stores ----------------------------------
def _working_set(results: Results) -> list:
    ws = results.working_set
    hot_file = files(results)[0] if results.runs else None
    base = next((r for r in ws.runs if r.target == BASELINE and r.ok), None)
    runs = sorted(ws.runs, key=lambda r: grouped(results, [x.target for x in ws.runs]).index(r.target))
    rows = []
    for r in runs:
        hot = results.run_for(r.target, hot_file, ws.concurrency)
        hot_cell = "-" if hot is None else ("failed" if not hot.ok else f"{hot.rps:.0f}")
        ratio = f"{r.rps / base.rps:.3f}" if base and base.rps and r.target != BASELINE else "-"
        hits = f"{r.cache['hit_ratio']:.3f}" if r.cache and r.cache.get("hit_ratio") is not None else "-"
        figures = ([_rps_cell(r), ratio, hot_cell, _ms(r) if r.cpu else "-", hits, ""] if r.ok
                   else [*_failed(2), hot_cell, "-", "-", r.error or ""])
        rows.append([r.target, results.store_of(r.target), *figures])
    limits = ", ".join(f"{role} {limit / 2**20:.0f}" for role, limit in sorted(ws.memory_limits.items()))
    cache = results.parameters.get("CACHE_SIZE")
    return [Charts([_strip("Many files in random order: the bar is the median repetition, each dot one repetition.",
                           f"Working set {ws.spec}, c={ws.concurrency}", "repetition", "requests per second",
                           [(r.target, r.rps if r.ok else None, f"{r.target}: {r.rps:.0f} req/s",
                             [(x["rps"], f"{r.target}: {x['rps']:.0f} req/s") for x in r.repetitions if x.get("rps")])
                            for r in runs])]),
            Para(text("working_set", spec=ws.spec, count=ws.count, mib=ws.total_bytes / 2**20, c=ws.concurrency,
                      hot=_size(hot_file) if hot_file else "-", limits=limits or "not read",
                      cache=f"; nginx-cache's cache tmpfs {cache}" if cache else "")),
            Table(["target", "store", "req/s", "ratio to nginx-static", "hot-file req/s", "CPU ms/request "
                   "target / database", "cache hit ratio", "error"], rows), *_legend(rows)]


def _store_name(results: Results, store: str) -> str:
    return f"{store} (FerretDB)" if store == "gridfs" and ferretdb(results) else store


def _pass_figures(row: StorePass) -> list:
    """A store row's seconds, files/s, MB/s, CPU s/GB (bench's / the store's own container's, whatever its
    service is named; none for the filesystem, whose work is bench's) and its median pass's ms per file."""
    if not row.ok:
        return _failed(5)
    per_gb = row.cpu_s_per_gb or {}
    store = next((v for role, v in per_gb.items() if role != LOADGEN), None)
    median = median_repetition(row.passes) if row.passes else {"p50_ms": 0.0, "p99_ms": 0.0}
    return [f"{row.seconds:.2f}", f"{row.files_per_s:.2f}",
            Cell(f"{row.mb_per_s:.1f}{_spread(row.spread, len(row.passes))}", tuple(row.flags), num=True),
            " / ".join("-" if v is None else f"{v:.2f}" for v in (per_gb.get(LOADGEN), store)) if per_gb else "-",
            f"{median['p50_ms']:.0f} / {median['p99_ms']:.0f}"]


def _study002_cell(row: StorePass, same: bool) -> str:
    seconds = study002.write_seconds(row.store, row.threads) if row.operation == "write" else None
    if seconds is None:
        return "-"
    rate = study002.write_mb_per_s(row.store, row.threads)
    return f"{seconds:.0f} s ({rate:.1f} MB/s)" if same else f"({rate:.1f} MB/s)"


def _stores(results: Results) -> list:
    passes = results.writes + results.reads
    setup = results.store_setup
    files_, size = setup.get("files", passes[0].files), setup.get("file_bytes", passes[0].file_bytes)
    same = study002.same_setting(files_, size)
    rows = [[_store_name(results, r.store), r.operation, str(r.threads), r.order, *_pass_figures(r),
             _study002_cell(r, same), "" if r.ok else r.error or ""] for r in passes]
    return [Charts([_strip("Each store written then read back: the bar is the median pass, each dot one pass.",
                           "Stores: MB/s written and read", "pass", "MB/s (10^6 bytes)",
                           [(f"{p.store} {p.operation} {p.threads}t", p.mb_per_s if p.ok else None,
                             f"median {p.mb_per_s:.1f} MB/s",
                             [(mb, f"{p.store} {p.operation}, {p.threads} threads: {mb:.1f} MB/s")
                              for x in p.passes if x.get("rps") for mb in [x["rps"] * p.file_bytes / 1e6]])
                            for p in passes])]),
            Para(text("stores", files=files_, size=size, gb=files_ * size / 1e9,
                      threads=max(setup.get("threads", [1])))),
            Table(["store", "operation", "threads", "order", "seconds", "files/s", "MB/s", "CPU s/GB bench / store",
                   "ms per file p50 / p99", "seed 002", "error"], rows), *_legend(rows),
            *_disk(results), *_durability(results)]


def _disk(results: Results) -> list:
    rows = [[_store_name(results, r.store), str(r.threads), f"{r.total_bytes:,}", f"{r.disk['bytes']:,}",
             f"{r.disk['ratio']:.3f}", f"{published:.2f}" if (published := study002.disk_ratio(r.store)) else "-",
             "yes" if r.verified else "**no**"] for r in results.writes if r.disk]
    return _part("Storage used", text("disk"), Table(["store", "threads", "bytes written", "bytes used", "ratio",
                                                      "seed 002 ratio", "verified"], rows))


def _plain(value) -> str:
    """A recorded setting as a reader writes it: {'w': 1, 'j': True} -> w=1 j=true."""
    if isinstance(value, dict):
        return " ".join(f"{k}={_plain(v)}" for k, v in value.items())
    return str(value).lower() if isinstance(value, bool) else str(value)


def _durability(results: Results) -> list:
    durability = results.store_setup.get("durability") or {}
    items = [f"{_store_name(results, store)}: " + "; ".join(f"{k}: {_plain(v)}" for k, v in settings.items())
             for store, settings in durability.items()]
    items += [f"{store}: **failed**: {why}" for store, why in (results.store_setup.get("errors") or {}).items()]
    return [Part("What made a write durable", [Para(text("durability")), Bullets(items)])] if durability else []


# --- ab -k against wrk, the checks, every case, the settings ----------------------
def _agreement(results: Results) -> list:
    rows = [[*_case(c), *map(_rps_cell, tools),
             f"**{c.difference:.1%} differ**" if c.disagree else f"{c.difference:.1%}",
             str(sum(t.failed for t in tools)), str(sum(t.refused for t in tools))]
            for c in sorted(results.comparisons, key=lambda c: (c.concurrency, c.size_bytes))
            for tools in [(c.ab_keepalive, c.wrk)]]
    free = [c for c in results.comparisons if not c.bound]
    return [Para(text("agreement", differ=TOOLS_DISAGREE)),
            Table([*CASE, "ab -k req/s", "wrk req/s", "difference", "failed", "refused"], rows),
            Para(text("agreed", agree=sum(not c.disagree for c in free), free=len(free), differ=TOOLS_DISAGREE,
                      bound=len(results.comparisons) - len(free))),
            *_legend(rows)]


def _checks(results: Results) -> list:
    checked = [t for t in results.targets if t.conforming is not None]
    failed = [[t.name, c["case"], str(c["expected"]), str(c["got"])]
              for t in checked for c in [c for c in t.conformance if not c["passed"]][:FAILED_CASES_SHOWN]]
    return [*_part("Verification", text("verification"), Table(["target", "url", "verified", "error"], [
                [t.name, t.url, "yes" if t.verified else "**no**", t.error or ""] for t in results.targets])),
            *_part("Conformance", text("conformance"), Table(["target", "passed", "failed", "conforming"], [
                [t.name, str(sum(c["passed"] for c in t.conformance)), str(sum(not c["passed"] for c in t.conformance)),
                 "yes" if t.conforming else
                 ("**no**, timed anyway (rows marked)" if t.verified else "**no**, not timed")] for t in checked]),
                   *([Para("Failed cases:"), Table(["target", "case", "expected", "got"], failed)] if failed else []))]


def _every_case(results: Results) -> list:
    rows = []
    for r in results.runs:
        rps = r.spread or {}
        figures = ([f"{r.rps:.0f}", f"{rps.get('min', r.rps):.0f}–{rps.get('max', r.rps):.0f}", f"{r.requests}",
                    f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.transfer_kbps:.0f}"] if r.ok else _failed(6))
        rows.append([*_case(r), *figures, str(r.failed),
                     f"{r.refused} ({r.refused_share:.0%})" if r.refused and r.answers else str(r.refused),
                     _names(r.flags) if r.ok else r.error or ""])
    return [Para(text("every_case")),
            Table([*CASE, "req/s", "req/s min–max", "requests", "p50 ms", "p99 ms", "KB/s", "failed", "refused",
                   "flags / error"], rows), *_cache(results), *_peak_memory(results)]


def _cache(results: Results) -> list:
    rows = [[*_case(r), str(r.cache["hits"]), str(r.cache["misses"]), str(sum(r.cache["other"].values())),
             "-" if r.cache["hit_ratio"] is None else f"{r.cache['hit_ratio']:.4f}"] for r in results.runs if r.cache]
    return _part("Cache hits", text("cache"), Table([*CASE, "hits", "misses", "other", "hit ratio"], rows), folded=True)


def _peak_memory(results: Results) -> list:
    peaks: dict[str, int] = {}
    for r in results.runs:
        for role, usage in (r.cpu or {}).items():
            peaks[role] = max(peaks.get(role, 0), usage.get("peak_memory_bytes") or 0)
    rows = [[role, f"{peak / 2**20:.1f}"] for role, peak in sorted(peaks.items())]
    return _part("Peak memory per container (MiB)", text("peak_memory"), Table(["container", "peak MiB"], rows),
                 folded=True)


def _settings(results: Results) -> list:
    env, timing, link = results.environment, results.timing, results.environment.get("link") or {}
    tools = [[k, str(env[k])] for k in ("cpu_model", "host_cores", "loadgen_cores", "kernel", "cgroup_version",
                                        "ab_version", "wrk_version", "vegeta_version", "loadgen_allowance_cores",
                                        "duration_seconds") if env.get(k) is not None]
    retransmits = f", {link['retransmits']} retransmits" if link.get("retransmits") is not None else ""
    shaped = f" shaped with tc ({link['shaped']})" if link.get("shaped") else ""
    measured = [Para(text("link", shaped=shaped, direction=link["direction"], seconds=link["seconds"],
                          mbit=link["bits_per_second"] / 1e6, retransmits=retransmits))] if link else []
    planned, actual = timing.get("planned_seconds"), timing.get("actual_seconds")
    took = text("took", planned=planned, actual=actual) if planned and actual else ""
    return [
        Part("Host and tools", [Table(["", ""], [["database", server_label(env)], *tools])]),
        *_part("Hosts", text("hosts"), Table(["host", "CPUs", "memory", "containers"], [
                   [f"{h['name']}{' (bench)' if h.get('bench') else ''}", str(h.get("cpus", "?")),
                    f"{h['memory_bytes'] / 2**30:.1f} GiB" if h.get("memory_bytes") else "?",
                    ", ".join(h.get("containers") or []) or "none watched"] for h in env.get("hosts") or []]),
               *measured),
        *_part("Images", text("images"), Table(["container", "image", "image ID"], [
                   [role, f"`{i.get('image') or '?'}`", f"`{(i.get('image_id') or '?').removeprefix('sha256:')[:12]}`"]
                   for role, i in (env.get("images") or {}).items()])),
        Part("Settings (.env as the run saw it)", [
            Table(["variable", "value"], [[k, f"`{v}`"] for k, v in results.parameters.items()])], folded=True),
        Part("Timing as applied", [Table(["knob", "value"], [[k, f"`{json.dumps(v)}`"] for k, v in timing.items()])],
             folded=True),
        *_part("What this run cost (wall seconds)", text("cost", took=took),
               Table(["phase", "seconds"], [[name, f"{seconds:.1f}"] for name, seconds in results.phases.items()]))]


def sections(results: Results) -> list[Part]:
    """Every section of the report that has something to show, in order: its
    anchor, its title, whether the run holds what it shows, its builder."""
    timed, ws = bool(results.runs), results.working_set
    found = [
        ("headline", "Headline", True, _headline),
        ("rounds", "Rounds: what each ratio rests on", True, _rounds),
        ("rps", "Requests per second", timed, _requests_per_second),
        ("cpu", "CPU ms per request (target / database; lower is better)", any(r.cpu for r in results.runs),
         _cpu_per_request),
        ("open-loop", "Latency at a fixed rate (open loop, vegeta)", timed and results.open_loop, _open_loop),
        ("sweep", "Concurrency sweep (requests per second)", timed and results.sweep, _sweep),
        ("working-set", "Working set: many files in random order", ws and ws.runs, _working_set),
        ("stores", "Stores: writes and reads (seed 002)", results.writes or results.reads, _stores),
        ("tools", "ab -k against wrk (requests per second; agreement per case)", timed and results.comparisons,
         _agreement),
        ("checks", "Verification and conformance", True, _checks),
        ("cases", "Every case", timed, _every_case),
        ("settings", "Settings, images and hosts", True, _settings),
    ]
    return [Part(title, blocks, anchor=anchor) for anchor, title, shown, build in found
            if shown and (blocks := build(results))]
