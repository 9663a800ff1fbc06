"""The nginx GridFS module's CPU per request against its floor (issue 23,
item 5), printed as a table, not asserted as a speed: the module, Flask and
Node reading GridFS, nginx-static sending the same bytes from disk, and the
floor, a client of the same driver (tests/module_floor/gridfs_floor.c) that
asks the module's two queries per request and discards the chunks. The
module's floor is that client plus nginx-static's send: receiving and
parsing the replies, and sending the bytes, which no GridFS server avoids.

Each server runs natively, pinned to core 1 as a serving path is in the lab
on 2 cores; wrk (c=100), FerretDB and PostgreSQL share core 0. A server's
CPU is its whole process tree's (utime + stime from /proc) over the timed
seconds, divided by the requests wrk completed in them. FLOOR_SECONDS (3)
sets the seconds per server and size.

The machine's own speed swings (about 9% over seconds here), so the
module's ratio to its floor is taken within rounds: FLOOR_ROUNDS (6) rounds,
each measuring every server and the floor client once per size in an order
drawn anew, and the ratio's interval is the 95% t interval of the rounds'
log ratios (bench.measure.rounds.ratio_of, as the default run's headline).
With perf on the machine, the module's own profile at each size in the last
round is printed too, grouped by what the time went to
(tests/support/perf_profile.py)."""
import json
import math
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import gridfs
import pymongo
import pytest

from bench.benchmark.quiet import wait_until_quiet
from bench.measure.rounds import MIN_ROUNDS, ratio_of
from support.perf_profile import breakdown, perf_report
from support.service_processes import LabNginxGridFS, NginxStatic, flask_service, node_service

pytestmark = pytest.mark.bench  # a table to read, not a test to pass: make floor

DB = "module_floor"
SIZES = {"1KB.bin": 1024, "100KB.bin": 100 * 1024, "1MB.bin": 1 << 20}
SECONDS = float(os.environ.get("FLOOR_SECONDS", "3"))
ROUNDS = int(os.environ.get("FLOOR_ROUNDS", "6"))  # ratio_of gives no interval below MIN_ROUNDS (6)
SERVERS = ("nginx-gridfs", "floor client", "nginx-static", "flask", "node")
CONCURRENCY = 100
FLOOR_THREADS = 16  # the module's thread pool in services/nginx-gridfs/nginx.conf
SERVER_CORE, LOAD_CORE = "1", "0"
CLK_TCK = os.sysconf("SC_CLK_TCK")
FLOOR_SOURCE = Path(__file__).parent / "module_floor" / "gridfs_floor.c"


def tree(pid: int) -> list[int]:
    """pid and every process below it."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
            parents.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += parents.get(current, [])
    return found


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended: its time is gone with it (workers here live for the run)
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / CLK_TCK


def pin(pids: list[int], core: str) -> None:
    for pid in pids:
        subprocess.run(["taskset", "-a", "-p", "-c", core, str(pid)], check=True, capture_output=True, timeout=10)


def wrk(url: str, seconds: float) -> int:
    """Requests completed in `seconds` of wrk at CONCURRENCY, pinned to the load core."""
    out = subprocess.run(["taskset", "-c", LOAD_CORE, "wrk", "-t1", f"-c{CONCURRENCY}", f"-d{seconds:g}s", "--timeout",
                          "30s", url],
                         capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    line = next(line for line in out.splitlines() if "requests in" in line)
    errors = [line for line in out.splitlines() if "Non-2xx" in line or "Socket errors" in line]
    assert not errors, f"{url}: {errors}"
    return int(line.split()[0])


@pytest.fixture(scope="module")
def stored(mongo_uri):
    client = pymongo.MongoClient(mongo_uri)
    client.drop_database(DB)
    bucket = gridfs.GridFSBucket(client[DB])
    files = Path(tempfile.mkdtemp(prefix="lab-floor-files-"))
    files.chmod(0o755)
    for name, size in SIZES.items():
        data = os.urandom(size)
        bucket.upload_from_stream(name, data)
        (files / name).write_bytes(data)
        (files / name).chmod(0o644)
    yield files
    client.drop_database(DB)
    client.close()
    shutil.rmtree(files, ignore_errors=True)


@pytest.fixture(scope="module")
def floor_binary(tmp_path_factory) -> Path:
    binary = tmp_path_factory.mktemp("floor") / "gridfs_floor"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libmongoc-1.0"], capture_output=True, text=True,
                           check=True).stdout.split()
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(binary), str(FLOOR_SOURCE), *flags,
                    "-lpthread"], check=True, capture_output=True, timeout=120)
    return binary


def measure_server(name: str, url: str, root_pid: int, databases: list[int], profile_dir: Path | None = None):
    """(server CPU ms per request, database CPU ms per request, requests/s,
    perf breakdown or None) of one size, after a second's warm-up."""
    wrk(url, 1)
    pids, db_pids = tree(root_pid), [p for d in databases for p in tree(d)]
    perf = None
    if profile_dir is not None and shutil.which("perf"):
        data = profile_dir / f"{name}.perf"
        perf = subprocess.Popen(["perf", "record", "-F", "997", "-g", "-o", str(data), "-p",
                                 ",".join(map(str, pids)), "--", "sleep", f"{SECONDS:g}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    own, db = cpu_seconds(pids), cpu_seconds(db_pids)
    began = time.monotonic()
    requests = wrk(url, SECONDS)
    elapsed = time.monotonic() - began
    own, db = cpu_seconds(pids) - own, cpu_seconds(db_pids) - db
    profile = None
    if perf is not None:
        perf.wait(timeout=SECONDS + 60)
        profile = breakdown(perf_report(data))
    if not requests:  # none answered in the seconds: no figure (the table says so)
        return None, None, 0.0, profile
    return own * 1000 / requests, db * 1000 / requests, requests / elapsed, profile


def measure_floor(binary: Path, mongo_uri: str, name: str, databases: list[int]):
    db_pids = [p for d in databases for p in tree(d)]
    db = cpu_seconds(db_pids)
    out = subprocess.run(["taskset", "-c", SERVER_CORE, str(binary), mongo_uri, DB, name, str(FLOOR_THREADS),
                          f"{SECONDS:g}"], capture_output=True, text=True, timeout=SECONDS + 60)
    db = cpu_seconds(db_pids) - db
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    figures = dict(zip(words[::2], map(float, words[1::2])))
    assert figures["files"] > 0 and figures["bytes"] == figures["files"] * SIZES[name]
    return ((figures["cpu_user"] + figures["cpu_system"]) * 1000 / figures["files"], db * 1000 / figures["files"],
            figures["files"] / figures["seconds"], None)


def measure_all(stored: Path, mongo_uri: str, floor_binary: Path, databases: list[int],
                profile_dir: Path) -> list[dict[str, dict[str, tuple]]]:
    """[{size: {server: figures}} per round]: every server started once and
    kept up, each round measuring each of them and the floor client once per
    size, in an order drawn anew (seeded: a rerun repeats it)."""
    servers = {"nginx-gridfs": LabNginxGridFS(mongo_uri, DB, stored), "flask": flask_service(mongo_uri, DB),
               "node": node_service(mongo_uri, DB), "nginx-static": NginxStatic(stored)}
    for name in ("flask", "node"):
        # 100 clients of 1 MB on the stand-in wait longer than the 3 s
        # deadline; the cost of an answer is measured here, not the shedding
        servers[name].env["REQUEST_DEADLINE_MS"] = "30000"
    draw = random.Random(f"module-floor:{ROUNDS}")
    rounds: list[dict[str, dict[str, tuple]]] = []
    started = []
    try:
        for server in servers.values():
            server.start()
            started.append(server)
            pin(tree(server.proc.pid), SERVER_CORE)
        for i in range(ROUNDS):
            table: dict[str, dict[str, tuple]] = {}
            for size in SIZES:
                order = draw.sample(SERVERS, len(SERVERS))
                for name in order:
                    # what the one before left (FerretDB still reading for
                    # clients gone) would fall on this one's window
                    wait_until_quiet()
                    if name == "floor client":
                        found = measure_floor(floor_binary, mongo_uri, size, databases)
                    else:
                        server = servers[name]
                        profile = profile_dir if name == "nginx-gridfs" and i == ROUNDS - 1 else None
                        try:
                            found = measure_server(f"{name}-{size}", f"{server.url}/files/{size}", server.proc.pid,
                                                   databases, profile)
                        except AssertionError as e:
                            log = server.log() if hasattr(server, "log") else ""
                            raise AssertionError(f"{e}\n--- {name} log ---\n{log[-3000:]}") from None
                    table.setdefault(size, {})[name] = found
            rounds.append(table)
    finally:
        for server in started:
            server.stop()
    return rounds


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def floor_lines(rounds: list[dict[str, dict[str, tuple]]]) -> list[str]:
    """The table: each server's median over the rounds, then per size the
    module's ratio to its floor (client + nginx-static's send) with the
    rounds' 95% interval."""
    lines = [f"CPU ms per request, c={CONCURRENCY}, {SECONDS:g} s each, median of {len(rounds)} rounds, FerretDB v1 "
             "on PostgreSQL (server on core 1; wrk and the database on core 0):",
             f"{'':14}" + "".join(f"{size:>28}" for size in SIZES),
             f"{'':14}" + "".join(f"{'own':>10}{'database':>10}{'req/s':>8}" for _ in SIZES)]

    def cell(size: str, name: str) -> str:
        found = [r[size][name] for r in rounds if r[size][name][0] is not None]
        if not found:
            return f"{'no answer':>28}"
        return (f"{median([f[0] for f in found]):10.3f}{median([f[1] for f in found]):10.3f}"
                f"{median([f[2] for f in found]):8.0f}")

    for name in SERVERS:
        lines.append(f"{name:14}" + "".join(cell(size, name) for size in SIZES))
    for size in SIZES:
        measured = [r[size] for r in rounds if all(r[size][n][0] for n in ("nginx-gridfs", "floor client",
                                                                          "nginx-static"))]
        if not measured:
            lines.append(f"{size}: no round measured the module, its floor client and nginx-static")
            continue
        logs = [math.log(r["nginx-gridfs"][0] / (r["floor client"][0] + r["nginx-static"][0])) for r in measured]
        found = ratio_of(logs, "module / floor")
        interval = (f"95% interval [{found.low:.2f}, {found.high:.2f}]" if found.low is not None
                    else f"no interval under {MIN_ROUNDS} rounds")
        lines.append(f"{size}: the module {found.ratio:.2f}x its floor (client + nginx-static's send), {interval}, "
                     f"{found.rounds} rounds; per round {', '.join(f'{math.exp(v):.2f}' for v in logs)}")
        profile = rounds[-1][size]["nginx-gridfs"][3]
        if profile:
            total = sum(profile.values())
            lines.append(f"  where the module's worker spent it in the last round ({total:,} samples):")
            lines += [f"    {what:32} {count / total:6.1%}" for what, count in
                      sorted(profile.items(), key=lambda kv: -kv[1])]
    return lines


def test_module_cpu_per_request_against_its_floor(stored, mongo_uri, ferretdb, postgres, floor_binary, tmp_path):
    databases = [ferretdb.proc.pid, postgres.proc.pid]
    pin([p for d in databases for p in tree(d)], LOAD_CORE)
    try:
        rounds = measure_all(stored, mongo_uri, floor_binary, databases, tmp_path)
    finally:  # the session's databases serve other tests after this one: every core again
        pin([p for d in databases for p in tree(d)], f"0-{os.cpu_count() - 1}")
    print("\n" + "\n".join(floor_lines(rounds)))
    print(json.dumps([{size: {name: figures[:3] for name, figures in sizes.items()} for size, sizes in r.items()}
                      for r in rounds]))
    for table in rounds:
        for size in SIZES:
            for name in ("nginx-gridfs", "floor client", "nginx-static"):
                own, _, rate, _ = table[size][name]
                assert own and own > 0 and rate > 0, (size, name)
