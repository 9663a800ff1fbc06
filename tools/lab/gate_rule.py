"""The pull-request gate's rule for one ab.json, pure: its exit codes, why a
run cannot be judged, its verdict, and the worst over several paths. The gate
(tools/ci/change_gate.py) acts on it; an A/A calibration (tools/lab/change_calibrate.py,
and the gate's own A/As before its A/B) reports what it answered an unchanged B."""
from bench.measure.calibration import blocks_short  # the one rule: a calibration leaves such a case out too


def gate_metrics(env: dict) -> list[str]:
    """The metrics the gate judges: AB_GATE_METRICS, default requests per second."""
    return env.get("AB_GATE_METRICS", "rps").split()


# The gate's exit codes: what happened, for a workflow to act on
SHOWN_WITHIN = 0    # every gated interval short of the threshold on B's worse side
SLOWER = 1          # a gated interval entirely beyond it: the change made the path worse
NOT_MEASURED = 2    # no B, B died, a case failed or lost blocks: nothing to judge
INCONCLUSIVE = 3    # not shown safe: an interval that reaches past the threshold
VERDICTS = {SHOWN_WITHIN: "the gate passes", SLOWER: "the gate fails", NOT_MEASURED: "not measured",
            INCONCLUSIVE: "inconclusive (not shown within the threshold)"}


def not_measured(ab: dict, metrics: list[str]) -> list[str]:
    """Pure: why one ab.json cannot be judged ([] when it can): the run did
    not end, B (or A) was not timed, a case failed, a case counted fewer
    blocks than planned, a window lost answers (failed: none or cut short),
    or a gated metric has no interval."""
    why = []
    if ab.get("error"):
        why.append(ab["error"])
    if ab.get("status", "complete") != "complete":
        why.append(f"bench's run is {ab['status']}")
    if not ab.get("error") and not ab.get("cases"):
        why.append("no case was timed")
    for case in ab.get("cases", []):
        name = f"{case['file'].removesuffix('.bin')} c={case['concurrency']}"
        if case.get("error"):
            why.append(f"{name}: {case['error']}")
            continue
        if short := blocks_short(ab, case):
            why.append(f"{name}: {short}")
        counted = [blk for blk in case.get("blocks", []) if blk.get("counted", True)]
        lost = {side: sum(blk[key].get("failed") or 0 for blk in counted)
                for side, key in ((ab.get("a", "A"), "a"), (ab.get("b", "B"), "b"))}
        why += [f"{name}: {side} failed {n} requests (no answer, or one cut short)" for side, n in lost.items() if n]
    rows = [r for r in ab.get("rows", []) if r["metric"] in metrics]
    if ab.get("cases") and not rows:
        why.append(f"no row of the gated metrics ({', '.join(metrics)})")
    why += [f"{r['case']} {r['what']}: {r['headline']}" for r in rows if r.get("low") is None]
    return why


def judge_gate(ab: dict, metrics: list[str]) -> tuple[int, list[str]]:
    """Pure: the gate's exit code for one ab.json and the lines that say why."""
    why = not_measured(ab, metrics)
    if why:
        return NOT_MEASURED, why
    rows = [r for r in ab["rows"] if r["metric"] in metrics]
    worse = [f"{ab['b']} {r['case']} {r['what']}: {r['headline']}" for r in rows if r.get("gate_fails")]
    if worse:
        return SLOWER, worse
    unsure = [f"{ab['b']} {r['case']} {r['what']}: {r['headline']}" for r in rows if not r.get("gate_passes")]
    return (INCONCLUSIVE, unsure) if unsure else (SHOWN_WITHIN, [])


def overall(codes: list[int]) -> int:
    """Pure: one exit code for several paths: the worst of them, where not
    measured outranks slower, slower inconclusive, inconclusive passing."""
    rank = [SHOWN_WITHIN, INCONCLUSIVE, SLOWER, NOT_MEASURED]
    return max(codes, key=rank.index, default=SHOWN_WITHIN)

