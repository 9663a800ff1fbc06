"""make overload's results.json as Markdown: a table per check. Pure."""
from ..faults.overload import OverloadRow


def _broken(counts: dict) -> str:
    return ", ".join(f"{n} x {k}" for k, n in counts.items()) or "none"


def _memory(row: OverloadRow) -> str:
    peak = "?" if row.peak_mib is None else f"{row.peak_mib:.0f}"
    limit = "none" if row.limit_mib is None else f"{row.limit_mib:.0f}"
    kernel = "?" if row.kernel_peak_mib is None else f"{row.kernel_peak_mib:.0f}"
    return f"{peak} / {limit} MiB (kernel's peak {kernel})"


def render(doc: dict) -> str:
    s = doc["settings"]
    rows = [OverloadRow.from_dict(r) for r in doc.get("overload", [])]
    lines = [
        "# Overload: far more clients, and a file far larger than the memory limit",
        "",
        f"Run `{doc['run_id']}` with `{doc['env_file']}`, {doc['started']} to {doc['finished']}.",
        "",
        "Right is no OOM kill (of the container or of any process in it), the container still running, and "
        "every answer whole or a clean HTTP error (a 5xx that sheds load). Peak memory is the highest "
        "anonymous + tmpfs memory sampled five times a second (the page cache of files read is left out: "
        "the kernel drops it at the limit rather than kill); beside it the kernel's own peak of the "
        "container's cgroup (memory.max_usage_in_bytes, or memory.peak on cgroup v2, where it counts from "
        "the container's start), page cache and socket buffers included, which no sampling misses. OOM "
        "kills: Docker's events or the cgroup's own count, whichever saw more.",
        "",
    ]
    for check, title in (("clients", f"{s['clients']} clients at once on `{s['file']}` for {s['seconds']} s "
                                      f"(wrk from the bench container; TARGET_MEM as set)"),
                         ("large file", f"`{s['large_file']}` to {s['large_clients']} clients at once, bytes "
                                        f"verified, every path limited to {s['large_mem']} (nginx-cache's "
                                        f"CACHE_SIZE {s.get('large_cache_size', '?')} within it), "
                                        f"{_deadline(s.get('large_deadline_ms'))}")):
        these = [r for r in rows if r.check == check]
        failed = [f for f in doc.get("failed", []) if f.get("check") == check]
        if not these and not failed:
            continue
        lines += [f"## {title}", "",
                  "| path | answers | whole | clean errors | broken | OOM kills | container after | "
                  "peak / limit | verdict |",
                  "|---|--:|--:|--:|---|--:|---|--:|---|"]
        for r in these:
            lines.append(f"| {r.path} | {r.answers} | {r.whole} | {r.clean_errors} | {_broken(r.broken)} "
                         f"| {r.oom_kills} | {r.container} | {_memory(r)} | {r.verdict} |")
        for f in failed:
            lines.append(f"| {f['path']} | - | - | - | - | - | - | - | not measured: {f['error']} |")
        lines.append("")
    return "\n".join(lines)


def _deadline(ms) -> str:
    if ms is None:    # runs before LARGE_DEADLINE_MS: the lab's REQUEST_DEADLINE_MS
        return "each answer's start within the lab's REQUEST_DEADLINE_MS"
    return f"each answer's start within {ms / 1000:g} s (LARGE_DEADLINE_MS)"
