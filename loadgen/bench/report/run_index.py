"""results/index.html: every run in the results directory, newest first,
with its date, the settings that differ from .env's defaults, its status
and headline, linking to its page. `python -m bench index RESULTS_DIR
[ENV_FILE]`; run.py rewrites it at the end of every run."""
import json
import os
import sys
from html import escape
from pathlib import Path

from ..env_file import read_env_file
from .headline import sentences
from .html import CSS, PAGE, inline
from ..results import Results

INDEX = "index.html"


def find_defaults(results_dir: Path, env_file: Path | None = None) -> tuple[dict, str]:
    """.env's values and where they came from: the file given, BENCH_ENV_FILE,
    or the .env beside results/ (the repository's, on the host). Inside the
    bench container there is none: then ({}, why) and the index shows the
    settings that vary between the listed runs instead."""
    for candidate in (env_file, os.environ.get("BENCH_ENV_FILE"), results_dir.resolve().parent / ".env"):
        if candidate and Path(candidate).is_file():
            return read_env_file(candidate), str(candidate)
    return {}, ""


def _entry(run_dir: Path) -> dict | None:
    path = run_dir / "results.json"
    if not path.is_file():
        return None
    entry = {"name": run_dir.name, "link": f"{run_dir.name}/{PAGE}" if (run_dir / PAGE).exists() else
             f"{run_dir.name}/report.md" if (run_dir / "report.md").exists() else f"{run_dir.name}/results.json"}
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return entry | {"date": "", "status": f"unreadable: {e}", "bad": True, "params": {}, "headline": ""}
    if "runs" not in doc:  # a resilience or overload run (tools/lab/resilience.py, tools/lab/overload.py)
        kind = next((k for k in ("resilience", "overload") if k in doc), "other")
        rows = doc.get(kind) or []
        verdicts = [r.get("verdict", "") for r in rows if isinstance(r, dict)]
        right = sum(v.startswith("right") for v in verdicts)
        return entry | {"date": doc.get("started", ""), "status": kind, "bad": bool(doc.get("failed")),
                        "params": {"env file": doc.get("env_file", "?")},
                        "headline": f"{kind}: {len(rows)} rows, {right} judged right"
                                    + (f", {len(doc['failed'])} not measured" if doc.get("failed") else "")}
    results = Results.from_dict(doc)
    status = results.status + (", with failures" if results.status == "complete" and results.failed else "")
    return entry | {"date": results.started_at, "status": status,
                    "bad": results.status != "complete" or results.failed, "params": results.parameters,
                    "headline": " ".join(sentences(results))}


def render_index(results_dir: Path, env_file: Path | None = None) -> str:
    entries = [e for d in sorted(results_dir.iterdir(), reverse=True)
               if d.is_dir() and not d.is_symlink() and (e := _entry(d))]
    defaults, source = find_defaults(results_dir, env_file)
    if defaults:
        note = f"Settings: those that differ from <code>{escape(source)}</code>."
        differs = lambda p: {k: v for k, v in p.items() if k in defaults and defaults[k] != v}  # noqa: E731
    else:
        note = "Settings: no .env was found beside the results, so those that vary between the runs listed here."
        keys = {k for e in entries for k in e["params"]}
        varying = {k for k in keys if len({e["params"].get(k) for e in entries}) > 1}
        differs = lambda p: {k: v for k, v in p.items() if k in varying}  # noqa: E731
    rows = []
    for e in entries:
        settings = " ".join(f"<code>{escape(k)}={escape(str(v))}</code>" for k, v in differs(e["params"]).items())
        rows.append(f'<tr class="{"failed" if e["bad"] else ""}"><td><a href="{escape(e["link"])}">'
                    f'{escape(e["name"])}</a></td><td>{escape(e["date"])}</td><td>{escape(e["status"])}</td>'
                    f'<td>{settings or "defaults"}</td><td>{inline(e["headline"])}</td></tr>')
    body = "".join(rows) or '<tr><td colspan="5">No runs yet.</td></tr>'
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>GridFS Serving Lab: runs</title><style>{CSS}</style></head><body>"
            f"<h1>GridFS Serving Lab: runs</h1><p>{len(entries)} runs in this directory, newest first. {note}</p>"
            f'<div class="table"><table id="runs"><thead><tr><th>run</th><th>started</th><th>status</th>'
            f"<th>settings</th><th>headline</th></tr></thead><tbody>{body}</tbody></table></div></body></html>\n")


def write_index(results_dir: Path, env_file: Path | None = None) -> Path:
    path = results_dir / INDEX
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render_index(results_dir, env_file))
    tmp.replace(path)
    return path


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help") or len(argv) > 2:
        print("usage: python -m bench index RESULTS_DIR [ENV_FILE]\n\nwrites RESULTS_DIR/index.html: every run, "
              "its settings that differ from ENV_FILE (default: the .env beside RESULTS_DIR), status and headline",
              file=sys.stderr if not argv or len(argv) > 2 else sys.stdout)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    results_dir = Path(argv[0])
    if not results_dir.is_dir():
        print(f"bench index: error: {results_dir} is not a directory", file=sys.stderr)
        return 2
    print(write_index(results_dir, Path(argv[1]) if len(argv) > 1 else None))
    return 0
