#!/usr/bin/env python3
"""make ab-calibrate SERVICE=<path> [AB_CALIBRATION_RUNS=20]: how far can
an A/B run's verdicts be trusted on this machine? N A/A runs of the path
(tools/lab/change.py with B unchanged, one after the other, at the A/B's own
settings), read together per case and metric (bench/measure/calibration.py):
whether the signed-rank p-values of an unchanged B are uniform (a
Kolmogorov-Smirnov p and a QQ table), whether runs differ by more than each
run's interval allows (Cochran's Q, I^2), the between-run sd of the
estimates and 2.8 x it (how far two runs' ratios may differ), and the false
alarms with their Clopper-Pearson 95% interval. One A/A run is not a
calibration: 0 false alarms of 6 still allows 46%.

Writes results/calibration-<SERVICE>-<UTC time>/calibration.json and
calibration.md, after every run (status "incomplete" until the last), so a
calibration cut short keeps what it measured (SIGTERM or SIGINT: passed on
to the tools/lab/change.py running, its project taken down, then exit 2). The
pull-request gate runs a few of these before its A/B (calibrate, as a
library: tools/ci/change_gate.py). A run that gives no ab.json,
or one whose ab.json has an error, is listed as not measured, with why; so
is a case that counted fewer blocks than planned, which the gate calls not
measured too (bench.measure.calibration.blocks_short, the rule both read).

Environment: SERVICE (required), AB_CALIBRATION_RUNS (default 20),
AB_TIMEOUT (seconds per run, as tools/lab/change.py reads it; this adds 30 minutes
for its build and teardown, as tools/ci/change_gate.py does; past it, SIGTERM, so
that change.py takes its project down, and SIGKILL two minutes later), and tools/lab/change.py's
own (AB_ENV_FILE, AB_PROJECT, AB_FILES, AB_BLOCKS...). A change to B
(B_IMAGE, B_CONTEXT, B_REF, B_CPUS, B_ENV, B_ARG) or A_REF is refused:
this is an A/A. Exits 0 when every case-metric's KS p is at least 0.01
and at most 5% of the case-metrics got a verdict, 1 when not, 2 when
fewer than 3 runs were measured (or the settings are wrong).

change_calibrate.py --report results/calibration-<path>-<id> writes a
calibration's two files again from the runs it read (the run ids in its
calibration.json, their ab.json, or ab.json.gz as results/evidence keeps
them, in the folder beside it), so an older calibration gets what this
version reports; it measures nothing and starts no Docker. Exits as the
calibration did, or 2 when an ab.json it read is gone."""
import gzip
import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from change import CHANGES
from gate_rule import NOT_MEASURED, VERDICTS, gate_metrics, judge_gate
from lab_compose import ROOT, LabError, Stopped, newest_result, number, results_base, results_dir, run_stopped_at, \
    settings_in
from bench.measure import calibration

# Whatever makes B differ from A: refused, since an A/A is what is measured
REFUSED = (*CHANGES, "B_ARG", "A_REF")
# The A/B settings a calibration holds, with bench's defaults (bench/settings.py; change.py's for the restarts)
SETTINGS = {"AB_FILES": "1KB 1MB", "AB_CONCURRENCY": "100", "AB_BLOCKS": "12", "AB_DESIGN": "duet",
            "AB_WINDOW": "3", "AB_WARMUP": "2", "AB_THRESHOLD": "5", "AB_RESTART_TWINS": "every-block"}
# tools/lab/change.py bounds its own run by AB_TIMEOUT; this bounds the rest (build, settings, teardown), the gate's too
SLACK_S = 1800
STAMP = "%Y%m%dT%H%M%SZ"


def refused_changes(env: dict) -> list[str]:
    """Pure: the variables set that would make B differ from A."""
    return [name for name in REFUSED if env.get(name, "").strip()]


def change_settings(env: dict, lab: dict) -> dict:
    """Pure: the A/B settings as the run reads them: the shell's value where
    it sets one (Compose lets the shell override the env file), else the env
    file's, else bench's default (an empty value is the default too)."""
    found = {}
    for name, default in SETTINGS.items():
        value = env[name] if name in env else lab.get(name, "")
        found[name] = value.strip() or default
    # tools/lab/change.py passes bench its own choice: the shell's, else every-block (the env file's is not read)
    found["AB_RESTART_TWINS"] = env.get("AB_RESTART_TWINS", "").strip() or SETTINGS["AB_RESTART_TWINS"]
    return found


def settings_record(service: str, variables: dict) -> dict:
    """Pure: the settings in the form calibration.settings_of gives an ab.json's."""
    return {"path": service, "files": variables["AB_FILES"].split(),
            "concurrency": sorted({int(c) for c in variables["AB_CONCURRENCY"].split()}),
            "blocks": int(variables["AB_BLOCKS"]), "design": variables["AB_DESIGN"],
            "window": int(variables["AB_WINDOW"]), "warmup": int(variables["AB_WARMUP"]),
            "threshold": float(variables["AB_THRESHOLD"]) / 100,
            "restart_twins": variables["AB_RESTART_TWINS"] == "every-block"}


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _pct(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value * 100:.{digits}f}%"


def _span(low: float, high: float) -> str:
    return f"{low * 100:.1f}-{high * 100:.1f}%"


def detectable_words(s: dict) -> str:
    """A case-metric's detectable change at 80% power over the runs: the
    median [min-max], and the largest counting floor where there is one."""
    if s.get("detectable_median") is None:
        return "-"
    floor = s.get("counting_floor_max")
    return (f"{_pct(s['detectable_median'])} [{_span(s['detectable_min'], s['detectable_max'])}]"
            + (f", floor ≤{_pct(floor, 2)}" if floor else ""))


def resolves_items(stats: dict) -> list[str]:
    """Pure: whether a run resolves the A/B's threshold, per case-metric: the
    median of the runs' detectable changes (80% power) at most AB_THRESHOLD."""
    threshold = stats.get("threshold")
    judged = [s for s in stats["case_metrics"] if s.get("resolves_threshold") is not None]
    if threshold is None or not judged:
        return []
    yes = sum(1 for s in judged if s["resolves_threshold"])
    return [f"- What a run resolves (the change it finds 80% of the time from its own blocks, against AB_THRESHOLD): "
            f"±{threshold * 100:g}% in **{yes} of {len(judged)} case-metrics**."] + [
        f"  - {s['case']} {s['metric']}: a run resolves ±{threshold * 100:g}%: "
        f"{'yes' if s['resolves_threshold'] else '**no**'} (median {_pct(s['detectable_median'])}, "
        f"{_span(s['detectable_min'], s['detectable_max'])} by run"
        + (f"; counting floor at most {_pct(s['counting_floor_max'], 2)}" if s.get("counting_floor_max") else "")
        + ")" for s in judged]


def machine_words(machine: dict | None) -> str:
    if not machine:
        return "not known (no run measured)"
    return (f"{machine.get('cpu_model', '?')}, {machine.get('host_cores', '?')} cores, "
            f"kernel {machine.get('kernel', '?')}")


def render(doc: dict) -> str:
    """Pure: calibration.md from calibration.json's content."""
    stats, settings = doc["statistics"], doc["settings"]
    code, why = doc["verdict"]["exit"], doc["verdict"]["why"]
    measured = stats["measured"]
    words = {calibration.PASSES: "passes", calibration.FAILS: "fails", calibration.NOT_MEASURED: "not measured"}
    lines = [f"# A/A calibration of {doc['path']}: {doc['id']}", "",
             f"- **{len(measured)} A/A runs measured of {doc['planned_runs']}**"
             + (" (incomplete: the calibration was cut short)" if doc["status"] != "complete" else "")
             + f"; {stats['runs'] - len(measured)} not measured.",
             f"- Settings: AB_FILES={' '.join(settings['files'])}, AB_CONCURRENCY="
             f"{' '.join(map(str, settings['concurrency']))}, AB_BLOCKS={settings['blocks']}, "
             f"AB_DESIGN={settings['design']}, AB_WINDOW={settings['window']}, AB_THRESHOLD="
             f"{settings['threshold'] * 100:g}, twins "
             + ("restarted before each block." if settings["restart_twins"] else "kept for the run."),
             f"- Machine: {machine_words(doc.get('machine'))}.",
             f"- **Calibration {words[code]}** (exit {code})" + (":" if why else ": every KS p at least "
                                                                 f"{calibration.KS_FLOOR:g}, false alarms at most "
                                                                 f"{calibration.ALARM_CEILING:.0%}.")]
    lines += [f"  - {w}" for w in why]
    found, runs = stats["false_alarms"], stats["runs_with_alarm"]
    if found["rows"]:
        lines.append(f"- False alarms (a faster, slower, cheaper or costlier verdict of an unchanged B): "
                     f"**{found['alarms']} of {found['rows']} case-metrics** ({_pct(found['rate'])}; 95% interval "
                     f"{_pct(found['low'])}-{_pct(found['high'])}); runs with any: {runs['alarms']} of "
                     f"{runs['rows']} (95% interval {_pct(runs['low'])}-{_pct(runs['high'])}).")
    lines += resolves_items(stats)
    short = stats.get("cases_short_of_blocks", 0)
    lines.append(f"- {short} case-run{'' if short == 1 else 's'} left out: fewer blocks counted than planned "
                 "(what the gate calls not measured, exit 2).")
    gate = doc.get("gate")
    if gate and gate["runs"]:
        counts = ", ".join(f"{gate['exits'].count(c)} exit {c} ({VERDICTS[c]})" for c in sorted(set(gate["exits"])))
        lines.append(f"- The pull-request gate (`AB_GATE_METRICS={' '.join(gate['metrics'])}`) passes an unchanged B "
                     f"(exit 0 or 3) in **{gate['passes']} of {gate['runs']} runs**: {counts}.")
    missed = stats["not_measured"] + stats["cases_not_measured"]
    if missed:
        lines += ["", "## Not measured", ""]
        lines += [f"- {m.get('run_id') or 'run ' + str(m.get('attempt', '?'))}"
                  + (f" {m['case']} {m['metric']}" if m.get("case") else "") + f": {m['why']}" for m in missed]
    if stats["case_metrics"]:
        lines += ["", "## Per case and metric", "",
                  "KS p: Kolmogorov-Smirnov of the (randomised) signed-rank p-values against uniform; below "
                  f"{calibration.KS_FLOOR:g} the test's promise does not hold here. Q and I²: whether the runs' "
                  "estimates differ by more than their own intervals allow (I² near 0: they do not). sd: of the "
                  "runs' log(B/A) estimates; 2.8 x sd: how far two runs may differ, 95% of the time (0.05 on "
                  "the log scale is about 5%). False alarms: with their exact (Clopper-Pearson) 95% upper bound. "
                  "Detectable: the change each run could find 80% of the time from its own blocks, median [range] "
                  "over the runs, with the largest counting floor (a bound from counting whole answers) where there "
                  "is one.",
                  "", "| case | metric | runs | KS p | Q (df), p | I² | between-run sd | 2.8 x sd | false alarms "
                  "(bound) | detectable (80% power), median [range] |", "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for s in stats["case_metrics"]:
            het = s["heterogeneity"]
            q = f"{het['q']:.1f} ({het['df']}), {_p(het['p'])}" if het else "-"
            sd = f"{s['between_run_sd']:.4f}" if s["between_run_sd"] is not None else "-"
            rep = f"{s['repeatability_pct']:.1f}%" if s["repeatability_pct"] is not None else "-"
            fa = s["false_alarms"]
            lines.append(f"| {s['case']} | {s['metric']} | {s['runs']} | {_p((s['ks'] or {}).get('p'))} | {q} | "
                         f"{_pct(het['i2'], 0) if het else '-'} | {sd} | {rep} | {fa['alarms']} of {fa['rows']} "
                         f"(≤{_pct(fa['high'])}) | {detectable_words(s)} |")
        lines += ["", "## QQ: the sorted p-values against the uniform's quantiles", "",
                  "With nothing changed the p-values follow the expected column (i/(n+1)); piled near 0, the "
                  "verdicts fire more often than they promise. The raw p-values read a little above the randomised "
                  "ones: the signed-rank test's are discrete, and KS reads the randomised ones."]
        for s in stats["case_metrics"]:
            n = s["runs"]
            lines += ["", f"### {s['case']}, {s['metric']}", "", "| i | expected | p | p randomised |",
                      "|--:|--:|--:|--:|"]
            lines += [f"| {i} | {i / (n + 1):.3f} | {p:.3f} | {r:.3f} |"
                      for i, (p, r) in enumerate(zip(sorted(s["p"]), sorted(s["p_randomised"])), 1)]
    return "\n".join(lines) + "\n"


def write(out: Path, doc: dict) -> None:
    (out / "calibration.json").write_text(json.dumps(doc, indent=2) + "\n")
    (out / "calibration.md").write_text(render(doc))


def gate_tally(attempts: list[dict], aa_runs: list[dict], metrics: list[str]) -> dict:
    """Pure: what the pull-request gate (tools/ci/change_gate.py, on `metrics`)
    would have answered each A/A: it passes an unchanged B when it exits 0
    (shown within the threshold) or 3 (inconclusive, not a failure by
    default); a run with no ab.json counts as not measured (2)."""
    exits = {ab.get("run_id"): judge_gate(ab, metrics)[0] for ab in aa_runs}
    codes = [exits.get(a.get("run_id"), NOT_MEASURED) for a in attempts]
    return {"metrics": metrics, "exits": codes, "runs": len(codes),
            "passes": sum(code in (0, 3) for code in codes)}


def no_ab_json(attempts: list[dict]) -> list[dict]:
    """Pure: the attempts that gave no readable ab.json, as calibration.summarise names them."""
    return [{"attempt": a["attempt"], "run_id": None, "why": a["why"]} for a in attempts if a.get("why")]


def document(calibration_id: str, service: str, variables: dict, planned: int, attempts: list[dict],
             aa_runs: list[dict], started: str, complete: bool, gate_metrics: tuple[str, ...] = ("rps",)) -> dict:
    """Pure: calibration.json's content from the runs so far."""
    stats = calibration.summarise(aa_runs, no_ab_json(attempts))
    settings = settings_record(service, variables)
    if stats["settings"]:  # what the runs themselves say, where ab.json says it
        settings.update({k: v for k, v in stats["settings"].items() if v is not None})
    code, why = calibration.judge(stats)
    return {"kind": "A/A calibration", "id": calibration_id, "path": service,
            "status": "complete" if complete else "incomplete", "started_at": started,
            "finished_at": datetime.now(timezone.utc).strftime(STAMP), "planned_runs": planned,
            "settings": settings, "variables": variables, "machine": stats["machine"], "attempts": attempts,
            "run_ids": stats["measured"], "statistics": stats, "verdict": {"exit": code, "why": why},
            "gate": gate_tally(attempts, aa_runs, list(gate_metrics))}


def read_again(doc: dict, aa_runs: list[dict], now: str) -> dict:
    """Pure: calibration.json's content again from the same runs' ab.json, read
    by this version (what it adds, a rule it changed); what the runs were,
    when it started and finished, its settings stay as they were."""
    stats = calibration.summarise(aa_runs, no_ab_json(doc["attempts"]))
    code, why = calibration.judge(stats)
    again = {**doc, "run_ids": stats["measured"], "statistics": stats, "verdict": {"exit": code, "why": why},
             "read_again_at": now}
    if doc.get("gate"):
        again["gate"] = gate_tally(doc["attempts"], aa_runs, doc["gate"]["metrics"])
    return again


def run_ab_json(results: Path, run_id: str) -> Path | None:
    """A run's ab.json in the results folder, or the ab.json.gz results/evidence keeps; None when neither."""
    return next((p for p in (results / run_id / "ab.json", results / run_id / "ab.json.gz") if p.is_file()), None)


def report(out: Path) -> int:
    """--report: a calibration's files written again from its runs' ab.json
    (read_again), nothing measured, no Docker. 2 when calibration.json or an
    ab.json it read cannot be read (nothing written then)."""
    try:
        doc = json.loads((out / "calibration.json").read_text())
        aa_runs, gone = [], []
        for attempt in doc["attempts"]:
            if not attempt.get("run_id") or attempt.get("why"):
                continue  # no ab.json, or an unreadable one: named as not measured, as it was
            found = run_ab_json(out.parent, attempt["run_id"])
            if found is None:
                gone.append(attempt["run_id"])
                continue
            text = gzip.decompress(found.read_bytes()) if found.suffix == ".gz" else found.read_bytes()
            aa_runs.append({"run_id": attempt["run_id"], **json.loads(text)})
    except (OSError, ValueError, KeyError) as e:
        print(f"ab-calibrate --report: {out}: cannot be read again ({type(e).__name__}: {e})", file=sys.stderr)
        return calibration.NOT_MEASURED
    if gone:
        print(f"ab-calibrate --report: {out}: no ab.json of {len(gone)} run(s) it read in {out.parent}: "
              f"{' '.join(gone)}; nothing written", file=sys.stderr)
        return calibration.NOT_MEASURED
    doc = read_again(doc, aa_runs, datetime.now(timezone.utc).strftime(STAMP))
    write(out, doc)
    print(render(doc), flush=True)
    return doc["verdict"]["exit"]


CHANGE = [sys.executable, str(ROOT / "tools" / "lab" / "change.py")]


def run_change(env: dict, service: str, deadline: float) -> int | str:
    """One run of tools/lab/change.py (CHANGE), attached (bench's plan and time
    left show): an A/A here, the gate's A/B with A_REF in `env`."""
    return run_stopped_at(CHANGE, deadline, cwd=ROOT, env={**env, "SERVICE": service})


def calibrate(env: dict, service: str, planned: int, results: Path, out: Path, variables: dict,
              run_one=run_change) -> dict:
    """The N runs, one after another, and calibration.json and .md after each."""
    metrics = tuple(gate_metrics(env))
    deadline = float(env.get("AB_TIMEOUT", "3600")) + SLACK_S
    started = datetime.now(timezone.utc).strftime(STAMP)
    attempts: list[dict] = []
    aa_runs: list[dict] = []
    took: list[float] = []
    for k in range(1, planned + 1):
        left = f"; about {duration(sum(took) / len(took) * (planned - k + 1))} left" if took else ""
        print(f"[ab-calibrate] run {k} of {planned} ({service}, A/A){left}", flush=True)
        before = {p.parent.name for p in results.glob("*/ab.json")}
        began = time.monotonic()
        stopped = None
        try:
            exited = run_one(env, service, deadline)
        except Stopped as e:  # this run recorded as it ended, then no more: the caller stops
            stopped, exited = e, str(e)
        took.append(time.monotonic() - began)
        attempt = {"attempt": k, "exit": exited, "seconds": round(took[-1], 1)}
        found = newest_result(results, before)
        if found is None:
            attempt.update(run_id=None, why=f"no ab.json (tools/lab/change.py exited {exited})")
        else:
            attempt["run_id"] = found.parent.name
            try:
                ab = json.loads(found.read_text())
                ab.setdefault("run_id", found.parent.name)
                aa_runs.append(ab)
            except (OSError, ValueError) as e:
                attempt["why"] = f"{found}: not readable ({e})"
        attempts.append(attempt)
        doc = document(out.name, service, variables, planned, attempts, aa_runs, started,
                       k == planned and not stopped, metrics)
        write(out, doc)
        named = attempt.get("why") or next((m["why"] for m in doc["statistics"]["not_measured"]
                                            if attempt["run_id"] and m.get("run_id") == attempt["run_id"]), "")
        print(f"[ab-calibrate] run {k} of {planned}: "
              + (f"{attempt['run_id']} " if attempt.get("run_id") else "")
              + (f"not measured: {named}" if named else "measured") + f" ({duration(took[-1])})", flush=True)
        if stopped:
            raise stopped
    return doc


def main(argv: list[str] = ()) -> int:
    if argv:
        if argv[0] != "--report" or len(argv) != 2:
            print("usage: change_calibrate.py [--report results/calibration-<path>-<id>]", file=sys.stderr)
            return calibration.NOT_MEASURED
        return report(Path(argv[1]))
    env = dict(os.environ)
    service = env.get("SERVICE", "").strip()
    try:
        if not service:
            raise LabError("SERVICE: required, the serving path to calibrate (make ab-calibrate SERVICE=flask)")
        for name in refused_changes(env):
            raise LabError(f"{name}={env[name]!r}: a calibration is an A/A run, B unchanged; unset {name} "
                           "(make ab measures a change)")
        planned = int(number(env, "AB_CALIBRATION_RUNS", "20", 1, 1000, whole=True))
        env_file = ROOT / env.get("AB_ENV_FILE", "local.env")
        if not env_file.exists():
            raise LabError(f"AB_ENV_FILE: {env_file} does not exist (make local-images writes local.env; "
                           "AB_ENV_FILE=.env runs official images)")
        lab = settings_in(env_file)
        paths = lab.get("BENCH_TARGETS", "").split()
        if service not in paths:
            raise LabError(f"SERVICE={service!r}: expected one of the serving paths in BENCH_TARGETS: "
                           f"{' '.join(paths)}")
        variables = change_settings(env, lab)
        settings_record(service, variables)  # a value bench would refuse fails here, before hours of runs
        results = results_base(env, lab)
        _, out = results_dir(env, lab, f"calibration-{service}")
    except (LabError, OSError, ValueError) as e:
        print(f"ab-calibrate: error: {e}", file=sys.stderr)
        return calibration.NOT_MEASURED
    print(f"[ab-calibrate] {planned} A/A runs of {service} into {out}", flush=True)
    try:
        doc = calibrate(env, service, planned, results, out, variables)
    except Stopped as e:
        print(f"ab-calibrate: {e}; what was measured is in {out}", file=sys.stderr)
        return calibration.NOT_MEASURED
    print(render(doc), flush=True)
    return doc["verdict"]["exit"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
