"""make overload's report: the goodput verdicts first, then a table per
other check, as sections (report/model.py) that report.md and the run's page
both render. Pure."""
from .markdown import block_lines
from .model import Para, Part, Table
from ..faults.overload import (HOLDS_SHARE, MULTIPLES, REFUSAL_P99_MS, WINDOWS, Measured, OverloadRow,
                               goodput_windows, rejudged)
from ..measure.flags import LOADGEN_BOUND_SHARE
from ..measure.usage import BEHIND_SCHEDULE, LOADGEN, LOADGEN_BOUND, loadgen_cores_busy

TITLE = "Overload: goodput past capacity, far more clients, and a file far larger than the memory limit"


def _broken(counts: dict) -> str:
    return ", ".join(f"{n} x {k}" for k, n in counts.items()) or "none"


def _memory(row: OverloadRow) -> str:
    peak = "?" if row.peak_mib is None else f"{row.peak_mib:.0f}"
    limit = "none" if row.limit_mib is None else f"{row.limit_mib:.0f}"
    kernel = "?" if row.kernel_peak_mib is None else f"{row.kernel_peak_mib:.0f}"
    return f"{peak} / {limit} MiB (kernel's peak {kernel})"


def _figure(value) -> str:
    return "-" if value is None else f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _share(c: dict) -> str:
    if c["share"] is None:
        return "not judged"
    spread = f" [{c['share_low']:.0%}-{c['share_high']:.0%}]" if c["judged"] > 1 else ""
    return f"{c['share']:.0%}{spread}, {c['judged']} of {c['windows']}"


def _flagged(m: Measured) -> str:
    """A flagged window in words: its flags, and for a load generator that
    could get no more CPU, how busy its cores were and how much of them it
    used (runs that kept the window's figures)."""
    why = ", ".join(m.flags)
    share = loadgen_cores_busy(m.cpu, m.busy_shares)
    own = (m.cpu.get(LOADGEN) or {}).get("tool_cores")
    if {LOADGEN_BOUND, BEHIND_SCHEDULE} & set(m.flags) and share is not None and own is not None:
        why += f" (the load generator's cores {share:.0%} busy, {own:.2f} cores of it its own)"
    return f"{m.path} {m.name}: {why}{'' if m.judged else ' (not judged)'}"


def goodput(doc: dict) -> list:
    """The goodput check: a row per path and multiple, then each path's verdict."""
    s = doc["settings"]
    rows = rejudged(doc)
    failed = [f for f in doc.get("failed", []) if f.get("check") == "goodput"]
    if not rows and not failed:
        return []
    conditions = []
    for r in rows:
        floor = f" ({'a floor: ' if r.capacity_floor else ''}{', '.join(r.capacity_flags)})" if r.capacity_flags else ""
        conditions += [[r.path, f"{r.capacity_rps:g} at c={r.capacity_workers}{floor}",
                        f"{c['multiple']}x = {c['offered_rps']:g}", _figure(c["sent_rps"]), _figure(c["whole_rps"]),
                        _share(c), str(c["refused"]),
                        f"{_figure(c['refused_p50_ms'])} / {_figure(c['refused_p99_ms'])}",
                        _figure(c["admitted_p99_ms"]), "; ".join(c["not_judged"]) or "-"] for c in r.conditions]
        conditions += [] if r.conditions else [[r.path, f"{r.capacity_rps:g}", *["-"] * 8]]
    verdicts = [[r.path, "; ".join(r.steps), _broken(r.failures), str(r.oom_kills), r.container, f"**{r.verdict}**"]
                for r in rows] + [[f["path"], *["-"] * 4, f"not measured: {f['error']}"] for f in failed]
    flagged = [m for m in goodput_windows(doc) if m.flags]
    return [Part(f"Goodput: `{s['file']}` offered open loop at {' and '.join(f'{m}x' for m in MULTIPLES)} each "
                 "path's capacity (judged)", [
        Para(f"Capacity: the best whole-answer rate (a 2xx read to its end) over closed-loop concurrencies "
             f"{' '.join(map(str, s.get('concurrencies', [])))}, climbing while the rate rose; then {WINDOWS} windows "
             f"of {s.get('window_seconds', '?'):g} s per path and multiple, vegeta at a fixed rate, every path's "
             f"windows interleaved. Goodput share: whole answers per second over capacity, the median of the judged "
             f"windows [their range]. A window is named and not judged when its load generator could get no more "
             f"CPU (it used {LOADGEN_BOUND_SHARE:.0%} of its allowance, or its cores were {LOADGEN_BOUND_SHARE:.0%} "
             f"busy with it and work outside the lab's containers: a starved client reads its answers late and times "
             f"out on answers the path sent) or fell behind its schedule, or when a core it shares with the path or "
             f"its database saturated; a saturated core that only the path and its database share is the path's "
             f"own limit, judged. Holds: at least {HOLDS_SHARE:.0%} at every multiple, refusals (503) within "
             f"{REFUSAL_P99_MS:.0f} ms at p99, no failure (a cut, a client timeout, any other status), no OOM kill. "
             "Admitted: the whole answers."),
        Table(["path", "capacity, whole/s", "offered, req/s", "sent, req/s", "whole/s", "goodput share, judged windows",
               "refusals, all windows", "refusals p50 / p99 ms", "admitted p99 ms", "not judged"], conditions,
              align="lrrrrlrrrl"),
        Table(["path", "capacity climbed", "failures", "OOM kills", "container after", "verdict"], verdicts,
              align="lllrll"),
        *([Para("Flagged windows: " + "; ".join(_flagged(m) for m in flagged))] if flagged else [])])]


def overload_part(doc: dict) -> Part:
    """The run's report: the goodput verdicts first, then a table per other check."""
    s = doc["settings"]
    rows = [OverloadRow.from_dict(r) for r in doc.get("overload", [])]
    blocks = [
        Para(f"Run `{doc['run_id']}` with `{doc['env_file']}`, {doc['started']} to {doc['finished']}."
             + _pins(doc)),
        *goodput(doc),
        Para("For the other checks, right is no OOM kill (of the container or of any process in it), the "
             "container still running, and every answer whole or a clean HTTP error (a 5xx that sheds load). "
             "Peak memory is the highest anonymous + tmpfs memory sampled five times a second (the page cache "
             "of files read is left out: "
             "the kernel drops it at the limit rather than kill); beside it the kernel's own peak of the "
             "container's cgroup (memory.max_usage_in_bytes, or memory.peak on cgroup v2, where it counts from "
             "the container's start), page cache and socket buffers included, which no sampling misses. OOM "
             "kills: Docker's events or the cgroup's own count, whichever saw more."),
    ]
    for check, title in (("clients", f"{s['clients']} clients at once on `{s['file']}` for {s['seconds']} s "
                                      f"(wrk from the bench container; TARGET_MEM as set; reported, not "
                                      f"judged: its clients ask again at once on every refusal)"),
                         ("large file", f"`{s['large_file']}` to {s['large_clients']} clients at once, bytes "
                                        f"verified, every path limited to {s['large_mem']} (nginx-cache's "
                                        f"CACHE_SIZE {s.get('large_cache_size', '?')} within it), "
                                        f"{_deadline(s.get('large_deadline_ms'))}")):
        table = [[r.path, str(r.answers), str(r.whole), str(r.clean_errors), _broken(r.broken), str(r.oom_kills),
                  r.container, _memory(r), r.verdict] for r in rows if r.check == check]
        table += [[f["path"], *["-"] * 7, f"not measured: {f['error']}"] for f in doc.get("failed", [])
                  if f.get("check") == check]
        if table:
            blocks.append(Part(title, [Table(["path", "answers", "whole", "clean errors", "broken", "OOM kills",
                                              "container after", "peak / limit", "verdict"], table,
                                             align="lrrrlrlrl")]))
    return Part(TITLE, blocks)


def render(doc: dict) -> str:
    """The run's report.md (its page: report/html.py)."""
    return "\n".join(block_lines(overload_part(doc), 1))


def _deadline(ms) -> str:
    if ms is None:    # runs before LARGE_DEADLINE_MS: the lab's REQUEST_DEADLINE_MS
        return "each answer's start within the lab's REQUEST_DEADLINE_MS"
    return f"each answer's start within {ms / 1000:g} s (LARGE_DEADLINE_MS)"


def _pins(doc: dict) -> str:
    """The cores each role ran on (runs that kept them), and which make overload moved."""
    pins = doc.get("pins")
    if not pins:
        return ""
    said = ", ".join(f"{name.removesuffix('_CPUS').lower()} `{value}`" for name, value in pins.items())
    moved = doc.get("pins_moved") or []
    why = (f" ({', '.join(moved)} moved to the target's cores, so the load generator has its core to itself)"
           if moved else "")
    return f" Cores: {said}{why}."
