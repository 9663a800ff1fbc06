"""Renders a Results as report.md. The first screen is the headline: one
summary table per target and size, with two sentences saying what the run
found; the details follow (checks, requests per second beside seed 000's
figures, CPU per request and cores, latency at a fixed rate, memory, ab -k
against wrk, the sweep, every case, what the run cost). A failed case reads
"failed" in every table, never a number."""
from . import seed000, seed002
from .headline import (BASELINE, STORES, concurrencies as _concurrencies, ferretdb as _ferretdb, files as _files,
                       grouped as _grouped, headline_level as _headline_level, headline_rows, ratio_words, sentences,
                       size_label as _size, timed_targets as _timed_targets)
from ..measure.rounds import mean_positions
from ..results import NOISY, Results, Run, StorePass
from ..measure.stats import NOISY_LEVEL, NOISY_WIDTH, TOOLS_DISAGREE
from ..measure.usage import (BEHIND_SCHEDULE, CACHE_MISSED, CORE_SATURATED, CORE_SATURATED_SHARE, DISTURBED,
                             DISTURBED_CORES, FEW_ROUNDS, FEW_SAMPLES, LINK_BOUND, LOADGEN, LOADGEN_BOUND,
                             LOADGEN_BOUND_SHARE, REFUSED, ROUNDS_WANTED, SHORT_WINDOW, THROTTLED)
from ..settings import OPEN_LOOP_MAX_S, OPEN_LOOP_REQUESTS

NONCONFORMING = "nonconforming"

# One mark per flag, the same in every table; the legend says what each means.
# Each is in DejaVu Sans (Debian's default font), so that a page without emoji
# fonts shows it rather than an empty box.
MARKS = {LOADGEN_BOUND: "⚑", CORE_SATURATED: "▲", NOISY: "~", THROTTLED: "⊘", SHORT_WINDOW: "◌",
         FEW_ROUNDS: "◔", CACHE_MISSED: "◇", NONCONFORMING: "✗", BEHIND_SCHEDULE: "⇣", FEW_SAMPLES: "ⁿ",
         DISTURBED: "⚠", LINK_BOUND: "⇄", REFUSED: "↯"}
BASELINE_MARK = "†"
LEGEND = {
    LOADGEN_BOUND: f"the load generator used at least {LOADGEN_BOUND_SHARE:.0%} of its CPU allowance (its own CPU "
                   "time over the run, or its container's): the figure is partly the tool's speed, a floor for "
                   "the server's",
    CORE_SATURATED: f"a CPU core shared by two of this case's containers (by their cpusets) was over "
                    f"{CORE_SATURATED_SHARE:.0%} busy: they competed for it",
    NOISY: f"the repetitions do not pin its requests per second to within x/÷{NOISY_WIDTH:.2f}: the "
           f"{NOISY_LEVEL:.0%} t interval of their geometric mean is wider (it narrows as repetitions grow)",
    THROTTLED: "the target's CFS quota throttled it",
    SHORT_WINDOW: ("the run held fewer than two of cAdvisor's readings of the target or a container working beside "
                   "it: cores and CPU per request are rough"),
    FEW_ROUNDS: f"each client completed fewer than {ROUNDS_WANTED} requests on average, even with the slow case's "
                "longest stretch: the clients all start at once and the first answers wait a whole round, so the "
                "figure can read low by up to one round in that many",
    CACHE_MISSED: "a caching path answered fewer than 99% of the case's counted requests from its cache: the row "
                  "measures its upstream too",
    NONCONFORMING: "the target failed the conformance suite and was timed anyway (BENCH_ALLOW_NONCONFORMING=1)",
    BEHIND_SCHEDULE: "vegeta sent below 95% of the rate asked (out of workers or CPU): requests waited to be sent "
                     "and the wait is not in their latency (coordinated omission)",
    LINK_BOUND: "the answers crossed the link between the load generator's host and the paths' at 90% or more "
                "of the rate iperf3 measured on it before timing: the link, not the path, set the figure",
    DISTURBED: f"work outside the lab's containers (another program on the machine) used more than "
               f"{DISTURBED_CORES:g} of a core while the run was timed: the figure shares the machine with it",
    REFUSED: "some answers were not 2xx (their count and share are in Every case). Every lab path answers 503 "
             "with Retry-After when a request's deadline (REQUEST_DEADLINE_MS) passes before its answer starts, so "
             "past its capacity a path sheds load this way. Requests per second count the 2xx answers only; "
             "latency and CPU per request take in the refused ones too. ab and wrk do not say which status; "
             "vegeta's report counts them by status",
    FEW_SAMPLES: f"the open-loop run held fewer than {OPEN_LOOP_REQUESTS:,} requests (it stops at "
                 f"{OPEN_LOOP_MAX_S:g} s): its p99.9 rests on few answers, see its count",
}
BASELINE_NOTE = f"{BASELINE_MARK} a ratio taken against a flagged nginx-static figure"


def _marks(flags) -> str:
    marks = "".join(MARKS[f] for f in MARKS if f in flags)
    return f" {marks}" if marks else ""


def _legend(flags_seen: set[str], baseline_mark: bool = False) -> list[str]:
    lines = [f"- {MARKS[f]} `{f}`: {LEGEND[f]}" for f in MARKS if f in flags_seen]
    if baseline_mark:
        lines.append(f"- {BASELINE_NOTE}")
    return (["Flags:", "", *lines, ""]) if lines else []










def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines




def _size_by_target(results: Results, cell) -> list[str]:
    """One table per concurrency level: a row per file size, a column per
    timed target (grouped by store), each cell cell(run or None, target, file, concurrency)."""
    targets = _grouped(_timed_targets(results))
    lines = []
    for c in _concurrencies(results):
        rows = [[_size(file), *(cell(results.run_for(t, file, c), t, file, c) for t in targets)]
                for file, _ in _files(results)]
        header = [f"{t} ({STORES.get(t, 'other')})" for t in targets]
        lines += [f"### Concurrency {c}", "", *_table(["File size", *header], rows), ""]
    return lines


def server_label(environment: dict) -> str:
    """What the database said of itself (buildInfo), never assumed."""
    server = environment.get("server") or {}
    if not server:
        return "unknown server"
    label = f"{server.get('product', 'MongoDB')} {server.get('version', '?')}"
    if server.get("product") == "FerretDB":
        label += f" (MongoDB wire version {server.get('wire_version', '?')}"
        label += f", {server['backend']} backend)" if server.get("backend") else ", backend not reported)"
    elif server.get("storage_engine"):
        label += f" ({server['storage_engine']})"
    return label


# Each service's own base variable and the shared one it defaults to.
SERVICE_IMAGE_DEFAULTS = {
    "SEED_IMAGE": "PYTHON_IMAGE", "BENCH_IMAGE": "PYTHON_IMAGE", "FLASK_IMAGE": "PYTHON_IMAGE",
    "FLASK_POSTGRES_IMAGE": "PYTHON_IMAGE", "NGINX_STATIC_IMAGE": "NGINX_BASE_IMAGE",
    "NGINX_GRIDFS_IMAGE": "NGINX_BASE_IMAGE", "NGINX_CACHE_IMAGE": "NGINX_BASE_IMAGE",
    "GRIDFS_FUSE_IMAGE": "NGINX_BASE_IMAGE",
}


def _shown_image_variables(params: dict) -> list[str]:
    """The shared bases, then any service's own base that was swapped."""
    shared = [k for k in ("NGINX_BASE_IMAGE", "HTTPD_IMAGE", "PYTHON_IMAGE", "NODE_IMAGE") if params.get(k)]
    swapped = [k for k, base in SERVICE_IMAGE_DEFAULTS.items() if params.get(k) and params[k] != params.get(base)]
    return shared + swapped


def _images(results: Results) -> list[str]:
    """What each container ran, as Docker reported it through cAdvisor."""
    images = results.environment.get("images") or {}
    if not images:
        return []
    rows = [[role, f"`{i.get('image') or '?'}`", f"`{(i.get('image_id') or '?').removeprefix('sha256:')[:12]}`"]
            for role, i in images.items()]
    return ["## Images", "", "What each container ran, from Docker (cAdvisor's container spec and Compose's "
            "image label): a swapped variable shows here as another image ID.", "",
            *_table(["container", "image", "image ID"], rows), ""]


def _hosts(results: Results) -> list[str]:
    """The hosts of a lab split by role (tools/hosts.py), as their cAdvisors
    describe them, and which containers each ran."""
    hosts = results.environment.get("hosts") or []
    if not hosts:
        return []
    rows = [[f"{h['name']}{' (bench)' if h.get('bench') else ''}", str(h.get("cpus", "?")),
             f"{h['memory_bytes'] / 2**30:.1f} GiB" if h.get("memory_bytes") else "?",
             ", ".join(h.get("containers") or []) or "none watched"] for h in hosts]
    measured = []
    link = results.environment.get("link")
    if link:
        retransmits = f", {link['retransmits']} retransmits" if link.get("retransmits") is not None else ""
        shaped = f" shaped with tc ({link['shaped']})" if link.get("shaped") else ""
        measured = [f"The link{shaped}, measured before timing (iperf3, {link['direction']}, {link['seconds']:g} s): "
                    f"**{link['bits_per_second'] / 1e6:.1f} Mbit/s** received{retransmits}; a row moving 90% of "
                    "it is `link-bound`.", ""]
    return ["## Hosts", "", "One Docker engine per role, each with its own cAdvisor: every container's CPU is "
            "read on its own host.", "", *_table(["host", "CPUs", "memory", "containers"], rows), "", *measured]


def _heading(results: Results) -> list[str]:
    env, params, timing = results.environment, results.parameters, results.timing
    load = (f"- Load: {env.get('ab_version', 'ab')}; profile `{timing.get('profile', 'full')}`: "
            f"{timing.get('repetitions', '?')} repetitions of {timing.get('duration_s', '?')} s per case "
            f"(slow cases up to {timing.get('max_duration_s', '?')} s, to hold {timing.get('min_requests', '?')} "
            f"requests) after {timing.get('warmup_s', '?')} s of warm-up, rotating through the targets; "
            f"concurrency {params.get('BENCH_CONCURRENCY')}; tools `{' '.join(timing.get('tools', ['ab']))}`"
            + (f"; ab as {timing['loadgens']} processes sharing each case's connections (BENCH_LOADGENS), merged"
               if timing.get("loadgens", 1) > 1 else ""))
    lines = [
        f"# GridFS Serving Lab report: run {results.run_id}",
        "",
        f"- Database: **{server_label(env)}** from image `{params.get('MONGO_IMAGE', '?')}`",
        "- Images: " + ", ".join(f"{k}=`{params[k]}`" for k in _shown_image_variables(params)),
        f"- CPU: {env.get('cpu_model', '?')}, {env.get('host_cores', '?')} cores; pins: "
        f"target `{params.get('TARGET_CPUS')}`, mongo `{params.get('MONGO_CPUS')}`, "
        f"load generator `{params.get('LOADGEN_CPUS')}`; memory: target {params.get('TARGET_MEM')}, "
        f"mongo {params.get('MONGO_MEM')}",
        load,
        f"- Started {results.started_at}, finished {results.finished_at}"
        + (f" ({env['duration_seconds']:.0f} s)" if env.get("duration_seconds") else ""),
        "",
    ]
    if results.status not in ("complete", "running"):
        lines += [f"> **This run is {results.status.split(':')[0]}**: {results.status}. "
                  "The tables hold what was measured before it stopped.", ""]
    if _ferretdb(results):
        lines += [
            "> The database here is FerretDB, a MongoDB-protocol server, standing in for MongoDB",
            "> where no mongo image can be had. It serves GridFS reads far slower than MongoDB, so",
            "> the GridFS rows are bound by the database, not by the serving path: compare serving",
            "> paths by their own container's CPU per request as well as by requests per second.",
            "",
        ]
    return lines


# --- the headline --------------------------------------------------------------
def _headline_rows(results: Results) -> tuple[list[list[str]], set[str], bool]:
    rows, seen, baseline_flagged = [], set(), False
    for h in headline_rows(results):
        run, loop = h.run, h.loop
        if not run.ok:
            rows.append([h.target, h.store, h.size, "failed", "failed", "-", "-", "-", run.error or ""])
            continue
        baseline_flagged |= h.baseline_flagged
        dagger = BASELINE_MARK if h.baseline_flagged else ""
        seen |= set(run.flags) | (set(loop.flags) if loop else set())
        p99 = ("failed" if loop and not loop.ok else
               f"{loop.p99_ms:.2f} @ {loop.rate:.0f}/s{_marks(loop.flags)}" if loop else "-")
        rows.append([h.target, h.store, h.size, f"{run.rps:.0f}", ratio_words(h.rps, h.rps_ratio) + dagger,
                     ratio_words(h.cpu, h.cpu_ratio) + dagger, p99, run.bottleneck or "-",
                     " ".join(run.flags) + (" (baseline flagged)" if h.baseline_flagged else "")])
    return rows, seen, baseline_flagged


def _sentences(results: Results) -> list[str]:
    lines = sentences(results)
    return [" ".join(lines), ""] if lines else []


def _headline(results: Results) -> list[str]:
    if not results.runs:
        return []
    rows, seen, baseline_flagged = _headline_rows(results)
    c = _headline_level(results)
    return (["## Headline", "", *_sentences(results),
             *_table(["target", "store", "size", f"req/s at c={c}", "req/s ratio to nginx-static",
                      "CPU/request ratio to nginx-static", "p99 ms at a fixed rate", "bottleneck", "flags"], rows),
             "",
             f"Ratios: the target's figure over nginx-static's in the same run (higher req/s is better; lower "
             f"CPU per request is better). p99 at a fixed rate: an open-loop run (vegeta) at "
             f"{results.timing.get('open_loop_share', 0.5):.0%} of the path's keep-alive capacity, so it is response "
             "time, not queueing. Bottleneck: what bound the row, decided from its flags and CPU (the load "
             "generator; a core two active containers shared; the target's or the database's own CPU allowance "
             "used to 90%; else none: the path waited with CPU to spare).", "",
             *_legend(seen, baseline_flagged)])


def _rounds(results: Results) -> list[str]:
    """How the rounds ran and what each headline ratio rests on: its width,
    the per-round sd of its log, its rounds, and whether it converged."""
    found = results.rounds or {}
    rows = [r for r in found.get("rows", []) if r.get("headline")]
    if not rows:
        return []
    width = found.get("target_width")

    def cells(ratio: dict | None) -> list[str]:
        if not ratio:
            return ["-", "-", "-"]
        return [ratio_words(ratio), f"x/÷{ratio['width']:.3f}" if ratio.get("width") else "-",
                f"{ratio['sd']:.3f}" if ratio.get("sd") is not None else "-"]

    def state(r: dict) -> str:
        if r.get("converged_at"):
            return f"within at round {r['converged_at']}"
        return f"**not within x/÷{width:g}** ({found.get('stopped')})" if width else "fixed count"

    table = [[r["target"], _size(r["file"]), *cells(r.get("rps")), *cells(r.get("cpu")), str(r["rounds"]), state(r)]
             for r in sorted(rows, key=lambda r: (r["file"], r["target"]))]
    positions = mean_positions({k: v for k, v in (results.schedule.get("orders") or {}).items()
                                if k.endswith(f"c={rows[0]['concurrency']}")})
    return ["## Rounds", "",
            f"{found.get('rounds')} rounds at c={rows[0]['concurrency']}, stopped: {found.get('stopped')}"
            + (f"; target width x/÷{width:g}" if width else "") + f". Each round timed every path once in a fresh "
            f"order from the run's seed; a ratio is the {found.get('estimator')}; width: the interval as x/÷ its "
            "centre; sd: of the rounds' log ratios. Mean position in the rounds (1 = first): "
            + ", ".join(f"{name} {p:g}" for name, p in positions.items()) + ".", "",
            *_table(["target", "size", "req/s ratio", "width", "sd", "CPU/request ratio", "width", "sd", "rounds",
                     "interval"], table), ""]


# --- checks ---------------------------------------------------------------------
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


# --- details --------------------------------------------------------------------
def _half_range(run: Run) -> str:
    if not run.spread or len(run.repetitions) < 2:
        return ""
    return f" ±{run.spread['half_range']:.0%}"


def _requests_per_second(results: Results) -> list[str]:
    seen, flagged_base = set(), False

    def cell(run, target, file, c):
        nonlocal flagged_base
        if run is None:
            return "-"
        if not run.ok:
            return "failed"
        seen.update(run.flags)
        base = results.run_for(BASELINE, file, c)
        text = f"{run.rps:.0f}{_half_range(run)}{_marks(run.flags)}"
        if base and base.ok and base.rps and target != BASELINE:
            dagger = BASELINE_MARK if {LOADGEN_BOUND, CORE_SATURATED} & set(base.flags) else ""
            flagged_base |= bool(dagger)
            text += f" ({run.rps / base.rps:.3f}{dagger})"
        published = seed000.time_per_request_ms(target, file)
        return text + (f" [{1000 / published:.0f}]" if published else "")

    tables = _size_by_target(results, cell)
    return (["## Requests per second", "",
             "The median repetition's requests per second, ± half the repetitions' range; in brackets () the "
             "ratio to nginx-static in the same run, in square brackets [] seed 000's published figure "
             "(1000 / its time per request: 2013, EC2 m1.medium over a real network, ab -c 100 per its README, "
             "-c 5 in its scripts; compare ratios, not absolutes). Time per request is 1000 / req/s; every "
             "figure of every repetition is in results.json. Seed 000's columns: "
             + ", ".join(f"{ours} = \"{theirs}\"" for ours, theirs in seed000.COLUMNS.items()) + ".", ""]
            + tables + _legend(seen, flagged_base))


def _database_role(run) -> str | None:
    """The database that served the row: of the roles in run.cpu that are
    neither the target nor the load generator (mongo, postgres), the one
    that spent the most CPU in it."""
    roles = [role for role in run.cpu or {} if role not in (run.target, LOADGEN)]
    return max(roles, key=lambda r: run.cpu[r].get("cpu_seconds") or 0, default=None)


def _ms(usage: dict | None) -> str:
    return f"{usage['cpu_ms_per_request']:.3f}" if usage and usage.get("cpu_ms_per_request") is not None else "-"


def _cpu_per_request(results: Results) -> list[str]:
    def cell(run, target, *_):
        if run is None:
            return "-"
        if not run.ok:
            return "failed"
        if not run.cpu:
            return "-"
        db = _database_role(run)
        named = f" ({db})" if db and db != "mongo" else ""
        return f"{_ms(run.cpu.get(target))} / {_ms(run.cpu.get(db))}{named}{_marks(run.flags)}"

    return ["## CPU ms per request (target / database; lower is better)", "",
            "CPU time each container spent per request in the row's repetition: its CPU over the timed",
            "interval (cAdvisor's cgroup counters, first and last reading inside the run) over the requests",
            "that completed inside that interval (ab's and vegeta's own per-request times; wrk's rows: over",
            "the run's requests per second). It is what a request costs, whatever the rate: a path that",
            "waits on a slow database shows a low figure for itself and a high one for the database.", "",
            *_size_by_target(results, cell)]


def _cores(usage: dict | None) -> str:
    if not usage or usage.get("cores") is None:
        return "-"
    allowance = usage.get("allowance_cores")
    return f"{usage['cores']:.2f}" + (f" of {allowance:g}" if allowance else "")


def _cpu_by_case(results: Results) -> list[str]:
    rows = []
    for r in results.runs:
        if not r.ok or not r.cpu:
            continue
        busy = (r.cpu_window or {}).get("busy_shares") or {}
        cores = ", ".join(f"{cpu[3:]}: {share:.0%}" for cpu, share in sorted(busy.items()) if cpu != "cpu")
        rows.append([r.target, _size(r.file), str(r.concurrency), _cores(r.cpu.get(r.target)),
                     _cores(r.cpu.get(_database_role(r))), _cores(r.cpu.get(LOADGEN)), cores,
                     " ".join(r.flags)])
    return ["## CPU cores by case (mean over the timed interval, of the container's allowance)", "",
            "Each container's cores in the row's repetition; host cores: how busy each CPU was over it (from",
            "/proc/stat), which is what `core-saturated` reads for the cores the case's containers share.", "",
            *_table(["target", "size", "concurrency", "target cores", "database cores", "load generator cores",
                     "host cores busy", "flags"], rows), ""]


def _open_loop(results: Results) -> list[str]:
    if not results.open_loop:
        return []
    rows = []
    for o in results.open_loop:
        if not o.ok:
            rows.append([o.target, _size(o.file), f"{o.rate:g}", "failed", "-", "-", "-", "-", "-", "-",
                         o.error or ""])
            continue
        low, high = o.p99_interval_ms or (None, None)
        interval = f"{low:.2f}–{high:.2f}" if low is not None and high is not None else (
            f"{low:.2f}–?" if low is not None else "-")
        rows.append([o.target, _size(o.file), f"{o.rate:g}" + (f" of {o.capacity:g} ({o.capacity_from})"
                                                               if o.capacity_from else "")
                     + (f", {o.share:.0%}" if o.share and results.timing.get("open_loop_curve") else ""),
                     f"{o.sent_rate:g}", f"{o.requests:,}", f"{o.p50_ms:.2f}", f"{o.p99_ms:.2f}", interval,
                     f"{o.p999_ms:.2f}", f"{o.max_ms:.1f}", " ".join(o.flags)])
    return ["## Latency at a fixed rate (open loop, vegeta)", "",
            "Requests leave on schedule at a fixed rate whether or not earlier ones were answered, so a slow",
            "answer delays no later request (no coordinated omission): these percentiles are response times.",
            "The rate is a share of the path's keep-alive capacity for that size (the faster of ab -k and wrk;",
            "vegeta keeps its connections alive too). Each run lasts until it has sent "
            f"{OPEN_LOOP_REQUESTS:,} requests or {OPEN_LOOP_MAX_S:g} s.",
            "Percentiles are order statistics of every request's latency; p99's 95% interval is distribution-free",
            "(two order statistics chosen from the binomial distribution of the count below the true p99; `?`: too",
            "few requests for an upper bound). `sent` is vegeta's own rate, first to last request sent; below",
            f"{0.95:.0%} of the rate asked it fell behind its schedule (behind-schedule).", "",
            *_table(["target", "size", "rate asked /s", "sent /s", "requests", "p50 ms", "p99 ms",
                     "p99 95% interval ms", "p99.9 ms", "max ms", "flags"], rows), ""]


def _cache(results: Results) -> list[str]:
    cached = [r for r in results.runs if r.cache]
    if not cached:
        return []
    rows = [[r.target, _size(r.file), str(r.concurrency), str(r.cache["hits"]), str(r.cache["misses"]),
             str(sum(r.cache["other"].values())), f"{r.cache['hit_ratio']:.4f}" if r.cache["hit_ratio"] is not None
             else "-"] for r in cached]
    return ["## Cache hits", "",
            "What a caching path's own log says of each case's counted requests (warm-up excluded); below "
            "0.99 the row is flagged `cache-missed`: it measures the upstream too.", "",
            *_table(["target", "size", "concurrency", "hits", "misses", "other", "hit ratio"], rows), ""]


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


def _tool_cell(tool) -> str:
    spread = (tool.spread or {}).get("half_range")
    text = f"{tool.rps:.0f}" + (f" ±{spread:.0%}" if spread is not None and len(tool.repetitions) > 1 else "")
    return text + _marks(tool.flags)


def _agreement(results: Results) -> list[str]:
    if not results.comparisons:
        return []
    rows = []
    for c in sorted(results.comparisons, key=lambda c: (c.concurrency, c.size_bytes)):
        a, w = c.ab_keepalive, c.wrk
        verdict = f"**{c.difference:.1%} differ**" if c.disagree else f"{c.difference:.1%}"
        rows.append([c.target, _size(c.file), str(c.concurrency), _tool_cell(a), _tool_cell(w), verdict,
                     f"{a.p50_ms:.2f} / {a.p90_ms:.2f} / {a.p99_ms:.2f} / {a.max_ms:.0f}",
                     f"{w.p50_ms:.2f} / {w.p90_ms:.2f} / {w.p99_ms:.2f} / {w.max_ms:.0f}",
                     str(a.failed + w.failed), str(a.refused + w.refused)])
    free = [c for c in results.comparisons if not c.bound]
    agree_free = sum(not c.disagree for c in free)
    seen = {f for c in results.comparisons for t in (c.ab_keepalive, c.wrk) for f in t.flags}
    return ["## ab -k against wrk (requests per second; agreement per case)", "",
            "Like with like: both keep connections alive (HTTP/1.1 for wrk, HTTP/1.0 keep-alive for ab -k) "
            "at the same connection count and for the same seconds, repetitions interleaved, the tool going "
            "first alternating. "
            f"Difference: |ab -k - wrk| / their mean, of the median repetitions; **differ**: over "
            f"{TOOLS_DISAGREE:.0%}. Latency: p50 / p90 / p99 / max ms (closed loop: queueing included).", "",
            *_table(["target", "size", "concurrency", "ab -k req/s", "wrk req/s", "difference",
                     "ab -k latency ms", "wrk latency ms", "failed", "refused"], rows), "",
            f"{agree_free} of {len(free)} cases with neither tool at its CPU limit agree within "
            f"{TOOLS_DISAGREE:.0%}; {len(results.comparisons) - len(free)} more had a tool at its limit.", "",
            *_legend(seen)]


def _sweep(results: Results) -> list[str]:
    if not results.sweep:
        return []
    levels = sorted({p.concurrency for p in results.sweep})
    order = _timed_targets(results)
    keys = sorted({(p.target, p.size_bytes, p.file, p.tool) for p in results.sweep},
                  key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[1], k[3]))
    rows = []
    for target, _, file, tool in keys:
        row = [target, _size(file), tool]
        for level in levels:
            p = next((p for p in results.sweep if (p.target, p.file, p.tool, p.concurrency)
                      == (target, file, tool, level)), None)
            row.append("-" if p is None else f"{p.rps:.0f}" + _marks(p.flags)
                       + (f" ({p.failed} failed)" if p.failed else ""))
        rows.append(row)
    seconds = results.timing.get("sweep_duration_s")
    lines = ["## Concurrency sweep (requests per second)", "",
             f"One run per level{f' of {seconds:g} s' if seconds else ''}, after the timed cases warmed every "
             "path: a shape to read, not a figure to quote.", "",
             *_table(["target", "size", "tool", *[f"c={c}" for c in levels]], rows), "",
             *_legend({f for p in results.sweep for f in p.flags})]
    for target in order:
        if target in results.sweep_charts:
            lines += [f"![{target}: requests per second against concurrency]({results.sweep_charts[target]})", ""]
    return lines


def _every_case(results: Results) -> list[str]:
    rows = []
    for r in results.runs:
        if not r.ok:
            rows.append([r.target, _size(r.file), str(r.concurrency), "failed", "-", "-", "-", "-", "-",
                         str(r.failed), _refused(r.refused, r.answers), (r.error or "").replace("|", "\\|")])
            continue
        rps = r.spread or {}
        rows.append([r.target, _size(r.file), str(r.concurrency), f"{r.rps:.0f}",
                     f"{rps.get('min', r.rps):.0f}–{rps.get('max', r.rps):.0f}", f"{r.requests}",
                     f"{r.p50_ms:.2f}", f"{r.p99_ms:.2f}", f"{r.transfer_kbps:.0f}", str(r.failed),
                     _refused(r.refused, r.answers), " ".join(r.flags)])
    return ["## Every case", "",
            "The row's repetition (the median by requests per second, of 2xx answers) with the range of all of "
            "them; over every repetition, `failed` counts requests with no answer or a 2xx answer cut short, "
            "`refused` the answers that were not 2xx, with their share of all answers.", "",
            *_table(["target", "size", "concurrency", "req/s", "req/s min–max", "requests", "p50 ms", "p99 ms",
                     "KB/s", "failed", "refused", "flags / error"], rows), ""]


def _refused(refused: int, answers: int) -> str:
    return f"{refused} ({refused / answers:.0%})" if refused and answers else str(refused)


def _phases(results: Results) -> list[str]:
    if not results.phases:
        return []
    rows = [[name, f"{seconds:.1f}"] for name, seconds in results.phases.items()]
    planned, actual = results.timing.get("planned_seconds"), results.timing.get("actual_seconds")
    note = (f"The timed phases were expected to take {planned:.0f} s from the settings and took {actual:.0f} s "
            "(slow cases run longer to hold their minimum of requests)." if planned and actual else "")
    return ["## What this run cost (wall seconds)", "",
            "The seed's time is its own (from manifest.json); the rest is bench's, phase by phase. " + note, "",
            *_table(["phase", "seconds"], rows), ""]


# --- seed 002: the stores written and read back ---------------------------------
def _store_name(results: Results, store: str) -> str:
    return f"{store} (FerretDB)" if store == "gridfs" and _ferretdb(results) else store


def _per_gb(row: StorePass) -> str:
    """bench's CPU s/GB / the store's own container's (whatever its service
    is named; none for the filesystem, whose work is bench's)."""
    if not row.cpu_s_per_gb:
        return "-"
    store = next((v for role, v in row.cpu_s_per_gb.items() if role != LOADGEN), None)
    return " / ".join("-" if v is None else f"{v:.2f}" for v in (row.cpu_s_per_gb.get(LOADGEN), store))


def _seed002_cell(row: StorePass, same: bool) -> str:
    if row.operation != "write":
        return "-"
    seconds, rate = seed002.write_seconds(row.store, row.threads), seed002.write_mb_per_s(row.store, row.threads)
    if seconds is None:
        return "-"
    return f"{seconds:.0f} s ({rate:.1f} MB/s)" if same else f"({rate:.1f} MB/s)"


def _store_rows(results: Results, rows: list[StorePass], same: bool) -> tuple[list[list[str]], set[str]]:
    out, seen = [], set()
    for r in rows:
        head = [_store_name(results, r.store), r.operation, str(r.threads), r.order]
        if not r.ok:
            out.append([*head, "failed", "-", "-", "-", "-", _seed002_cell(r, same), (r.error or "").replace("|", "\\|")])
            continue
        seen.update(r.flags)
        spread = f" ±{r.spread['half_range']:.0%}" if r.spread and len(r.passes) > 1 else ""
        out.append([*head, f"{r.seconds:.2f}", f"{r.files_per_s:.2f}", f"{r.mb_per_s:.1f}{spread}{_marks(r.flags)}",
                    _per_gb(r), f"{_median_pass(r, 'p50_ms'):.0f} / {_median_pass(r, 'p99_ms'):.0f}",
                    _seed002_cell(r, same), ""])
    return out, seen


def _store_benchmark(results: Results) -> list[str]:
    rows = results.writes + results.reads
    if not rows:
        return []
    setup = results.store_setup
    files, size = setup.get("files", rows[0].files), setup.get("file_bytes", rows[0].file_bytes)
    same = seed002.same_setting(files, size)
    table, seen = _store_rows(results, rows, same)
    lines = ["## Stores: writes and reads (seed 002)", "",
             f"{files} files of {size:,} bytes ({files * size / 1e9:.2f} GB) into each store, with 1 thread and with "
             f"{max(setup.get('threads', [1]))}, every pass into an empty store, the stores in the schedule's order "
             "(another each repetition); "
             "then read back by the same client library, 1 thread in order and many threads in random order (seed "
             "002's method). A row is the median of its passes by files per second, ± half their range. CPU s/GB: "
             "each container's CPU seconds per 10^9 bytes moved (bench, the writer or reader / the store's own "
             "container; the filesystem's work is the kernel's, charged to bench). Seed 002's column: its published "
             "seconds where the setting matches (WRITE_FILES=1000 WRITE_SIZE=10000000), else its rate for reference "
             "only (2015, Windows, one 10,000 rpm disk; the machine restarted before every test). Warm reads come "
             "after a pass that is not counted, so caches hold what they will: they measure each store's software "
             "path more than the disk. Cold reads (\"in order, cold\") drop every file from the caches bench can "
             "reach before each pass; the databases' own caches go only with a restart, so their cold rows are "
             "not measured (store_setup.cold_reads says so per store). Sizes are read after a checkpoint or "
             "fsync.", "",
             *_table(["store", "operation", "threads", "order", "seconds", "files/s", "MB/s", "CPU s/GB bench / store",
                      "ms per file p50 / p99", "seed 002", "error"], table), "", *_legend(seen)]
    return lines + _disk(results) + _durability(results)


def _median_pass(row: StorePass, key: str) -> float:
    ordered = sorted(row.passes, key=lambda p: p["rps"])
    return ordered[(len(ordered) - 1) // 2][key] if ordered else 0.0


def _disk(results: Results) -> list[str]:
    rows = []
    for r in results.writes:
        if not r.disk:
            continue
        published = seed002.disk_ratio(r.store)
        rows.append([_store_name(results, r.store), str(r.threads), f"{r.total_bytes:,}", f"{r.disk['bytes']:,}",
                     f"{r.disk['ratio']:.3f}", f"{published:.2f}" if published else "-",
                     "yes" if r.verified else "**no**"])
    if not rows:
        return []
    return ["### Storage used", "",
            "What each store used for the files just written, against their bytes (GridFS: the collections' "
            "storage and index sizes from collStats; PostgreSQL: pg_total_relation_size of its tables, TOAST and "
            "indexes included; the filesystem: the blocks its files hold, as du counts). Seed 002's: its \"GB\" "
            "figures against the files' 9.31 GiB. Verified: every file read back and matched its sha256.", "",
            *_table(["store", "threads", "bytes written", "bytes used", "ratio", "seed 002 ratio", "verified"], rows),
            ""]


def _plain(value) -> str:
    """A recorded setting as a reader writes it: {'w': 1, 'j': True} -> w=1 j=true."""
    if isinstance(value, dict):
        return " ".join(f"{k}={_plain(v)}" for k, v in value.items())
    return str(value).lower() if isinstance(value, bool) else str(value)


def _durability(results: Results) -> list[str]:
    durability = results.store_setup.get("durability") or {}
    if not durability:
        return []
    lines = ["### What made a write durable", "",
             "Every store acknowledges a file only once it is durable, as its server reports its settings:", ""]
    for store, settings in durability.items():
        text = "; ".join(f"{k}: {_plain(v)}" for k, v in settings.items())
        lines.append(f"- {_store_name(results, store)}: {text}")
    errors = results.store_setup.get("errors") or {}
    lines += [f"- {store}: **failed**: {why}" for store, why in errors.items()]
    return lines + [""]


# --- the working set over HTTP --------------------------------------------------
def _working_set(results: Results) -> list[str]:
    ws = results.working_set
    if not ws or not ws.runs:
        return []
    hot_file = _files(results)[0][0] if results.runs else None
    base = next((r for r in ws.runs if r.target == BASELINE and r.ok), None)
    rows, seen = [], set()
    for r in sorted(ws.runs, key=lambda r: _grouped([x.target for x in ws.runs]).index(r.target)):
        hot = results.run_for(r.target, hot_file, ws.concurrency) if hot_file else None
        hot_cell = "-" if hot is None else ("failed" if not hot.ok else f"{hot.rps:.0f}")
        if not r.ok:
            rows.append([r.target, STORES.get(r.target, "other"), "failed", "-", hot_cell, "-", "-", "-",
                         (r.error or "").replace("|", "\\|")])
            continue
        seen.update(r.flags)
        ratio = f"{r.rps / base.rps:.3f}" if base and base.rps and r.target != BASELINE else "-"
        db = _database_role(r)
        cpu = f"{_ms((r.cpu or {}).get(r.target))} / {_ms((r.cpu or {}).get(db))}" if r.cpu else "-"
        hits = f"{r.cache['hit_ratio']:.3f}" if r.cache and r.cache.get("hit_ratio") is not None else "-"
        rows.append([r.target, STORES.get(r.target, "other"), f"{r.rps:.0f}{_half_range(r)}{_marks(r.flags)}", ratio,
                     hot_cell, cpu, f"{r.p50_ms:.2f} / {r.p99_ms:.2f}", hits, ""])
    limits = ", ".join(f"{role} {limit / 2**20:.0f}" for role, limit in sorted(ws.memory_limits.items()))
    cache = results.parameters.get("CACHE_SIZE")
    return ["## Working set: many files in random order", "",
            f"The seed's file set `{ws.spec}`: {ws.count:,} files, {ws.total_bytes / 2**20:.1f} MiB in all, each "
            f"request for a file drawn at random (wrk, working_set.lua), concurrency {ws.concurrency}, after each "
            "path served a sample of the set byte for byte. Beside it, the same path's hot-file figure (one file "
            f"over and over: {_size(hot_file) if hot_file else '-'} at the same concurrency). Whether the set fits "
            "in memory decides much of it: the set against each container's memory limit (MiB): "
            f"{limits or 'not read'}" + (f"; nginx-cache's cache tmpfs {cache}" if cache else "") + ".", "",
            *_table(["target", "store", "req/s", "ratio to nginx-static", "hot-file req/s", "CPU ms/request "
                     "target / database", "p50 / p99 ms", "cache hit ratio", "error"], rows), "", *_legend(seen)]


def _warnings(results: Results) -> list[str]:
    return [*(f"> **Warning:** {w}" for w in results.warnings), ""] if results.warnings else []


def _always(results: Results) -> bool:
    return True


def _timed(results: Results) -> bool:
    return bool(results.runs)


def _cpu_measured(results: Results) -> bool:
    return any(r.cpu for r in results.runs)


def _charted(results: Results) -> bool:
    return bool(results.runs and results.charts)


# report.md's sections in order, each with when it is written: a new
# measurement's section is one line here (its phase, one line in
# bench.benchmark.phases.PHASES).
SECTIONS = (
    (_always, _heading), (_always, _warnings), (_always, _headline), (_always, _rounds), (_always, _verification),
    (_always, _conformance), (_timed, _requests_per_second), (_always, _working_set), (_always, _store_benchmark),
    (_cpu_measured, _cpu_per_request), (_cpu_measured, _cpu_by_case), (_timed, _open_loop), (_timed, _cache),
    (_cpu_measured, _peak_memory), (_charted, _charts), (_timed, _agreement), (_timed, _sweep),
    (_timed, _every_case), (_always, _hosts), (_always, _images), (_always, _phases),
)


def render_markdown(results: Results) -> str:
    return "\n".join(line for written, section in SECTIONS if written(results) for line in section(results))
