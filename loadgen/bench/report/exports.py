"""Beside results.json, the run's figures in the forms other tools read:
results.csv (a row per case and tool, the headline's columns, `refused`:
the answers that were not 2xx over its repetitions), Bencher's
Metric Format (bencher.json) and github-action-benchmark's custom formats
(github-benchmark-bigger.json, github-benchmark-smaller.json). Failed cases
have no number: a row in the CSV with its error, nothing in the JSONs. A
ratio to nginx-static from the rounds carries its 95% interval (low, high)
and its round count wherever it goes; the CPU ratio, the design that gave
it too (cpu_design: same-moment or rounds, BENCH_CPU_DESIGN's words).
p50_ms and p99_ms are a tool's own per-request times (ab's, closed loop);
wrk's, corrected for coordinated omission and not its answers' own
(results.CORRECTED_LATENCY_TOOLS), go only in wrk_corrected_p50_ms and
wrk_corrected_p99_ms; the JSONs' latency is the open loop's p99."""
import csv
import io
import json
from pathlib import Path

from .headline import BASELINE, open_loop_for, round_ratios, size_label, target_ms
from ..results import Results, own_latency

CSV = "results.csv"
BENCHER = "bencher.json"
BIGGER, SMALLER = "github-benchmark-bigger.json", "github-benchmark-smaller.json"
COLUMNS = ["target", "store", "size", "file", "concurrency", "tool", "status", "rps", "rps_min", "rps_max",
           "rps_ratio_to_nginx_static", "rps_ratio_low", "rps_ratio_high", "cpu_ms_per_request",
           "cpu_ratio_to_nginx_static", "cpu_ratio_low", "cpu_ratio_high", "cpu_design", "rps_ratio_rounds",
           "cpu_ratio_rounds",
           "p50_ms", "p99_ms", "wrk_corrected_p50_ms", "wrk_corrected_p99_ms", "open_loop_rate", "open_loop_p99_ms",
           "refused", "flags", "error"]
AB_KEEPALIVE = "ab-k"


def _ratio(value, base):
    return round(value / base, 4) if value is not None and base else None


def percentiles(tool: str | None, p50: float, p99: float) -> dict:
    """A row's p50 and p99 under the name of what they are (module docstring)."""
    prefix = "" if own_latency(tool) else "wrk_corrected_"
    return {f"{prefix}p50_ms": p50, f"{prefix}p99_ms": p99}


def cpu_design(results: Results, found: dict) -> str:
    """Pure: the windows a rounds row's CPU ratio came from: the run's
    design (results.rounds.cpu_design; the rounds' before it was recorded)
    for a headline case, the only kind same-moment windows time, else the
    rounds' own; '' where the row has no CPU ratio from the rounds."""
    if not found.get("cpu"):
        return ""
    return ((results.rounds or {}).get("cpu_design") or "rounds") if found.get("headline", True) else "rounds"


def rows(results: Results) -> list[dict]:
    """One dict per case and tool: the timed cases (ab's; an A/B run's by
    wrk), then ab -k and wrk."""
    out = []
    for r in results.runs:
        base = results.run_for(BASELINE, r.file, r.concurrency)
        base = base if base is not None and base.ok else None
        loop = open_loop_for(results, r.target, r.file)
        row = dict(target=r.target, store=results.store_of(r.target), size=size_label(r.file), file=r.file,
                   concurrency=r.concurrency, tool=r.tool or "ab", status=r.status, refused=r.refused,
                   flags=" ".join(r.flags), error=r.error or "")
        if r.ok:
            spread = r.spread or {}
            row |= dict(rps=r.rps, rps_min=spread.get("min", r.rps), rps_max=spread.get("max", r.rps),
                        rps_ratio_to_nginx_static=_ratio(r.rps, base.rps if base else None),
                        cpu_ms_per_request=target_ms(r), cpu_ratio_to_nginx_static=_ratio(
                            target_ms(r), target_ms(base) if base else None),
                        **percentiles(r.tool, r.p50_ms, r.p99_ms))
            if loop is not None and loop.ok:
                row |= dict(open_loop_rate=loop.rate, open_loop_p99_ms=loop.p99_ms)
            found = round_ratios(results, r.target, r.file, r.concurrency)
            for metric, column in (("rps", "rps_ratio"), ("cpu", "cpu_ratio")):
                if found.get(metric):
                    row |= {f"{column}_to_nginx_static": found[metric]["ratio"], f"{column}_low": found[metric]["low"],
                            f"{column}_high": found[metric]["high"], f"{column}_rounds": found[metric]["rounds"]}
            row["cpu_design"] = cpu_design(results, found)
        out.append(row)
    for c in results.comparisons:
        base = next((b for b in results.comparisons if (b.target, b.file, b.concurrency)
                     == (BASELINE, c.file, c.concurrency)), None)
        for name, tool, base_tool in ((AB_KEEPALIVE, c.ab_keepalive, base and base.ab_keepalive),
                                      ("wrk", c.wrk, base and base.wrk)):
            spread = tool.spread or {}
            out.append(dict(target=c.target, store=results.store_of(c.target), size=size_label(c.file), file=c.file,
                            concurrency=c.concurrency, tool=name, status="failed" if tool.failed else "ok",
                            rps=tool.rps, rps_min=spread.get("min", tool.rps), rps_max=spread.get("max", tool.rps),
                            rps_ratio_to_nginx_static=_ratio(tool.rps, base_tool.rps if base_tool else None),
                            **percentiles(tool.tool, tool.p50_ms, tool.p99_ms), refused=tool.refused,
                            flags=" ".join(tool.flags),
                            error=f"{tool.failed} failed requests" if tool.failed else ""))
    return out


def to_csv(results: Results) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in row.items()} for row in rows(results))
    return buf.getvalue()


def benchmark_name(row: dict) -> str:
    """Stable across runs: what was served, how big, how many clients, by what tool."""
    return f"{row['target']}/{row['size']}/c={row['concurrency']}/{row['tool']}"


def bencher(results: Results) -> dict:
    """BMF: benchmark -> measure -> {value, lower_value, upper_value}.
    throughput is Bencher's built-in (operations/s: requests/s here),
    latency its built-in in nanoseconds (the open-loop p99, response time
    rather than queueing); cpu-ms-per-request is ours, and so is the CPU
    ratio: cpu-ratio-to-nginx-static from the rounds' windows,
    cpu-ratio-to-nginx-static-same-moment from same-moment ones (BMF holds
    numbers only, so the design is in the name: the two designs' ratios
    differ, and one series across both would read the switch as a change)."""
    out: dict[str, dict] = {}
    for row in rows(results):
        if row["status"] != "ok":
            continue
        measures = {"throughput": {"value": row["rps"], "lower_value": row["rps_min"], "upper_value": row["rps_max"]}}
        if row.get("cpu_ms_per_request") is not None:
            measures["cpu-ms-per-request"] = {"value": row["cpu_ms_per_request"]}
        cpu_measure = "cpu-ratio-to-nginx-static" + ("-same-moment" if row.get("cpu_design") == "same-moment" else "")
        for column, measure in (("rps_ratio", "ratio-to-nginx-static"), ("cpu_ratio", cpu_measure)):
            if row.get(f"{column}_low") is not None:
                measures[measure] = {"value": row[f"{column}_to_nginx_static"], "lower_value": row[f"{column}_low"],
                                     "upper_value": row[f"{column}_high"]}
        out[benchmark_name(row)] = measures
        if row.get("open_loop_p99_ms") is not None:
            out.setdefault(f"{row['target']}/{row['size']}/open-loop", {"latency": {
                "value": round(row["open_loop_p99_ms"] * 1e6)}})
    return out


def github_benchmark(results: Results) -> tuple[list[dict], list[dict]]:
    """github-action-benchmark's customBiggerIsBetter (requests/s) and
    customSmallerIsBetter (CPU ms per request, open-loop p99) entries."""
    bigger, smaller, seen_loops = [], [], set()
    for row in rows(results):
        if row["status"] != "ok":
            continue
        name = benchmark_name(row)
        half = (row["rps_max"] - row["rps_min"]) / 2
        bigger.append({"name": f"{name} requests/s", "unit": "req/s", "value": row["rps"], "range": f"± {half:.1f}",
                       "extra": row["flags"]})
        if row.get("rps_ratio_low") is not None:
            bigger.append({"name": f"{name} requests/s ratio to nginx-static", "unit": "x",
                           "value": row["rps_ratio_to_nginx_static"],
                           "range": (f"[{row['rps_ratio_low']}, {row['rps_ratio_high']}] over "
                                     f"{row['rps_ratio_rounds']} rounds"),
                           "extra": "geometric mean of the rounds' ratios, 95% interval"})
        if row.get("cpu_ms_per_request") is not None:
            smaller.append({"name": f"{name} CPU per request", "unit": "ms", "value": row["cpu_ms_per_request"],
                            "extra": f"the {row['target']} container's CPU time per request"})
        loop = (row["target"], row["size"])
        if row.get("open_loop_p99_ms") is not None and loop not in seen_loops:
            seen_loops.add(loop)
            smaller.append({"name": f"{row['target']}/{row['size']}/open-loop p99", "unit": "ms",
                            "value": row["open_loop_p99_ms"], "extra": f"at {row['open_loop_rate']:g} requests/s"})
    return bigger, smaller


def write_exports(results: Results, run_dir: Path) -> list[str]:
    """Every export beside results.json; the names written."""
    (run_dir / CSV).write_text(to_csv(results))
    (run_dir / BENCHER).write_text(json.dumps(bencher(results), indent=2) + "\n")
    bigger, smaller = github_benchmark(results)
    (run_dir / BIGGER).write_text(json.dumps(bigger, indent=2) + "\n")
    (run_dir / SMALLER).write_text(json.dumps(smaller, indent=2) + "\n")
    return [CSV, BENCHER, BIGGER, SMALLER]
