#!/usr/bin/env python3
"""The pull-request gate: did the change make a serving path slower? For
each path the change touches, one A/B run on this machine (tools/ab.py): A
built from the lab at BASE_REF, B from this checkout, timed in interleaved
blocks. The gate fails only where a pre-chosen metric's 95% interval lies
entirely beyond AB_THRESHOLD on B's worse side: "slower by more than 5%,
whatever the noise". Two runs on different machines or at different times
are never compared, so an unchanged pull request passes unless the A/A
false-alarm rate says otherwise (tests/test_compose_e2e.py runs it).

usage: tools/ab_gate.py BASE_REF [SERVICE ...]
  SERVICE: the paths to gate; none: those whose folders the change touches
  (git diff BASE_REF...HEAD), or AB_GATE_DEFAULT when it touches machinery
  every path shares (bench, the seed, compose.yaml, .env, local images).
Environment: AB_GATE_METRICS (default "rps": requests per second; "rps
cpu_path" adds the path's CPU per request), AB_GATE_DEFAULT (default
"nginx-gridfs flask"), and tools/ab.py's (AB_ENV_FILE, AB_PROJECT, AB_*,
B_CPUS... for a known change). Prints a Markdown summary; exits 1 when the
gate fails, 2 when it could not measure."""
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_compose import ROOT, LabError, settings_in  # noqa: E402

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


def newest_ab(results: Path, before: set[str]) -> Path | None:
    made = sorted(p for p in results.glob("*/ab.json") if p.parent.name not in before)
    return made[-1] if made else None


def judge_gate(ab: dict, metrics: list[str]) -> list[str]:
    """Pure: the rows that fail the gate, in words."""
    return [f"{ab['b']} {r['case']} {r['what']}: {r['headline']}" for r in ab.get("rows", [])
            if r["metric"] in metrics and r.get("gate_fails")]


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
    failures, broken = [], []
    for service in services:
        before = {p.parent.name for p in results.glob("*/ab.json")}
        # tools/ab.py bounds its own run by AB_TIMEOUT; this bounds the rest (build, settings, teardown)
        deadline = float(env.get("AB_TIMEOUT", "3600")) + 1800
        try:
            code = subprocess.run([sys.executable, str(ROOT / "tools" / "ab.py")], cwd=ROOT,
                                  env={**env, "SERVICE": service, "A_REF": base}, timeout=deadline).returncode
        except subprocess.TimeoutExpired:
            code = f"no end within {deadline:.0f} s"
        found = newest_ab(results, before)
        if found is None:
            broken.append(f"{service}: no A/B result (tools/ab.py exited {code})")
            continue
        ab = json.loads(found.read_text())
        fails = judge_gate(ab, metrics)
        failures += fails
        lines += [f"## {service} ({found.parent.name})", ""]
        lines += [f"- {r['case']}, {r['what']}: {r['headline']}" for r in ab.get("rows", [])]
        lines += [f"- **A/B not timed:** {ab['error']}"] if ab.get("error") else []
        lines.append("")
    lines += [f"**Gate fails** (a {', '.join(metrics)} interval entirely beyond the threshold on the worse side):", ""]
    lines += [f"- {f}" for f in failures] or ["None: the gate passes."]
    lines += [f"- **Not measured:** {b}" for b in broken]
    print("\n".join(lines))
    if broken:
        return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
