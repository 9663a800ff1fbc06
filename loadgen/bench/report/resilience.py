"""make resilience's report: one row per serving path and fault, as sections
(report/model.py) that report.md and the run's page both render. Pure: a
dict in, sections or text out."""
from .markdown import block_lines
from .model import Bullets, Para, Part, Table
from ..faults.resilience import BOUND_S, RATE_BACK_HOLD, RATE_BACK_SHARE, ResilienceRow

TITLE = "Resilience: serving paths while their database restarts or pauses"
COLUMNS = [
    "**database answering**: from the command that brought the database back (start, or unpause) returning to the "
    "database answering again, probed every 0.1 s on a fresh connection from the load's container. Beside the "
    "figures, which it does not move: a slow start explains a slow recovery, but a probe can be late too.",
    "**outage**: from the command that took the database away (stop, or pause) being issued to the one that "
    "brought it back (start, or unpause) returning; requests sent in it include those in flight as the database "
    "went.",
    "**errors**: every answer of the run that was not a 200 with the file's exact bytes.",
]


def _seconds(value: float | None, missing: str = "never") -> str:
    return missing if value is None else f"{value:.2f} s"


def _at_once(seconds: float | None) -> float | None:
    """A paused database may answer a moment before `unpause` returns: at once."""
    return None if seconds is None else max(seconds, 0.0)


def _pair(median: float | None, most: float | None, unit: str, missing: str = "never") -> str:
    if median is None:
        return missing
    return f"{median:.2f} / {most:.2f} {unit}" if unit == "s" else f"{median:.0f} / {most:.0f} {unit}"


def _answers(counts: dict) -> str:
    return ", ".join(f"{n} x {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])) or "none sent"


def _server(server: dict | None) -> str:
    if not server:
        return "unknown"
    text = f"{server.get('product', 'unknown')} {server.get('version') or ''}".strip()
    if server.get("backend"):
        text += f" on {server['backend']}"
    return text


def resilience_part(doc: dict) -> Part:
    """The run's report: how it ran, then (over several trials) a row per
    path and fault, then every trial, then what the columns mean."""
    s = doc["settings"]
    rows = [ResilienceRow.from_dict(r) for r in doc.get("resilience", [])]
    blocks = [
        Para(f"Run `{doc['run_id']}` with `{doc['env_file']}`, {doc['started']} to {doc['finished']}. "
             f"MongoDB-protocol server: {_server(doc.get('server'))}."),
        Para(f"Each path serves `{s['file']}` to {s['rate']:g} requests/s (vegeta, open loop: requests leave on "
             f"schedule whatever the answers) for {s['seconds']} s. {s['fault_at']} s in, its database "
             f"(compose label `lab.database`) is restarted (`docker compose stop`, then `start`) or, in a second "
             f"run, paused for {s['pause_s']} s (`pause`, then `unpause`)."),
    ]
    if (doc.get("server") or {}).get("product") == "FerretDB":
        blocks.append(Para("The database is FerretDB standing in for MongoDB: how fast it comes back after a "
                           "restart is FerretDB's, not MongoDB's. What a path answers while it is away is the "
                           "path's own.", quote=True))
    trials = [[r.path, r.database, r.fault, str(r.trial), "-" if r.fault_at_s is None else f"{r.fault_at_s:.2f} s",
               _seconds(_at_once(r.answering_after_s), "not probed"), f"{r.outage_s:.1f} s", str(r.requests),
               str(r.errors), _answers(r.outage_answers),
               "-" if r.outage_slowest_ms is None else f"{r.outage_slowest_ms:.0f} ms", _seconds(r.first_good_s),
               str(r.errors_after_back), _seconds(r.rate_back_s, "not within the run"),
               _seconds(r.recovered_s, "not within the run"), r.verdict] for r in rows]
    trials += [[f["path"], f.get("database", "?"), f["fault"], str(f.get("trial", "-")), *["-"] * 11,
                f"not measured: {f['error']}"] for f in doc.get("failed", [])]
    every = [Table(["path", "database", "fault", "trial", "fault at", "database answering", "outage", "requests",
                    "errors", "answers to requests sent during the outage", "slowest of those",
                    "first good answer after return", "errors after return", "rate back after",
                    "back with no error after", "verdict"], trials, align="lllrrrrrrlrrrrrl"),
             Bullets(COLUMNS + [
                 f"**verdict**: right is 503 (or a whole 200) to every request sent during the outage, each within "
                 f"{BOUND_S:g} s, no truncated 200, and a good answer within {BOUND_S:g} s of the database's return. "
                 f"**rate back after**: to the end of the first second from which good answers/s hold "
                 f"{RATE_BACK_SHARE:.0%} of their level before the fault for {RATE_BACK_HOLD} s; **back with no "
                 f"error after**: the same with no request sent in those seconds failing, what the verdict calls "
                 f"recovered (a path still failing most requests after the return is not recovered, whenever its "
                 f"first good answer came)."])]
    summary = doc.get("summary") or []
    if not summary:
        return Part(TITLE, blocks + every)
    table = [[r["path"], r["database"], r["fault"], str(r["trials"]), str(r["right"]),
              _pair(_at_once(r.get("answering_median_s")), _at_once(r.get("answering_max_s")), "s", "not probed"),
              _pair(r["first_good_median_s"], r["first_good_max_s"], "s"),
              _pair(r["recovered_median_s"], r["recovered_max_s"], "s"),
              _pair(r["slowest_outage_median_ms"], r["slowest_outage_max_ms"], "ms"), r["verdict"]] for r in summary]
    return Part(TITLE, blocks + [
        Part(f"Over {max(r['trials'] for r in summary)} trials each (the fault {s.get('jitter_s', 0):g} s later at "
             "most, seeded, so it falls at another point of the drivers' heartbeat cycles)", [
                 Table(["path", "database", "fault", "trials", "right", "database answering, median / max",
                        "first good answer, median / max", "back with no error, median / max",
                        "slowest outage answer, median / max", "verdict"], table, align="lllrrrrrrl")]),
        Part("Every trial", every)])


def render(doc: dict) -> str:
    """The run's report.md (its page: report/html.py)."""
    return "\n".join(block_lines(resilience_part(doc), 1))
