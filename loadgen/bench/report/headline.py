"""The run's answer, shared by report.md, index.html, the run index and the
exports: which paths were timed, grouped by store, and the headline's rows
and sentences as data, so every rendering states the same figures."""
from dataclasses import dataclass, field

from ..results import OpenLoop, Results, Run
from ..measure.usage import CORE_SATURATED, LOADGEN_BOUND

BASELINE = "nginx-static"
# What each serving path stores its files in, for grouping rows; a path not
# listed is shown under "other".
STORES = {"nginx-static": "disk", "httpd-static": "disk", "nginx-gridfs": "GridFS", "flask": "GridFS",
          "node": "GridFS", "gridfs-fuse": "GridFS", "nginx-cache": "cache", "flask-postgres": "SQL"}
STORE_ORDER = ["disk", "GridFS", "cache", "SQL", "other"]


def files(results: Results) -> list[tuple[str, int]]:
    seen = {}
    for r in results.runs:
        seen.setdefault(r.file, r.size_bytes)
    return sorted(seen.items(), key=lambda item: item[1])


def concurrencies(results: Results) -> list[int]:
    return sorted({r.concurrency for r in results.runs})


def timed_targets(results: Results) -> list[str]:
    timed = {r.target for r in results.runs}
    return [t.name for t in results.targets if t.name in timed]


def grouped(targets: list[str]) -> list[str]:
    return sorted(targets, key=lambda t: (STORE_ORDER.index(STORES.get(t, "other")), targets.index(t)))


def size_label(file: str) -> str:
    return file.removesuffix(".bin")


def store_of(target: str) -> str:
    return STORES.get(target, "other")


def target_ms(run: Run | None) -> float | None:
    """The serving path's own container's CPU ms per request."""
    used = (run.cpu or {}).get(run.target) if run else None
    return used.get("cpu_ms_per_request") if used else None


def open_loop_for(results: Results, target: str, file: str) -> OpenLoop | None:
    """The case's open-loop point at the headline's share (a curve has others)."""
    share = results.timing.get("open_loop_share")
    return next((o for o in results.open_loop if (o.target, o.file) == (target, file)
                 and (not o.share or not share or o.share == share)), None)


def headline_level(results: Results) -> int:
    return max(concurrencies(results))


@dataclass
class HeadlineRow:
    """One target and size at the headline's concurrency. Ratios are to
    nginx-static's figure in the same run (None: no usable baseline)."""
    run: Run
    loop: OpenLoop | None
    rps_ratio: float | None = None
    cpu_ratio: float | None = None
    baseline_flagged: bool = False  # the ratio's nginx-static figure was loadgen-bound or core-saturated
    flags: list[str] = field(default_factory=list)

    @property
    def target(self) -> str:
        return self.run.target

    @property
    def store(self) -> str:
        return store_of(self.run.target)

    @property
    def size(self) -> str:
        return size_label(self.run.file)


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def headline_rows(results: Results) -> list[HeadlineRow]:
    c = headline_level(results)
    rows = []
    for t in grouped(timed_targets(results)):
        for file, _ in files(results):
            run, base = results.run_for(t, file, c), results.run_for(BASELINE, file, c)
            if run is None:
                continue
            loop = open_loop_for(results, t, file)
            if not run.ok:
                rows.append(HeadlineRow(run, loop))
                continue
            base_ok = base is not None and base.ok
            flagged = base_ok and t != BASELINE and bool({LOADGEN_BOUND, CORE_SATURATED} & set(base.flags))
            rows.append(HeadlineRow(run, loop, _ratio(run.rps, base.rps if base_ok else None),
                                    _ratio(target_ms(run), target_ms(base) if base_ok else None), flagged,
                                    list(run.flags)))
    return rows


def ferretdb(results: Results) -> bool:
    return (results.environment.get("server") or {}).get("product") == "FerretDB"


def sentences(results: Results) -> list[str]:
    """Up to three sentences that state what the run found, from its own
    figures; **bold** marks the names a reader looks for."""
    c = headline_level(results) if results.runs else 0
    sizes = files(results)
    if not sizes:
        return []
    largest = sizes[-1][0]
    base = results.run_for(BASELINE, largest, c)
    ok = [r for r in (results.run_for(t, largest, c) for t in timed_targets(results)) if r and r.ok]
    others = [r for r in ok if r.target != BASELINE]
    failed = [r for r in results.runs if not r.ok]
    lines = []
    if base and base.ok and others:
        fastest = max(others, key=lambda r: r.rps)
        cheapest = min((r for r in others if target_ms(r) is not None), key=target_ms, default=None)
        lines.append(f"At {size_label(largest)} and concurrency {c}, the fastest path after nginx-static was "
                     f"**{fastest.target}** ({store_of(fastest.target)}) at "
                     f"{fastest.rps / base.rps:.2f}× nginx-static's requests per second"
                     + (f"; the cheapest in its own CPU per request was **{cheapest.target}** at "
                        f"{target_ms(cheapest) / target_ms(base):.1f}× nginx-static's."
                        if cheapest and target_ms(base) else "."))
    if ferretdb(results):
        lines.append("The database is FerretDB, not MongoDB, so every GridFS row is bound by it: read those "
                     "rows by CPU per request, not by requests per second.")
    if failed:
        lines.append(f"**{len(failed)} case(s) failed** (" + "; ".join(
            f"{r.target} {size_label(r.file)} c={r.concurrency}: {r.error}" for r in failed[:3])
            + ("; ..." if len(failed) > 3 else "") + ").")
    elif not ferretdb(results) and ok:
        lines.append(f"Every case of {len({r.target for r in results.runs})} targets completed without a failed "
                     "request.")
    return lines[:3]
