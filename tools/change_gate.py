#!/usr/bin/env python3
"""The pull-request gate: did the change make a serving path slower? For
each path the change touches, one A/B run on this machine (tools/change.py): A
built from the lab at BASE_REF, B from this checkout, timed in interleaved
blocks. The gate fails only where a pre-chosen metric's 95% interval lies
entirely beyond AB_THRESHOLD on B's worse side: "slower by more than 5%,
whatever the noise"; it passes only where every such interval lies short
of it on that side (B shown no worse than 5%). Two runs on different
machines or at different times are never compared (tests/test_compose_e2e.py
runs it).

usage: tools/change_gate.py BASE_REF [SERVICE ...]
  SERVICE: the paths to gate; none: those whose folders the change touches
  (git diff BASE_REF...HEAD), or AB_GATE_DEFAULT when it touches machinery
  every path shares (bench, the seed, compose.yaml, .env, local images).
Environment: AB_GATE_METRICS (default "rps": requests per second; "rps
cpu_path" adds the path's CPU per request), AB_GATE_DEFAULT (default
"nginx-gridfs flask"), and tools/change.py's (AB_ENV_FILE, AB_PROJECT, AB_*,
B_CPUS... for a known change). Prints a Markdown summary. Exits, over all
the paths gated (the worst): 0 shown within the threshold; 1 slower beyond
it; 3 inconclusive, not shown safe (the workflow shows it as neutral unless
AB_GATE_INCONCLUSIVE=fail); 2 not measured (no B, B died, a case error,
fewer counted blocks than planned, lost answers)."""
import json
import os
import subprocess
import sys
from pathlib import Path

from lab_compose import ROOT, LabError, run_stopped_at, settings_in
from bench.measure.calibration import blocks_short  # the one rule: a calibration leaves such a case out too

SHARED = ("loadgen/", "seed/", "compose.yaml", ".env", "cpus-2.env", "local-images/", "monitoring/")
# Folders that build more than one path.
SHARED_BY = {"services/python-common/": ("flask", "flask-postgres")}
DOCS = (".md", ".png", ".txt")


def touched_paths(changed: list[str], paths: list[str], default: list[str]) -> list[str]:
    """Pure: the serving paths a change touches, from the files it changed."""
    found = []
    for name in changed:
        if name.endswith(DOCS):
            continue
        if name.startswith(SHARED):
            found += default
        for folder, owners in SHARED_BY.items():
            if name.startswith(folder):
                found += owners
        parts = name.split("/")
        if len(parts) > 2 and parts[0] == "services" and parts[1] in paths:
            found.append(parts[1])
    return [p for p in paths if p in found]


def changed_files(base: str) -> list[str]:
    done = subprocess.run(["git", "diff", "--name-only", f"{base}...HEAD"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise LabError(f"BASE_REF={base}: git diff failed: {done.stderr.strip()[-300:]}")
    return done.stdout.split()


def newest_result(results: Path, before: set[str]) -> Path | None:
    """The ab.json of the run folder made since `before`; not through
    results/latest, a link to it whose name sorts after every run id."""
    made = sorted(p for p in results.glob("*/ab.json") if p.parent.name not in before and not p.parent.is_symlink())
    return made[-1] if made else None


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


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    env = dict(os.environ)
    base, services = argv[0], argv[1:]
    metrics = env.get("AB_GATE_METRICS", "rps").split()
    try:
        lab = settings_in(ROOT / env.get("AB_ENV_FILE", "local.env"))
        paths = (env.get("BENCH_TARGETS") or lab.get("BENCH_TARGETS", "")).split()
        if not services:
            default = env.get("AB_GATE_DEFAULT", "nginx-gridfs flask").split()
            services = touched_paths(changed_files(base), paths, default)
        results = Path(env.get("RESULTS_DIR") or lab.get("RESULTS_DIR", "./results"))
        results = results if results.is_absolute() else ROOT / results
    except (LabError, OSError) as e:
        print(f"ab-gate: error: {e}", file=sys.stderr)
        return 2
    lines = [f"# A/B gate against {base}", ""]
    if not services:
        print("\n".join(lines + ["No serving path is touched: nothing to measure."]))
        return 0
    codes = []
    for service in services:
        before = {p.parent.name for p in results.glob("*/ab.json")}
        # tools/change.py bounds its own run by AB_TIMEOUT; this bounds the rest (build, settings, teardown)
        deadline = float(env.get("AB_TIMEOUT", "3600")) + 1800
        exited = run_stopped_at([sys.executable, str(ROOT / "tools" / "change.py")], deadline, cwd=ROOT,
                                env={**env, "SERVICE": service, "A_REF": base})
        found = newest_result(results, before)
        if found is None:
            code, why = NOT_MEASURED, [f"no A/B result (tools/change.py exited {exited})"]
            lines += [f"## {service}", ""]
        else:
            ab = json.loads(found.read_text())
            code, why = judge_gate(ab, metrics)
            lines += [f"## {service} ({found.parent.name})", ""]
            lines += [f"- {r['case']}, {r['what']}: {r['headline']}" for r in ab.get("rows", [])]
        codes.append(code)
        lines += ["", f"**{service}: {VERDICTS[code]}** (exit {code}, gated on {', '.join(metrics)})"
                  + (":" if why else "."), ""]
        lines += [f"- {w}" for w in why] + ([""] if why else [])
    code = overall(codes)
    lines.append(f"**Gate: {VERDICTS[code]}** (exit {code}).")
    print("\n".join(lines))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
