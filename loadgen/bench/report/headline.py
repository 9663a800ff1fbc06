"""The run's answer, shared by report.md, index.html, the run index and the
exports: which paths were timed, grouped by store, and the headline's rows
and sentences as data, so every rendering states the same figures."""
from dataclasses import dataclass

from .model import text
from ..results import STORE_NOT_RECORDED, OpenLoop, Results, Run
from ..measure.rounds import BASELINE, apart, flagged_baseline

# The order of the stores' groups (each path's store is its compose label
# lab.store, as the run recorded it: Results.store_of); a store not named here
# comes after them, then the paths whose store the run did not record.
STORE_ORDER = ["disk", "GridFS", "cache", "SQL"]


def files(results: Results) -> list[str]:
    """Every file timed, smallest first."""
    sizes = {r.file: r.size_bytes for r in results.runs}
    return sorted(sizes, key=sizes.get)


def concurrencies(results: Results) -> list[int]:
    return sorted({r.concurrency for r in results.runs})


def timed_targets(results: Results) -> list[str]:
    timed = {r.target for r in results.runs}
    return [t.name for t in results.targets if t.name in timed]


def grouped(results: Results, targets: list[str] | None = None) -> list[str]:
    """The targets (the timed ones by default) grouped by store, in
    STORE_ORDER; in their given order within a group."""
    targets = timed_targets(results) if targets is None else targets

    def key(target: str) -> tuple:
        store = results.store_of(target)
        rank = STORE_ORDER.index(store) if store in STORE_ORDER else len(STORE_ORDER) + (store == STORE_NOT_RECORDED)
        return rank, store, targets.index(target)
    return sorted(targets, key=key)


def runs_at(results: Results, file: str, c: int) -> list[Run]:
    """One size's runs at one concurrency, grouped by store: a chart's or a table's rows."""
    return [run for t in grouped(results) if (run := results.run_for(t, file, c)) is not None]


def size_label(file: str) -> str:
    return file.removesuffix(".bin")


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
    nginx-static's figure in the same run (None: no usable baseline): from
    the rounds (results.rounds) the geometric mean of the rounds' ratios,
    `rps` and `cpu` holding each one's interval and round count; from an
    older results.json, the median repetition's over nginx-static's."""
    run: Run
    loop: OpenLoop | None
    rps_ratio: float | None = None
    cpu_ratio: float | None = None
    baseline_flagged: bool = False  # the ratio's nginx-static figure was loadgen-bound or core-saturated
    rps: dict | None = None   # bench.measure.rounds.Ratio as a dict
    cpu: dict | None = None
    store: str = STORE_NOT_RECORDED  # the path's, Results.store_of

    @property
    def target(self) -> str:
        return self.run.target

    @property
    def size(self) -> str:
        return size_label(self.run.file)


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def round_ratios(results: Results, target: str, file: str, c: int) -> dict:
    """The rounds' ratios of one path and case ({} before rounds existed)."""
    return next((r for r in (results.rounds or {}).get("rows", [])
                 if (r["target"], r["file"], r["concurrency"]) == (target, file, c)), {})


def ratio_words(found: dict | None, fallback: float | None = None) -> str:
    """A ratio as the report prints it: '0.16 [0.14, 0.18] (8)', the centre
    and its 95% interval over 8 rounds; '≤ 1.02 (8)' when the baseline
    measured the load generator (the ratio is then at most that); without
    an interval, the round count says why."""
    if not found:
        return "-" if fallback is None else f"{fallback:.2f}"
    n = found["rounds"]
    if found.get("bound"):
        return f"≤ {found['ratio']:.2f} ({n})"
    if found.get("low") is None:
        return f"{found['ratio']:.2f} ({n}, no interval)"
    return f"{found['ratio']:.2f} [{found['low']:.2f}, {found['high']:.2f}] ({n})"


def cpu_condition(results: Results) -> str | None:
    """How the CPU ratios were measured when not in the rounds' own windows
    (BENCH_CPU_DESIGN=same-moment): 'at 50 req/s, all paths at once', each
    size's rate when they differ; None for the rounds' windows."""
    found = results.rounds or {}
    rates = found.get("cpu_rates") if found.get("cpu_design") == "same-moment" else None
    if not rates:
        return None
    sizes = [file for file in files(results) if file in rates] + sorted(set(rates) - set(files(results)))
    if len({rates[f] for f in sizes}) == 1:
        return f"at {rates[sizes[0]]:g} req/s, all paths at once"
    return "at " + ", ".join(f"{rates[f]:g} req/s ({size_label(f)})" for f in sizes) + ", all paths at once"


def headline_rows(results: Results) -> list[HeadlineRow]:
    """A row per timed target and size at the headline's concurrency; a
    failed case's row holds no ratios."""
    c = headline_level(results)
    same_moment = cpu_condition(results) is not None  # no closed-loop CPU stands in for a missing window's
    rows = [HeadlineRow(run, open_loop_for(results, t, file), store=results.store_of(t))
            for t in grouped(results) for file in files(results) if (run := results.run_for(t, file, c))]
    for row in [r for r in rows if r.run.ok]:
        run, t, base = row.run, row.target, results.run_for(BASELINE, row.run.file, c)
        base = base if base is not None and base.ok else None
        found = round_ratios(results, t, run.file, c)
        row.rps, row.cpu = found.get("rps"), found.get("cpu")
        row.rps_ratio = row.rps["ratio"] if row.rps else _ratio(run.rps, base.rps if base else None)
        row.cpu_ratio = (row.cpu["ratio"] if row.cpu else None if same_moment and t != BASELINE
                         else _ratio(target_ms(run), target_ms(base)))
        row.baseline_flagged = base is not None and t != BASELINE and flagged_baseline(base.flags)
    return rows


def fastest_sentence(others: list[HeadlineRow], c: int, condition: str | None = None) -> str:
    """The fastest path after nginx-static (others: the other paths' rows at
    one size), said only as far as the intervals allow; and the cheapest in
    its own CPU (measured under `condition`, cpu_condition's). The headline's
    own ratios, so the sentence and the table agree."""
    ranked = sorted(others, key=lambda h: h.run.rps, reverse=True)
    fastest = ranked[0]
    words = text("fastest", size=size_label(fastest.run.file), c=c, target=fastest.target, store=fastest.store,
                 ratio=ratio_words(fastest.rps, fastest.rps_ratio))
    if len(ranked) > 1 and fastest.rps and not apart(fastest.rps, ranked[1].rps):
        words += text("not_apart", target=ranked[1].target, ratio=ratio_words(ranked[1].rps))
    cheapest = min((h for h in others if h.cpu_ratio is not None), key=lambda h: h.cpu_ratio, default=None)
    words += text("cheapest", condition=f" ({condition})" if condition else "", target=cheapest.target,
                  ratio=ratio_words(cheapest.cpu, cheapest.cpu_ratio)) if cheapest else "."
    return words + (text("headline_rounds") if fastest.rps else "")


def ferretdb(results: Results) -> bool:
    return (results.environment.get("server") or {}).get("product") == "FerretDB"


def sentences(results: Results) -> list[str]:
    """Up to three sentences that state what the run found, from its own
    figures; **bold** marks the names a reader looks for."""
    sizes = files(results)
    if not sizes:
        return []
    c, largest, order = headline_level(results), sizes[-1], timed_targets(results)
    ok = sorted((h for h in headline_rows(results) if h.run.file == largest and h.run.ok),
                key=lambda h: order.index(h.target))  # in the settings' order, which breaks ties
    others = [h for h in ok if h.target != BASELINE]
    failed = [r for r in results.runs if not r.ok]
    lines = []
    if others and len(others) < len(ok):  # nginx-static's row is there to compare with
        lines.append(fastest_sentence(others, c, cpu_condition(results)))
    if ferretdb(results):
        lines.append(text("headline_ferretdb"))
    if failed:
        cases = [f"{r.target} {size_label(r.file)} c={r.concurrency}: {r.error}" for r in failed[:3]]
        lines.append(text("headline_failed", count=len(failed), cases="; ".join(cases + ["..."] * (len(failed) > 3))))
    elif not ferretdb(results) and ok:
        lines.append(text("headline_complete", targets=len({r.target for r in results.runs})))
    return lines[:3]
