"""An A/B run's page (ab.md, also its report.md) and where its verdicts'
false-alarm rate comes from: the last A/A run on the same machine. Pure
but for last_calibration, which reads the results directory. The run is
bench/benchmark/change.py's; compare.py is the other page, two separate runs."""
import json
import math
from pathlib import Path

from ..environment import machine_of, server_label
from ..measure import paired
from ..results import Results
from .markdown import render_report
from .model import Bullets, Charts, Figure, Legend, Para, Part, Report, Table
from .svg import IntervalRow, interval_chart

# A case whose median window sheds more than this share of its answers (503s,
# failures) is judged as any other, but its rows say so: in 14 A/A runs here
# the one false alarm was such a case (docs/ab.md), since what a shedding twin
# serves whole depends on state it keeps for the whole run, unless the twins
# are restarted before each block.
SHEDDING = 0.5


def shedding_note(row: dict, restarted: bool) -> str:
    """What a reader of a shedding case's verdict must know ('' otherwise)."""
    if row.get("shed") is None or row["shed"] <= SHEDDING:
        return ""
    if restarted:
        return f"sheds {row['shed']:.0%} of its answers: read it beside the blocks' failures"
    return (f"sheds {row['shed']:.0%} of its answers, so a verdict here may be this run's twins and not their "
            "images (docs/ab.md): repeat the run before acting on it")

ALARMS = (paired.BETTER, paired.WORSE)


def false_alarms(rows: list[dict]) -> dict:
    """In an A/A run every "better" or "worse" verdict is a false alarm."""
    alarms = sum(1 for r in rows if r["verdict"] in ALARMS)
    return {"alarms": alarms, "rows": len(rows), "rate": round(alarms / len(rows), 4) if rows else None}


def last_calibration(results_dir: Path, results: Results) -> dict | None:
    """The newest complete A/A run on this machine before this one (its
    ab.json), with its false alarms; None when there is none."""
    here = machine_of(results.environment)
    for ab_json in sorted(results_dir.glob("*/ab.json"), reverse=True):
        if ab_json.parent.name >= results.run_id:
            continue
        try:
            data = json.loads(ab_json.read_text())
        except (OSError, ValueError):
            continue
        if data.get("kind") == "A/A" and data.get("machine") == here and data.get("rows"):
            return {"run_id": data.get("run_id"), **false_alarms(data["rows"])}
    return None


def _ratio(row: dict) -> str:
    return f"{row['ratio']:.3f}" if row.get("ratio") is not None else "-"


def _interval(row: dict) -> str:
    if row.get("low") is None:
        return "none (too few blocks)"
    return f"[{row['low']:.3f}, {row['high']:.3f}]"


def _detectable(row: dict) -> str:
    """±x% at 80% power, and the counting floor where it is at least half of it."""
    if row.get("detectable") is None:
        return "-"
    text = f"±{row['detectable'] * 100:.1f}%"
    floor = row.get("counting_floor")
    if floor is not None and floor >= row["detectable"] / 2:
        text += f" (counting floor ±{floor * 100:.1f}%)"
    return text


def _median(values: list) -> float | None:
    known = sorted(v for v in values if v is not None)
    return known[(len(known) - 1) // 2] if known else None


def _figure(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    return f"{value:.0f}" if metric == "rps" else f"{value:.3f}"


def calibration_set_items(ab: dict) -> list[str]:
    """The newest `make ab-calibrate` of this path, machine and settings, or
    that there is none."""
    cal = ab.get("calibration_set")
    if not cal:
        return ["**Calibration of this path and settings on this machine: none** (`make ab-calibrate "
                f"SERVICE={ab.get('a')}` runs 20 A/As at these settings and says how far the verdicts hold)."]
    alarms = cal.get("false_alarms") or {}
    figures = [(case, metric, m) for case, metrics in (cal.get("cases") or {}).items() for metric, m in metrics.items()]
    repeat = [f"{case} {metric} ±{m['repeatability_pct']:.1f}%" for case, metric, m in figures
              if m.get("repeatability_pct") is not None]
    resolved = [f"{case} {metric} ±{m['detectable_median'] * 100:.1f}%" for case, metric, m in figures
                if m.get("detectable_median") is not None]
    return [f"**Calibration** ({cal['calibration']}, {cal['runs']} A/A runs of this path and settings here): "
            f"{alarms.get('alarms', '?')} of {alarms.get('rows', '?')} case-metrics got a verdict"
            + (f" (95% at most {alarms['high']:.1%})" if alarms.get("high") is not None else "")
            + (f"; lowest KS p of the p-values {cal['ks_min_p']:.3g}" if cal.get("ks_min_p") is not None else "")
            + (f"; two runs differ by up to (2.8 x the between-run sd): {', '.join(repeat)}" if repeat else "")
            + (f"; a run detects (80% power, median of the runs): {', '.join(resolved)}" if resolved else "")
            + "."]


def calibration_items(ab: dict) -> list[str]:
    if ab.get("kind") == "A/A":
        found = false_alarms(ab.get("rows", []))
        return [f"**A/A calibration:** B is A unchanged, so every \"better\" or \"worse\" verdict below is a false "
                f"alarm: **{found['alarms']} of {found['rows']}** case-metrics"
                + (f" ({found['rate']:.0%})." if found["rate"] is not None else ".")]
    cal = ab.get("calibration")
    if not cal:
        return ["**False alarms on this machine: not measured.** No A/A run here yet: run the same command "
                "with no change to B (`make ab SERVICE=<path>`) to learn how often an unchanged B gets a verdict."]
    return [f"**False alarms on this machine:** the last A/A (run {cal['run_id']}) gave a verdict to "
            f"{cal['alarms']} of {cal['rows']} case-metrics of an unchanged B"
            + (f" ({cal['rate']:.0%})." if cal.get("rate") is not None else ".")]


def method_words(ab: dict) -> str:
    """What one block is, in the run's design (AB_DESIGN)."""
    if ab.get("design", "blocks") == "duet":
        return ("each one window in which A and B take load at the same moments, each from its own wrk at the "
                "case's concurrency, sharing their core, after a warm-up of both (not counted): what the machine "
                "does in a window befalls both sides (AB_DESIGN=duet); the database serves both at once, so its CPU "
                "is no one side's and only the path's own CPU per request is judged")
    return ("each one window of A and one of B in turn (A B, B A, ...), never at once, each window after its own "
            "warm-up (not counted; AB_DESIGN=blocks)")


def restart_items(ab: dict) -> list[str]:
    """Whether the interval covers what a container keeps for a whole run."""
    if not ab.get("restart_twins"):
        return ["**Twins kept for the whole run** (AB_RESTART_TWINS=off): what a container keeps for a run (its "
                "database connections, its queues) is the same in every block, so no interval shows it; `make ab` "
                "restarts both before each block."]
    took = [r["seconds"] for case in ab.get("cases", []) for r in case.get("restarts", [])]
    return [f"**Both twins restarted before each block** ({len(took)} restarts"
            + (f", {min(took):.1f}-{max(took):.1f} s each" if took else "")
            + "): what a container keeps for a run (its database connections, its queues) is drawn anew each "
            "block, so the interval covers it; every window times a process seconds old, so the medians may read "
            "below a warm run's (AB_RESTART_TWINS=off times warm processes, docs/ab.md)."]


def cpu_counter_items(ab: dict) -> list[str]:
    """Whose CPU covers each window exactly (read by bench at its edges) and
    whose between cAdvisor's stamps 1-2 s apart, and why (runs before these
    readings say nothing)."""
    counters = ab.get("cpu_counters")
    if counters is None:
        return []
    read = ", ".join(f"`{r}`" for r in counters.get("read_by_bench", [])) or "none"
    items = [f"**CPU read at each window's edges** by bench, from the cgroups' counters: {read}"]
    fallback = counters.get("from_cadvisor") or {}
    if fallback:
        items[0] += ("; **from cAdvisor's stamps** (1-2 s apart, each container on its own tick, so not over "
                     "exactly the window): " + "; ".join(f"`{r}` ({why})" for r, why in fallback.items()))
    return items


AB_LABELS = {"rps": "req/s", "cpu_path": "CPU/req, path", "cpu_total": "CPU/req, total"}


def _case_title(case: dict) -> str:
    """The case's label: its level as set, whatever it was timed at."""
    return f"{case['file'].removesuffix('.bin')} c={case['concurrency']}"


def _case_heading(case: dict) -> str:
    """The label, and the level the blocks ran at where sizing moved it."""
    timed = case.get("timed_concurrency", case["concurrency"])
    title = _case_title(case)
    if timed == case["concurrency"]:
        return title
    still = (case.get("admitted") or {}).get("still_shed")
    return f"{title}, timed at c={timed} ({'still shedding there' if still else 'what both twins admitted'})"


def _paired_charts(ab: dict) -> list[Figure]:
    """The page's chart per case: every metric's per-block changes, its
    interval and the threshold (bench.measure.paired's figures)."""
    figures = []
    for case in ab.get("cases", []):
        title = _case_title(case)
        rows = []
        for r in (r for r in ab.get("rows", []) if r["case"] == title):
            log = lambda ratio: None if ratio is None else math.log(ratio)  # noqa: E731
            rows.append(IntervalRow(AB_LABELS.get(r["metric"], r["metric"]), r["log_ratios"], log(r["ratio"]),
                                    log(r["low"]), log(r["high"]), f"{r['what']}: {r['headline']}"))
        if rows:
            figures.append(Figure(f"{title}: a dot per block, the band the 95% interval, the line the estimate",
                                  interval_chart(f"B against A, {title}", rows, ab.get("threshold", 0.05))))
    return figures


def _verdicts(ab: dict) -> list:
    rows = ab.get("rows", [])
    restarted = bool(ab.get("restart_twins"))
    cases = {(c["file"], c["concurrency"]): c for c in ab.get("cases", [])}
    table = []
    for r in rows:
        case = cases.get((r["file"], r["concurrency"]), {"blocks": []})
        counted = [blk for blk in case["blocks"] if blk.get("counted", True)]
        a = _median([blk["a"][r["metric"]] for blk in counted])
        b = _median([blk["b"][r["metric"]] for blk in counted])
        table.append([r["case"], r["what"], _figure(a, r["metric"]), _figure(b, r["metric"]), _ratio(r), _interval(r),
                      _detectable(r), str(r["n"]), f"{r['p_adjusted']:.3g}", r["verdict"]])
    return [Bullets([f"**{r['case']}, {r['what']}:** {r['headline']} ({r['n']} blocks"
                     + (f", timed at c={r['timed_concurrency']}"
                        if r.get("timed_concurrency", r["concurrency"]) != r["concurrency"] else "") + ")"
                     + (f"; {note}" if (note := shedding_note(r, restarted)) else "") for r in rows]),
            Para("Detectable: the smallest change this run would find 80% of the time, from its own blocks' "
                 "spread (a t approximation); where counting whole answers sets a floor near it (a window of N reads "
                 "its rate to one in N at best), the floor is given. \"No change beyond ±T\" is said only when "
                 "the interval lies within ±T, which a run can show only where T is above its detectable change."),
            Table(["case", "metric", "A (median)", "B (median)", "B/A", "95% interval", "detectable", "blocks",
                   "adjusted p", "verdict"], table, align="llrrrlrrrl")]


def _blocks(ab: dict, case: dict) -> list:
    title = _case_title(case)
    chart = (ab.get("charts") or {}).get(title)
    sized = "; ".join(f"{n} {r['rps']:g} req/s" for n, r in (case.get("sizing") or {}).items())
    rho = [r for r in ab.get("rows", []) if (r["file"], r["concurrency"]) == (case["file"], case["concurrency"])
           and r["metric"] == "rps" and r.get("rho") is not None]
    rows = []
    for blk in case["blocks"]:
        a, b = blk["a"], blk["b"]
        rows.append([str(blk["block"]), f"{a['rps']:.0f}", f"{b['rps']:.0f}",
                     f"{b['rps'] / a['rps']:.3f}" if a["rps"] else "-", _figure(a["cpu_path"], "cpu"),
                     _figure(b["cpu_path"], "cpu"), f"{a.get('refused', 0)}, {a.get('failed', 0)}",
                     f"{b.get('refused', 0)}, {b.get('failed', 0)}",
                     f"{', '.join(blk['flags']) or '-'}{'' if blk.get('counted', True) else ' (not counted)'}"])
    admitted = case.get("admitted")
    return [*([Para(f"**Failed:** {case['error']}")] if case.get("error") else []),
            *([Para(f"**{title}: {admitted['said']}.** Past what a path admits, which answers come whole is a "
                    f"lottery of the twins' limits; the blocks ran at c={admitted['timed']}, and the case keeps its "
                    "label (AB_ADMITTED, docs/ab.md).")] if admitted else []),
            *([Figure(f"paired log-ratios, {title}", png=chart)] if chart else []),
            *([Para(f"Every window {case['window_s']:g} s, A's and B's alike"
                    + (f" (sized on the slower side: {sized})." if sized else "."))] if case.get("window_s") else []),
            *([Para(f"A's and B's requests per second correlate at ρ = {rho[0]['rho']:.2f} over the blocks: "
                    "what moves both (the machine, the database) pairing leaves out of B/A.")] if rho else []),
            Para("Requests per second and CPU per request count the answers served whole only."),
            Table(["block", "A req/s", "B req/s", "B/A req/s", "A CPU ms/req", "B CPU ms/req", "A refused, failed",
                   "B refused, failed", "flags"], rows, align="rrrrrrrrl")]


def change_report(results: Results) -> Report:
    """An A/B run's report (ab.md and its page): what ran and how it is
    judged, the verdicts, a chart of the paired changes per case (on the
    page), every block."""
    ab = results.ab
    env = results.environment
    change = ab.get("change") or ("nothing (A/A)" if ab.get("kind") == "A/A" else "not stated")
    head = [Bullets([
        f"**A:** `{ab.get('a')}`; **B:** `{ab.get('b')}`, its twin (same core, memory limit, database and files); "
        f"B's change: {change}",
        f"Database: **{server_label(env)}**; machine: {env.get('cpu_model', '?')}, {env.get('host_cores', '?')} "
        f"cores, kernel {env.get('kernel', '?')}",
        f"Method: {ab.get('blocks')} blocks per case, {method_words(ab)}; one paired sample per block, log(B/A). "
        "Ratio: Hodges-Lehmann estimate; interval: the exact distribution-free 95% interval of Wilcoxon's "
        "signed-rank test (at least 95% coverage at any block count; a bootstrap under-covers at 6-12 samples); "
        "p-values adjusted across the table with Holm's method. "
        f"\"No change\": the interval within ±{ab.get('threshold', 0) * 100:g}% (AB_THRESHOLD). "
        "A block with a window that work outside the lab's containers shared (`disturbed`) is not counted and is "
        "run again (up to half as many more blocks).",
        *restart_items(ab), *cpu_counter_items(ab), *calibration_set_items(ab), *calibration_items(ab)])]
    head += [Para(f"**Not timed:** {ab['error']}")] if ab.get("error") else []
    found = [("warnings", "Warnings", [Bullets(results.warnings)] if results.warnings else []),
             ("verdicts", "Verdicts", _verdicts(ab) if ab.get("rows") else []),
             ("paired", "Paired changes per block", [Charts(charts)] if (charts := _paired_charts(ab)) else []),
             *((f"blocks-{i}", f"Blocks: {_case_heading(case)}", _blocks(ab, case))
               for i, case in enumerate(ab.get("cases", []), 1))]
    parts = [Part(title, blocks, anchor=anchor) for anchor, title, blocks in found if blocks]
    flags = {f for case in ab.get("cases", []) for blk in case["blocks"] for f in blk["flags"]}
    if flags:  # flags are a block's, so the last case's section ends with their legend
        parts[-1].blocks.append(Legend(flags))
    return Report(f"{ab.get('kind', 'A/B')} report: run {results.run_id}", head, parts)


def render_change(results: Results) -> str:
    """ab.md: the A/B report's Markdown (its page: report/html.py)."""
    return render_report(change_report(results))
