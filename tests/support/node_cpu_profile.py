"""What node's CPU per 1 MB answer goes to (issue 39: node took 8.5-9.2 ms
of user CPU per whole answer where flask took 2.4 and nginx-gridfs 0.55, so
its event loop ran late and its refusals waited for it). Not a test (pytest
does not collect it): a benchmark, run natively on a quiet machine
(PostgreSQL and FerretDB as the tests run them, no Docker):

    PYTHONPATH=loadgen:tests .venv/bin/python -m support.node_cpu_profile

node (once per `--node-options` variant, in turns for `--rounds`) and
flask serve the same 1 MB GridFS file to `--clients` clients for
`--seconds`; each line gives the whole answers and the process tree's CPU
(user and system, /proc) per answer. With --profile, node runs under V8's
sampling profiler (--cpu-prof) and its self time is summed by function and
by package, the top rows printed.

    ... -m support.node_cpu_profile --node-options defaults max-semi-space-size=64,trace-gc
"""
import argparse
import json
import random
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import gridfs
import requests
from pymongo import MongoClient

from conftest import ferretdb_binary
from support.processes import FerretDBServer, PostgresServer
from support.refusal_cost import process_tree, tree_cpu
from support.service_processes import flask_service, node_service

DB_NAME = "lab_node_cpu_profile"
NAME = "1MB.bin"
SIZE = 1024 * 1024


def load(url: str, clients: int, seconds: float) -> tuple[int, int]:
    """Closed loop: (whole answers, others) from `clients` threads for `seconds`."""
    counts = Counter()
    stop = time.monotonic() + seconds

    def client():
        with requests.Session() as session:
            while time.monotonic() < stop:
                try:
                    answer = session.get(url, timeout=10)
                    counts["whole" if answer.status_code == 200 and len(answer.content) == SIZE else "other"] += 1
                except requests.RequestException:
                    counts["other"] += 1
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + 30)
    return counts["whole"], counts["other"]


def measure(service, clients: int, seconds: float) -> None:
    url = f"{service.url}/files/{NAME}"
    load(url, 1, 1.0)  # warm: connections, the driver's pool, JIT
    pids = process_tree(service.proc.pid)
    before = tree_cpu(pids)
    whole, other = load(url, clients, seconds)
    after = tree_cpu(pids)
    user, system = after[0] - before[0], after[1] - before[1]
    print(f"{service.name}: {clients} clients x {seconds:g} s: {whole} whole answers ({whole / seconds:.1f}/s), "
          f"{other} others; CPU per whole answer {user / max(whole, 1) * 1e3:.2f} ms user, "
          f"{system / max(whole, 1) * 1e3:.2f} ms system", flush=True)


def self_times(profile: dict) -> tuple[Counter, Counter, float]:
    """A .cpuprofile's self time (ms) by function and by package, and the total."""
    nodes = {node["id"]: node["callFrame"] for node in profile["nodes"]}
    by_function, by_package = Counter(), Counter()
    for node_id, delta in zip(profile["samples"], profile["timeDeltas"]):
        frame = nodes[node_id]
        url = frame.get("url") or ""
        if "node_modules/" in url:
            package = url.rsplit("node_modules/", 1)[1].split("/")[0]
        elif url.startswith("node:"):
            package = "node core"
        elif url:
            package = "the path's own code"
        else:
            package = frame["functionName"]  # (garbage collector), (program), (idle)
        where = f"{url.rsplit('/', 1)[-1]}:{frame.get('lineNumber', -1) + 1}" if url else ""
        by_function[f"{frame['functionName'] or '(anonymous)'} {where}".strip()] += delta / 1e3
        by_package[package] += delta / 1e3
    return by_function, by_package, sum(profile["timeDeltas"]) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--node-options", nargs="*", default=["defaults"],
                        help="variants taken in turns: node's flags without their dashes, comma-separated")
    parser.add_argument("--profile", action="store_true", help="V8's CPU profile of the first variant's first round")
    parser.add_argument("--flask", action="store_true", help="flask too, once")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    postgres = PostgresServer().start()
    ferretdb = FerretDBServer(ferretdb_binary(), postgres).start()
    profiles = Path(tempfile.mkdtemp(prefix="lab-node-cpu-profile-"))
    try:
        with MongoClient(ferretdb.uri) as client:
            client.drop_database(DB_NAME)
            gridfs.GridFSBucket(client[DB_NAME]).upload_from_stream(NAME, random.Random(1).randbytes(SIZE))
        for round_ in range(args.rounds):
            for index, options in enumerate(args.node_options):
                node = node_service(ferretdb.uri, DB_NAME)
                profiled = args.profile and round_ == 0 and index == 0
                flags = [f"--{flag}" for flag in options.split(",") if flag not in ("", "defaults")]
                # on the command line: NODE_OPTIONS refuses most of V8's flags (--trace-gc)
                node.command = ["node", *flags, *(["--cpu-prof", f"--cpu-prof-dir={profiles}"] if profiled else []),
                                "server.js"]
                node.name = f"node [{options}]"
                run(node, args)
        if args.flask:
            run(flask_service(ferretdb.uri, DB_NAME), args)
        if args.profile:
            summarise(profiles, args.top)
    finally:
        ferretdb.stop()
        postgres.stop()


def run(service, args) -> None:
    service.start()
    try:
        measure(service, args.clients, args.seconds)
    finally:
        service.stop()
    gc = [line for line in service.log_path.read_text(errors="replace").splitlines() if "ms: " in line]
    if gc:  # --trace-gc's lines, one per collection: "... ms: Scavenge ..." or "... ms: Mark-Compact ..."
        kinds = Counter(line.split("ms: ", 1)[1].split()[0] for line in gc)
        print(f"  {service.name}: collections by kind {dict(kinds)}", flush=True)


def summarise(profiles: Path, top: int) -> None:
    written = sorted(profiles.glob("*.cpuprofile"))
    if not written:
        raise SystemExit(f"node wrote no profile into {profiles}")
    by_function, by_package, total = self_times(json.loads(written[-1].read_text()))
    print(f"node's profile: {total:.0f} ms sampled ({written[-1]})")
    for title, table in (("by package", by_package), ("by function", by_function)):
        print(f"self time {title}:")
        for what, ms in table.most_common(top):
            print(f"  {ms:9.0f} ms {ms / total:6.1%}  {what}")


if __name__ == "__main__":
    main()
