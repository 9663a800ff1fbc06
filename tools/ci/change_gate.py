#!/usr/bin/env python3
"""The pull-request gate: did the change make a serving path slower? For
each path the change touches, one A/B run on this machine (tools/lab/change.py): A
built from the lab at BASE_REF, B from this checkout, timed in interleaved
blocks. The gate fails only where a pre-chosen metric's 95% interval lies
entirely beyond AB_THRESHOLD on B's worse side: "slower by more than 5%,
whatever the noise"; it passes only where every such interval lies short
of it on that side (B shown no worse than 5%). Two runs on different
machines or at different times are never compared (tests/test_compose_e2e.py
runs it). Before each A/B, AB_GATE_CALIBRATION_RUNS A/As of the path on this
machine (tools/lab/change_calibrate.py's runs and calibration.json): the summary
quotes their false alarms and the gate's answer to each, which never move
its exit. SIGTERM or SIGINT is passed on to the tools/lab/change.py running,
its project taken down, and the gate ends not measured (2).

usage: tools/ci/change_gate.py BASE_REF [SERVICE ...]
  SERVICE: the paths to gate; none: those whose folders the change touches
  (git diff BASE_REF...HEAD), or AB_GATE_DEFAULT when it touches machinery
  every path shares (bench, the seed, compose.yaml, .env, local images).
Environment: AB_GATE_METRICS (default "rps": requests per second; "rps
cpu_path" adds the path's CPU per request), AB_GATE_DEFAULT (default
"nginx-gridfs flask"), AB_GATE_CALIBRATION_RUNS (A/As per path, default
CALIBRATION_RUNS below; 0: none), and tools/lab/change.py's (AB_ENV_FILE, AB_PROJECT, AB_*,
B_CPUS... for a known change). Prints a Markdown summary (and appends it
to GITHUB_STEP_SUMMARY when set, as in a GitHub job). Exits, over all
the paths gated (the worst): 0 shown within the threshold; 1 slower beyond
it; 3 inconclusive, not shown safe (the workflow shows it as neutral unless
AB_GATE_INCONCLUSIVE=fail); 2 not measured (no B, B died, a case error,
fewer counted blocks than planned, lost answers)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import change_calibrate
from gate_rule import NOT_MEASURED, VERDICTS, gate_metrics, judge_gate, overall
from lab_compose import ROOT, LabError, Stopped, newest_result, number, results_base, results_dir, settings_in
from bench.measure import calibration

SHARED = ("loadgen/", "compose.yaml", ".env", "cpus-2.env", "local-images/", "monitoring/")
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


# The A/As of each gated path before its A/B, on this runner in this job (AB_GATE_CALIBRATION_RUNS). One costs
# about 4m10s-4m18s of bench at the defaults (two sizes, 12 blocks, docs/ab.md) and a minute or so of settings
# check and teardown (its images are built once, for the first): 2 add about 10-12 minutes a path, 20-25 for
# the default two, in the workflow's 120. Fewer than calibration.MIN_RUNS give no KS p (aa_lines says so).
CALIBRATION_RUNS = 2


def calibration_runs(env: dict) -> int:
    """AB_GATE_CALIBRATION_RUNS: the A/As of each path before its A/B, 0 for
    none; empty is the default (the workflow passes an unset repository
    variable so), else a LabError naming it."""
    given = {"AB_GATE_CALIBRATION_RUNS": env.get("AB_GATE_CALIBRATION_RUNS", "").strip() or str(CALIBRATION_RUNS)}
    return int(number(given, "AB_GATE_CALIBRATION_RUNS", "", 0, 100, whole=True))


def calibrate_here(env: dict, lab: dict, service: str, runs: int, results: Path) -> dict:
    """`runs` A/As of `service` on this machine at the A/B's settings, by
    change_calibrate's own loop: results/calibration-<service>-<time>/,
    which the A/B's page then quotes too. B unchanged: the change (B_*,
    A_REF) is left out of their environment."""
    aa_env = {name: value for name, value in env.items() if name not in change_calibrate.REFUSED}
    variables = change_calibrate.change_settings(aa_env, lab)
    change_calibrate.settings_record(service, variables)  # a value bench would refuse: ValueError, before a run
    _, out = results_dir(aa_env, lab, f"calibration-{service}")
    print(f"[ab-gate] {runs} A/A run{'' if runs == 1 else 's'} of {service} on this machine before its A/B, "
          f"into {out}", flush=True)
    return change_calibrate.calibrate(aa_env, service, runs, results, out, variables)


def aa_lines(doc: dict | None, runs: int, trouble: str = "") -> list[str]:
    """Pure: what the A/As on this runner showed, for the gate's summary:
    `doc` is their calibration.json (None: none ran, `trouble` says why when
    `runs` asked for some). Honest about what so few runs can say: the false
    alarms with their Clopper-Pearson bound and the gate's answer to each;
    below calibration.MIN_RUNS measured, no KS p. None of it moves the gate's exit."""
    if not runs:
        return ["- **No A/A on this runner** (AB_GATE_CALIBRATION_RUNS=0): how often an unchanged B gets a verdict "
                "here was not measured."]
    if doc is None:
        return [f"- **No A/A on this runner**: {runs} asked, none run: {trouble}."]
    stats, gate = doc["statistics"], doc["gate"]
    measured, found = len(stats["measured"]), stats["false_alarms"]
    lines = [f"- **{doc['planned_runs']} A/A run{'' if doc['planned_runs'] == 1 else 's'} on this runner** before "
             f"this A/B (AB_GATE_CALIBRATION_RUNS; {doc['id']}): {measured} measured"
             + (", cut short" if doc["status"] != "complete" else "") + "."]
    if found["rows"]:
        lines.append(f"- False alarms of an unchanged B: **{found['alarms']} of {found['rows']} case-metrics** "
                     f"(every metric judged, gated or not; 95% Clopper-Pearson interval {found['low']:.1%}-"
                     f"{found['high']:.1%}: the rate here may be as high as {found['high']:.1%}).")
    else:
        lines.append("- No case-metric of an A/A was measured: no false alarms to count.")
    answers = "; ".join(f"{code}, {VERDICTS[code]}" for code in gate["exits"])
    lines.append(f"- The gate's own answer to each A/A (on {', '.join(gate['metrics'])}), exit: {answers}. It passes "
                 f"an unchanged B (0 or 3) in {gate['passes']} of {gate['runs']}.")
    if stats["ks_min_p"] is None:
        lines.append(f"- No KS p: whether the p-values are uniform (whether the 5% a verdict promises holds here) "
                     f"needs at least {calibration.MIN_RUNS} measured runs of a case-metric; {measured} "
                     f"run{'' if measured == 1 else 's'} measured.")
    else:
        code, why = doc["verdict"]["exit"], doc["verdict"]["why"]
        lines.append(f"- Lowest KS p of the p-values: {stats['ks_min_p']:.3g} over {measured} runs (so few find only "
                     f"a gross departure from uniform); the calibration's own exit {code}"
                     + (f": {'; '.join(why)}." if why else "."))
    return lines


def gate_one(env: dict, lab: dict, base: str, service: str, metrics: list[str], runs: int,
             results: Path) -> tuple[int, list[str]]:
    """`runs` A/As of one path on this runner, then its A/B (A built from
    `base`, B from this checkout): the A/B's exit code and its summary."""
    doc, trouble = None, ""
    if runs:
        try:
            doc = calibrate_here(env, lab, service, runs, results)
        except (LabError, OSError, ValueError) as e:
            trouble = str(e)
    before = {p.parent.name for p in results.glob("*/ab.json")}
    # tools/lab/change.py bounds its own run by AB_TIMEOUT; this bounds the rest (build, settings, teardown)
    deadline = float(env.get("AB_TIMEOUT", "3600")) + change_calibrate.SLACK_S
    exited = change_calibrate.run_change({**env, "A_REF": base}, service, deadline)
    found = newest_result(results, before)
    if found is None:
        code, why = NOT_MEASURED, [f"no A/B result (tools/lab/change.py exited {exited})"]
        lines = [f"## {service}", ""]
    else:
        ab = json.loads(found.read_text())
        code, why = judge_gate(ab, metrics)
        lines = [f"## {service} ({found.parent.name})", ""]
        lines += [f"- {r['case']}, {r['what']}: {r['headline']}" for r in ab.get("rows", [])]
    lines += ["", f"**{service}: {VERDICTS[code]}** (exit {code}, gated on {', '.join(metrics)})"
              + (":" if why else "."), ""]
    lines += [f"- {w}" for w in why] + ([""] if why else [])
    return code, lines + ["A/A on this runner, which the exit above does not count:", "",
                          *aa_lines(doc, runs, trouble), ""]


def publish(lines: list[str], env: dict) -> None:
    """The summary, printed, and appended to GITHUB_STEP_SUMMARY where GitHub
    sets it: the job's page gets it alone, not the A/As' and A/Bs' compose
    output that precede it in the step's log."""
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if env.get("GITHUB_STEP_SUMMARY"):
        try:
            with open(env["GITHUB_STEP_SUMMARY"], "a") as summary:
                summary.write(text)
        except OSError as e:
            print(f"ab-gate: warning: GITHUB_STEP_SUMMARY not written: {e}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    env = dict(os.environ)
    base, services = argv[0], argv[1:]
    metrics = gate_metrics(env)
    try:
        runs = calibration_runs(env)
        lab = settings_in(ROOT / env.get("AB_ENV_FILE", "local.env"))
        paths = (env.get("BENCH_TARGETS") or lab.get("BENCH_TARGETS", "")).split()
        if not services:
            default = env.get("AB_GATE_DEFAULT", "nginx-gridfs flask").split()
            services = touched_paths(changed_files(base), paths, default)
        results = results_base(env, lab)
    except (LabError, OSError) as e:
        print(f"ab-gate: error: {e}", file=sys.stderr)
        return 2
    lines = [f"# A/B gate against {base}", ""]
    if not services:
        publish(lines + ["No serving path is touched: nothing to measure."], env)
        return 0
    lines += [f"{runs} A/A run{'' if runs == 1 else 's'} of each path on this runner before its A/B "
              "(AB_GATE_CALIBRATION_RUNS)." if runs else "No A/A on this runner (AB_GATE_CALIBRATION_RUNS=0).", ""]
    codes = []
    for k, service in enumerate(services):
        try:
            code, found = gate_one(env, lab, base, service, metrics, runs, results)
        except Stopped as e:  # a cancelled job: its child is down; the paths left are not measured
            codes.append(NOT_MEASURED)
            lines += [f"## {service}", "", f"**{service}: {VERDICTS[NOT_MEASURED]}** (exit {NOT_MEASURED}): "
                      f"stopped, {e}.", ""]
            lines += [f"**{left}: not gated** (stopped before it)." for left in services[k + 1:]]
            lines += [""] if services[k + 1:] else []
            break
        codes.append(code)
        lines += found
    code = overall(codes)
    lines.append(f"**Gate: {VERDICTS[code]}** (exit {code}).")
    publish(lines, env)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
