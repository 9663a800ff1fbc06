"""Renders a Results as report.md: the seed-style time-per-request table with
seed 000's figures beside ours, requests per second with the ratio of each
target to nginx-static, CPU per request and flags, peak memory, links to the
CPU charts, verification and failures; the spread of each case's
repetitions, ab -k against wrk, the concurrency sweep, and what the run cost."""
from . import seed000
from .results import Results, Run
from .stats import NOISY_SPREAD, TOOLS_DISAGREE
from .usage import LOADGEN, LOADGEN_BOUND, LOADGEN_BOUND_SHARE, SHORT_WINDOW, SHORT_WINDOW_SECONDS, THROTTLED

BASELINE = "nginx-static"


def _files(results: Results) -> list[tuple[str, int]]:
    seen = {}
    for r in results.runs:
        seen.setdefault(r.file, r.size_bytes)
    return sorted(seen.items(), key=lambda item: item[1])


def _concurrencies(results: Results) -> list[int]:
    return sorted({r.concurrency for r in results.runs})


def _timed_targets(results: Results) -> list[str]:
    timed = {r.target for r in results.runs}
    return [t.name for t in results.targets if t.name in timed]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _size_by_target(results: Results, cell) -> list[str]:
    """One table per concurrency level: a row per file size, a column per
    timed target, each cell cell(run or None, target, file, concurrency)."""
    targets = _timed_targets(results)
    lines = []
    for c in _concurrencies(results):
        rows = [[file.removesuffix(".bin"), *(cell(results.run_for(t, file, c), t, file, c) for t in targets)]
                for file, _ in _files(results)]
        lines += [f"### Concurrency {c}", "", *_table(["File size", *targets], rows), ""]
    return lines


def server_label(environment: dict) -> str:
    server = environment.get("server") or {}
    if not server:
        return "unknown server"
    label = f"{server.get('product', 'MongoDB')} {server.get('version', '?')}"
    if server.get("product") == "FerretDB":
        label += f" (MongoDB wire version {server.get('wire_version', '?')}, PostgreSQL backend)"
    return label


def _heading(results: Results) -> list[str]:
    env, params = results.environment, results.parameters
    lines = [
        f"# GridFS Serving Lab report: run {results.run_id}",
        "",
        f"- Database: **{server_label(env)}** from image `{params.get('MONGO_IMAGE', '?')}`",
        "- Images: " + ", ".join(f"{k}=`{params[k]}`" for k in
                                 ("NGINX_BASE_IMAGE", "PYTHON_IMAGE", "NODE_IMAGE") if params.get(k)),
        f"- CPU: {env.get('cpu_model', '?')}, {env.get('host_cores', '?')} cores; pins: "
        f"target `{params.get('TARGET_CPUS')}`, mongo `{params.get('MONGO_CPUS')}`, "
        f"load generator `{params.get('LOADGEN_CPUS')}`; memory: target {params.get('TARGET_MEM')}, "
        f"mongo {params.get('MONGO_MEM')}",
        f"- Load: {env.get('ab_version', 'ab')}, {params.get('BENCH_REQUESTS')} requests per case "
        f"after {params.get('BENCH_WARMUP_REQUESTS')} warm-up requests, "
        f"concurrency {params.get('BENCH_CONCURRENCY')}"
        + (f"; {params['BENCH_REPETITIONS']} repetitions per case (medians quoted)"
           if params.get("BENCH_REPETITIONS") else "")
        + (f"; tools `{params['BENCH_TOOLS']}`" if params.get("BENCH_TOOLS") else "")
        + (f"; {env['wrk_version']}" if "wrk" in (params.get("BENCH_TOOLS") or "") and env.get("wrk_version")
           else ""),
        f"- Started {results.started_at}, finished {results.finished_at}"
        + (f" ({env['duration_seconds']:.0f} s)" if env.get("duration_seconds") else ""),
        "",
    ]
    if (env.get("server") or {}).get("product") == "FerretDB":
        lines += [
            "> The database here is FerretDB, a MongoDB-protocol server on PostgreSQL, standing in",
            "> for MongoDB where no mongo image can be had. It serves GridFS reads far slower than",
            "> MongoDB, so the GridFS rows are bound by the database, not by the serving path:",
            "> compare serving paths by their own container's CPU per request as well as by",
            "> requests per second.",
            "",
        ]
    return lines


def _verification(results: Results) -> list[str]:
    rows = [[t.name, "yes" if t.verified else "**no**", t.error or ""] for t in results.targets]
    return ["## Verification", "",
            "Every file's body sha256 and Content-Length checked before timing; a target that fails is not timed.",
            "", *_table(["target", "verified", "error"], rows), ""]


FAILED_CASES_SHOWN = 30  # per target; results.json keeps every case


def _conformance(results: Results) -> list[str]:
    checked = [t for t in results.targets if t.conforming is not None]
    if not checked:
        return []
    rows = [[t.name, str(sum(c["passed"] for c in t.conformance)),
             str(sum(not c["passed"] for c in t.conformance)),
             "yes" if t.conforming else ("**no**, timed anyway (rows marked)" if t.verified else "**no**, not timed")]
            for t in checked]
    lines = ["## Conformance", "",
             "Every answer (full GET, headers, HEAD, each Range form, If-Range, 304s, 404) compared with "
             "nginx-static's for the same request; hostile requests (bad methods and request lines, huge "
             "headers, bad Range syntax, traversal, bad encodings) must be refused safely: no server error, "
             "no hang, a 2xx only with nginx's bytes. Every case is in results.json.", "",
             *_table(["target", "passed", "failed", "conforming"], rows), ""]
    failed = [[t.name, c["case"], c["expected"], c["got"]]
              for t in checked for c in [c for c in t.conformance if not c["passed"]][:FAILED_CASES_SHOWN]]
    if failed:
        lines += ["Failed cases:", "", *_table(["target", "case", "expected", "got"],
                                               [[cell.replace("|", "\\|") for cell in row] for row in failed]), ""]
    return lines


def _time_per_request(results: Results) -> list[str]:
    def cell(run, target, file, _):
        text = f"{run.time_per_request_ms:.3f}{_spread(run, 'time_per_request_ms')}" if run else "-"
        published = seed000.time_per_request_ms(target, file)
        return text + (f" ({published})" if published is not None else "")

    return (["## Time per request (ms, mean across concurrent requests; lower is better)", "",
             "Seed 000's published figure in brackets (2013, EC2 m1.medium, ab -c 100 per its README, "
             "-c 5 in its scripts); its columns: "
             + ", ".join(f"{ours} = \"{theirs}\"" for ours, theirs in seed000.COLUMNS.items()) + ".", ""]
            + _size_by_target(results, cell) + _spread_note(results))


def _spread(run: Run, metric: str) -> str:
    """' ±4%' after a median (spread = (max - min) / median of the
    repetitions); bold and 'noisy' over NOISY_SPREAD; '' for one measurement."""
    figures = (run.spread or {}).get(metric)
    if not figures or len(run.repetitions) < 2:
        return ""
    text = f"±{figures['spread']:.0%}"
    return f" **{text} noisy**" if figures["spread"] > NOISY_SPREAD else f" {text}"


def _spread_note(results: Results) -> list[str]:
    reps = max((len(r.repetitions) for r in results.runs), default=0)
    if reps < 2:
        return []
    return [f"Medians of {reps} repetitions; ±: their spread, (max - min) / median; **noisy**: over "
            f"{NOISY_SPREAD:.0%}, so read the figure as a range (every repetition is in results.json).", ""]


BOUND_MARK = " ⚑"
BOUND_NOTE = ("⚑ loadgen-bound: the load generator was at its CPU limit in this case (or in the nginx-static "
              "case a ratio is taken against), so the figure is the tool's speed, a floor for the server's, "
              "not the server's.")


def _bound(*runs) -> bool:
    return any(r is not None and LOADGEN_BOUND in r.flags for r in runs)


def _requests_per_second(results: Results) -> list[str]:
    def cell(run, _, file, c):
        if run is None:
            return "-"
        baseline = results.run_for(BASELINE, file, c)
        ratio = f" ({run.rps / baseline.rps:.3f})" if baseline and baseline.rps else ""
        return f"{run.rps:.0f}{_spread(run, 'rps')}{ratio}" + (BOUND_MARK if _bound(run, baseline) else "")

    lines = ["## Requests per second (ratio to nginx-static; higher is better)", "",
             *_size_by_target(results, cell)]
    if any(_bound(r) for r in results.runs):
        lines += [BOUND_NOTE, ""]
    return lines


def _tool_cell(tool) -> str:
    spread = tool.spread.get("spread") if tool.spread else None
    text = f"{tool.rps:.0f}" + (f" ±{spread:.0%}" if spread is not None and len(tool.repetitions) > 1 else "")
    return text + (BOUND_MARK if LOADGEN_BOUND in tool.flags else "")


def _agreement(results: Results) -> list[str]:
    if not results.comparisons:
        return []
    rows = []
    for c in sorted(results.comparisons, key=lambda c: (c.concurrency, c.size_bytes)):
        a, w = c.ab_keepalive, c.wrk
        bound = LOADGEN_BOUND in a.flags or LOADGEN_BOUND in w.flags
        verdict = f"**{c.difference:.1%} differ**" if c.disagree else f"{c.difference:.1%}"
        rows.append([c.target, c.file.removesuffix(".bin"), str(c.concurrency), _tool_cell(a), _tool_cell(w),
                     verdict + (BOUND_MARK if bound else ""),
                     f"{a.p50_ms:.2f} / {a.p90_ms:.2f} / {a.p99_ms:.2f} / {a.max_ms:.0f}",
                     f"{w.p50_ms:.2f} / {w.p90_ms:.2f} / {w.p99_ms:.2f} / {w.max_ms:.0f}",
                     str(a.failed + w.failed)])
    lines = ["## ab -k against wrk (requests per second; agreement per case)", "",
             "Like with like: both keep connections alive (HTTP/1.1 for wrk, HTTP/1.0 keep-alive for ab -k) "
             "at the same connection count; wrk runs as long as the ab -k repetition before it took. "
             f"Difference: |ab -k - wrk| / their mean, of medians; **differ**: over {TOOLS_DISAGREE:.0%}, "
             "so at least one tool measured itself or the case is unsteady. Latency: p50 / p90 / p99 / max ms "
             "(medians of repetitions).", "",
             *_table(["target", "size", "concurrency", "ab -k req/s", "wrk req/s", "difference",
                      "ab -k latency ms", "wrk latency ms", "failed"], rows), ""]
    agree = sum(not c.disagree for c in results.comparisons)
    bound = sum(any(LOADGEN_BOUND in t.flags for t in (c.ab_keepalive, c.wrk)) for c in results.comparisons)
    lines += [f"{agree} of {len(results.comparisons)} cases agree within {TOOLS_DISAGREE:.0%}"
              + (f" ({bound} with a tool at its CPU limit, ⚑)" if bound else "") + ".", ""]
    if any(LOADGEN_BOUND in t.flags for c in results.comparisons for t in (c.ab_keepalive, c.wrk)):
        lines += ["⚑ loadgen-bound: that tool was at its CPU limit (its own CPU time over its run), so its "
                  "figure is the tool's speed, not the server's; the difference then says little.", ""]
    return lines


def _sweep(results: Results) -> list[str]:
    if not results.sweep:
        return []
    levels = sorted({p.concurrency for p in results.sweep})
    rows = []
    keys = sorted({(p.target, p.size_bytes, p.file, p.tool) for p in results.sweep},
                  key=lambda k: (_timed_targets(results).index(k[0]) if k[0] in _timed_targets(results) else 99,
                                 k[1], k[3]))
    for target, _, file, tool in keys:
        row = [target, file.removesuffix(".bin"), tool]
        for level in levels:
            p = next((p for p in results.sweep if (p.target, p.file, p.tool, p.concurrency)
                      == (target, file, tool, level)), None)
            row.append("-" if p is None else f"{p.rps:.0f}" + (BOUND_MARK if LOADGEN_BOUND in p.flags else "")
                       + (f" ({p.failed} failed)" if p.failed else ""))
        rows.append(row)
    requests = results.parameters.get("BENCH_SWEEP_REQUESTS")
    lines = ["## Concurrency sweep (requests per second)", "",
             f"One run per level{f' of {requests} requests' if requests else ''} (at least one per connection), "
             "after the timed cases warmed every path: a shape to read, not a figure to quote.", "",
             *_table(["target", "size", "tool", *[f"c={c}" for c in levels]], rows), ""]
    if any(LOADGEN_BOUND in p.flags for p in results.sweep):
        lines += ["⚑ loadgen-bound: the tool was at its CPU limit at that level (hollow markers on the charts).", ""]
    for target in _timed_targets(results):
        if target in results.sweep_charts:
            lines += [f"![{target}: requests per second against concurrency]({results.sweep_charts[target]})", ""]
    return lines


def _phases(results: Results) -> list[str]:
    if not results.phases:
        return []
    rows = [[name, f"{seconds:.1f}"] for name, seconds in results.phases.items()]
    return ["## What this run cost (wall seconds)", "",
            "The seed's time is its own (from manifest.json); the rest is bench's, phase by phase.", "",
            *_table(["phase", "seconds"], rows), ""]


def _latency(results: Results) -> list[str]:
    def spread(r: Run) -> str:
        if not r.spread or len(r.repetitions) < 2:
            return "-"
        rps = r.spread["rps"]
        return f"{rps['min']:.0f}–{rps['max']:.0f} ({rps['spread']:.1%}{', noisy' if rps['noisy'] else ''})"
    rows = [[r.target, r.file.removesuffix(".bin"), str(r.concurrency), f"{r.rps:.0f}", spread(r),
             f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.transfer_kbps:.0f}", str(r.failed), ", ".join(r.flags)]
            for r in results.runs]
    return ["## Every case", "",
            "Medians of the repetitions; `failed` is their total.", "",
            *_table(["target", "size", "concurrency", "req/s", "req/s min–max (spread)", "p50 ms", "p99 ms",
                     "KB/s", "failed", "flags"], rows), ""]


def _database_role(run) -> str | None:
    """The role in run.cpu that is neither the target nor the load generator."""
    return next((role for role in run.cpu or {} if role not in (run.target, LOADGEN)), None)


def _ms(usage: dict | None) -> str:
    return f"{usage['cpu_ms_per_request']:.3f}" if usage and usage.get("cpu_ms_per_request") is not None else "-"


def _cpu_per_request(results: Results) -> list[str]:
    def cell(run, target, *_):
        if run is None or not run.cpu:
            return "-"
        flag = " ⚑" if run.flags else ""
        return f"{_ms(run.cpu.get(target))} / {_ms(run.cpu.get(_database_role(run)))}{flag}"

    return ["## CPU ms per request (target / mongo; lower is better)", "",
            "CPU time each container spent per request in the timed window (cAdvisor's cgroup counters at",
            "the window's start and end, divided by the requests ab made). It is what a request costs,",
            "whatever the request rate: a serving path that waits on a slow database shows a low figure",
            "for itself and a high one for the database. On FerretDB the GridFS rows are bound by the",
            "database, so their requests per second say little about the serving path: its own CPU per",
            "request is the fairer comparison. Flags (below) mark rows not to trust as they stand.", "",
            *_size_by_target(results, cell)]


def _cores(usage: dict | None) -> str:
    if not usage or usage.get("cores") is None:
        return "-"
    allowance = usage.get("allowance_cores")
    return f"{usage['cores']:.2f}" + (f" of {allowance:g}" if allowance else "")


def _cpu_by_case(results: Results) -> list[str]:
    rows = [[r.target, r.file.removesuffix(".bin"), str(r.concurrency), _cores(r.cpu.get(r.target)),
             _cores(r.cpu.get(_database_role(r))), _cores(r.cpu.get(LOADGEN)), ", ".join(r.flags)]
            for r in results.runs if r.cpu]
    return ["## CPU cores by case (mean while ab ran, of the container's allowance)", "",
            f"Flags: `{LOADGEN_BOUND}`: the load generator used at least {LOADGEN_BOUND_SHARE:.0%} of its "
            "CPU allowance (by cAdvisor, or by ab's own CPU time against one core or the allowance), so ab "
            "may be what limits the rate; "
            f"`{THROTTLED}`: the target's CFS quota throttled it; `{SHORT_WINDOW}`: ab ran under "
            f"{SHORT_WINDOW_SECONDS:g} s, about two of cAdvisor's readings, so cores are rough (CPU per request "
            "holds better; raise BENCH_REQUESTS for more).", "",
            *_table(["target", "size", "concurrency", "target cores", "mongo cores", "load generator cores",
                     "flags"], rows), ""]


def _peak_memory(results: Results) -> list[str]:
    peaks: dict[str, int] = {}
    for r in results.runs:
        for role, usage in (r.cpu or {}).items():
            peaks[role] = max(peaks.get(role, 0), usage.get("peak_memory_bytes") or 0)
    rows = [[role, f"{peak / 2**20:.1f}"] for role, peak in sorted(peaks.items())]
    return ["## Peak memory per container (MiB)", "",
            "cgroup v1: the container's lifetime peak of memory usage (page cache included); cgroup v2:",
            "the highest working set seen in the timed windows.", "",
            *_table(["container", "peak MiB"], rows), ""]


def _charts(results: Results) -> list[str]:
    lines = ["## CPU over time", ""]
    for target in _timed_targets(results):
        if target in results.charts:
            lines += [f"![{target}: CPU cores over time]({results.charts[target]})", ""]
    return lines


def _warnings(results: Results) -> list[str]:
    return [*(f"> **Warning:** {w}" for w in results.warnings), ""] if results.warnings else []


def render_markdown(results: Results) -> str:
    lines = _heading(results) + _warnings(results) + _verification(results) + _conformance(results)
    if results.runs:
        lines += _time_per_request(results) + _requests_per_second(results)
        if any(r.cpu for r in results.runs):
            lines += _cpu_per_request(results) + _cpu_by_case(results) + _peak_memory(results)
        if results.charts:
            lines += _charts(results)
        lines += _agreement(results) + _sweep(results) + _latency(results)
    failed = [r for r in results.runs if r.failed]
    if failed:
        lines += ["## Failed requests", "",
                  *[f"- {r.target} {r.file} c={r.concurrency}: {r.failed} failed of {r.requests} "
                    f"(see {r.raw_output})" for r in failed], ""]
    lines += _phases(results)
    return "\n".join(lines)
