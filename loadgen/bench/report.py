"""Renders a Results as report.md: the seed-style time-per-request table with
seed 000's figures beside ours, requests per second with the ratio of each
target to nginx-static, CPU per request and flags, peak memory, links to the
CPU charts, verification and failures."""
from . import seed000
from .results import Results
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
        f"concurrency {params.get('BENCH_CONCURRENCY')}",
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


def _time_per_request(results: Results) -> list[str]:
    targets = _timed_targets(results)
    lines = ["## Time per request (ms, mean across concurrent requests; lower is better)", "",
             "Seed 000's published figure in brackets (2013, EC2 m1.medium, ab -c 100 per its README, "
             "-c 5 in its scripts).", ""]
    for c in _concurrencies(results):
        rows = []
        for file, _ in _files(results):
            row = [file.removesuffix(".bin")]
            for t in targets:
                run = results.run_for(t, file, c)
                cell = f"{run.time_per_request_ms:.3f}" if run else "-"
                published = seed000.time_per_request_ms(t, file)
                row.append(cell + (f" ({published})" if published is not None else ""))
            rows.append(row)
        lines += [f"### Concurrency {c}", "", *_table(["File size", *targets], rows), ""]
    return lines


def _requests_per_second(results: Results) -> list[str]:
    targets = _timed_targets(results)
    lines = ["## Requests per second (ratio to nginx-static; higher is better)", ""]
    for c in _concurrencies(results):
        rows = []
        for file, _ in _files(results):
            baseline = results.run_for(BASELINE, file, c)
            row = [file.removesuffix(".bin")]
            for t in targets:
                run = results.run_for(t, file, c)
                if run is None:
                    row.append("-")
                elif baseline and baseline.rps:
                    row.append(f"{run.rps:.0f} ({run.rps / baseline.rps:.3f})")
                else:
                    row.append(f"{run.rps:.0f}")
            rows.append(row)
        lines += [f"### Concurrency {c}", "", *_table(["File size", *targets], rows), ""]
    return lines


def _latency(results: Results) -> list[str]:
    rows = [[r.target, r.file.removesuffix(".bin"), str(r.concurrency), f"{r.p50_ms:.2f}",
             f"{r.p99_ms:.2f}", f"{r.transfer_kbps:.0f}", str(r.failed)] for r in results.runs]
    return ["## Every case", "",
            *_table(["target", "size", "concurrency", "p50 ms", "p99 ms", "KB/s", "failed"], rows), ""]


def _database_role(run) -> str | None:
    """The role in run.cpu that is neither the target nor the load generator."""
    return next((role for role in run.cpu or {} if role not in (run.target, LOADGEN)), None)


def _ms(usage: dict | None) -> str:
    return f"{usage['cpu_ms_per_request']:.3f}" if usage and usage.get("cpu_ms_per_request") is not None else "-"


def _cpu_per_request(results: Results) -> list[str]:
    targets = _timed_targets(results)
    lines = ["## CPU ms per request (target / mongo; lower is better)", "",
             "CPU time each container spent per request in the timed window (cAdvisor's cgroup counters at",
             "the window's start and end, divided by the requests ab made). It is what a request costs,",
             "whatever the request rate: a serving path that waits on a slow database shows a low figure",
             "for itself and a high one for the database. On FerretDB the GridFS rows are bound by the",
             "database, so their requests per second say little about the serving path: its own CPU per",
             "request is the fairer comparison. Flags (below) mark rows not to trust as they stand.", ""]
    for c in _concurrencies(results):
        rows = []
        for file, _ in _files(results):
            row = [file.removesuffix(".bin")]
            for t in targets:
                run = results.run_for(t, file, c)
                if run is None or not run.cpu:
                    row.append("-")
                    continue
                cell = f"{_ms(run.cpu.get(t))} / {_ms(run.cpu.get(_database_role(run)))}"
                row.append(cell + (" ⚑" if run.flags else ""))
            rows.append(row)
        lines += [f"### Concurrency {c}", "", *_table(["File size", *targets], rows), ""]
    return lines


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
            "CPU allowance, so ab may be what limits the rate; "
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
    lines = _heading(results) + _warnings(results) + _verification(results)
    if results.runs:
        lines += _time_per_request(results) + _requests_per_second(results)
        if any(r.cpu for r in results.runs):
            lines += _cpu_per_request(results) + _cpu_by_case(results) + _peak_memory(results)
        if results.charts:
            lines += _charts(results)
        lines += _latency(results)
    failed = [r for r in results.runs if r.failed]
    if failed:
        lines += ["## Failed requests", "",
                  *[f"- {r.target} {r.file} c={r.concurrency}: {r.failed} failed of {r.requests} "
                    f"(see {r.raw_output})" for r in failed], ""]
    return "\n".join(lines)
