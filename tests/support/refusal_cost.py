"""What a refusal costs flask-postgres's core (issue 39): the CPU time of
its gunicorn processes (/proc/PID/stat's utime and stime) per 503 "server
busy", offered open-loop by vegeta over kept-alive connections, one line
per rate. Not a test (pytest does not collect it): a benchmark, run
natively (PostgreSQL as tests/support/processes.py runs it, no Docker) on
a quiet machine, as root or a user PostgreSQL's tools accept:

    PYTHONPATH=loadgen:tests .venv/bin/python -m support.refusal_cost --repo /work/main   # before
    PYTHONPATH=loadgen:tests .venv/bin/python -m support.refusal_cost                     # after: this checkout

--repo names the checkout whose services/ run (gunicorn.conf.py, lab_http,
flask-postgres); this script and its helpers are this checkout's.

How every request is refused: FLASK_MAX_OPEN_STREAMS=1 (admission's limit
at its floor, one place) and the files table locked by another session,
so the one admitted lookup waits for the lock until its deadline (the
default, 3 s), then the next one does. A keeper (vegeta at KEEPER_RATE)
refuses requests throughout, so the queue stays standing between the
measured attacks (every refusal waits SHORT_WAIT, 50 ms, as in a steady
overload; not the quarter of the deadline an overload's onset waits). The
CPU of that state without the measured attack (the keeper, the admitted
lookup timing out every 3 s) is measured first and subtracted.

The lab's target (docs/faults.md, issue 39): at 10x flask-postgres's 1 MB
capacity, about 2,270 refusals a second in 20% of its core, so at most
about 88 µs each, everything in the process included."""
import argparse
import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.processes import PostgresServer, free_port
from support.service_processes import ServiceProcess, postgres_database

REPO = Path(__file__).resolve().parents[2]

DB_NAME = "lab_refusal_cost"
NAME = "1MB.bin"
BUSY_BODY = b"server busy\n"
KEEPER_RATE = 40  # refusals a second: one at least every TARGET (0.75 s) keeps the queue standing
SETTLE_S = 3.0    # the keeper's first requests wait the queue's budget (0.75 s) before the first refusal
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of one process, from /proc/PID/stat (its
    fields after the command name, which may hold spaces)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS  # utime, stime: fields 14 and 15


def process_tree(root: int) -> list[int]:
    """root and its children (gunicorn's master and its workers)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rpartition(")")[2].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
        if parent == root:
            children.append(int(stat.parent.name))
    return [root, *children]


def tree_cpu(pids: list[int]) -> tuple[float, float]:
    times = [cpu_seconds(pid) for pid in pids]
    return sum(user for user, _ in times), sum(system for _, system in times)


def per_refusal_us(cpu_s: float, background_s_per_s: float, wall_s: float, refusals: int) -> float:
    """The process's CPU during an attack less the background's for as long,
    over the attack's refusals, in microseconds."""
    return (cpu_s - background_s_per_s * wall_s) / refusals * 1e6 if refusals else float("nan")


def refused_busy(result: dict) -> bool:
    """admission's refusal: 503, Retry-After: 1, "server busy" (vegeta keeps the body's first bytes)."""
    return (result["code"] == 503 and (result.get("headers") or {}).get("Retry-After") == ["1"]
            and base64.b64decode(result.get("body") or "") == BUSY_BODY)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def vegeta_binary() -> str:
    if os.environ.get("VEGETA"):
        return os.environ["VEGETA"]
    script = REPO / "tools" / "install" / "install-vegeta.sh"
    out = subprocess.run([str(script)], check=True, capture_output=True, text=True, timeout=900).stdout
    return out.strip().splitlines()[-1]


def vegeta_attack(vegeta: str, url: str, rate: int, seconds: float | None) -> subprocess.Popen:
    """vegeta at `rate` a second over kept-alive connections (its default),
    for `seconds`, its results on stdout; seconds None: until stopped, its
    results dropped (the keeper's)."""
    duration = f"-duration={seconds}s" if seconds else "-duration=0"
    output = subprocess.PIPE if seconds else subprocess.DEVNULL
    attack = subprocess.Popen([vegeta, "attack", f"-rate={rate}/s", duration, "-timeout=10s", "-max-body=32"],
                              stdin=subprocess.PIPE, stdout=output, stderr=output)
    attack.stdin.write(f"GET {url}\n".encode())
    attack.stdin.close()
    return attack


def results(vegeta: str, attack_stdout: bytes) -> list[dict]:
    encoded = subprocess.run([vegeta, "encode", "--to=json"], input=attack_stdout, capture_output=True,
                             timeout=120, check=True)
    return [json.loads(line) for line in encoded.stdout.splitlines()]


def flask_postgres(repo: Path, postgres_url: str, cpu: str | None) -> ServiceProcess:
    services = repo / "services"
    gunicorn = Path(sys.executable).parent / "gunicorn"
    command = [str(gunicorn), "-c", str(services / "python-common" / "gunicorn.conf.py"), "app:app"]
    if cpu is not None:
        command = ["taskset", "-c", cpu, *command]  # taskset execs gunicorn: the same pid
    port = free_port()
    return ServiceProcess("flask-postgres", command, services / "flask-postgres",
                          {"POSTGRES_URL": postgres_url, "PORT": str(port), "FLASK_MAX_OPEN_STREAMS": "1"}, port)


def stored(server_url: str) -> str:
    import psycopg
    from seed import postgres_store
    url = postgres_database(server_url, DB_NAME)
    with psycopg.connect(url, autocommit=True) as connection:
        postgres_store.create_schema(connection)
        postgres_store.insert_file(connection, NAME, b"x" * 1024 * 1024, "application/octet-stream")
    return url


def measure(service: ServiceProcess, vegeta: str, rates: list[int], seconds: float, label: str) -> None:
    import psycopg
    import requests
    url = f"{service.url}/files/{NAME}"
    first = requests.get(url, timeout=10)
    if first.status_code != 200 or len(first.content) != 1024 * 1024:
        raise RuntimeError(f"{label}: a GET before the lock was {first.status_code}\n{service.log()}")
    pids = process_tree(service.proc.pid)
    with psycopg.connect(service.env["POSTGRES_URL"]) as blocker:
        blocker.execute("LOCK TABLE files IN ACCESS EXCLUSIVE MODE")
        keeper = vegeta_attack(vegeta, url, KEEPER_RATE, None)
        try:
            time.sleep(SETTLE_S)
            cpu_before, started = tree_cpu(pids), time.monotonic()
            time.sleep(seconds)
            background = (sum(tree_cpu(pids)) - sum(cpu_before)) / (time.monotonic() - started)
            print(f"{label}: background (the keeper at {KEEPER_RATE}/s, one admitted lookup timing out every 3 s): "
                  f"{background * 1000:.1f} ms of CPU a second", flush=True)
            for rate in rates:
                attack_one(vegeta, url, rate, seconds, pids, background, label)
        finally:
            keeper.send_signal(signal.SIGINT)  # vegeta stops at once
            keeper.wait(timeout=60)
        blocker.rollback()


def attack_one(vegeta: str, url: str, rate: int, seconds: float, pids: list[int], background: float,
               label: str) -> None:
    (user_before, system_before), started = tree_cpu(pids), time.monotonic()
    attack = vegeta_attack(vegeta, url, rate, seconds)
    out, err = attack.communicate(timeout=seconds + 60)
    (user_after, system_after), wall = tree_cpu(pids), time.monotonic() - started
    if attack.returncode != 0:
        raise RuntimeError(f"vegeta: {err.decode(errors='replace')}")
    answers = results(vegeta, out)
    refused = [r for r in answers if refused_busy(r)]
    others: dict[str, int] = {}
    for r in answers:
        if not refused_busy(r):
            kind = f"{r['code']} {r.get('error') or ''}".strip()
            others[kind] = others.get(kind, 0) + 1
    user, system = user_after - user_before, system_after - system_before
    each = per_refusal_us(user + system, background, wall, len(refused))
    user_share = user / (user + system) if user + system else 0.0
    latency_ms = [r["latency"] / 1e6 for r in refused]
    print(f"{label}: {rate}/s offered for {seconds:g} s: {len(answers)} answers ({len(answers) / seconds:.0f}/s), "
          f"{len(refused)} refused busy, other {others or 'none'}; CPU {user + system:.2f} s in {wall:.1f} s "
          f"({user_share:.0%} user): {each:.0f} µs per refusal, background subtracted; "
          f"{rate * each / 1e4:.0f}% of a core at this rate; refusals' latency p50 {quantile(latency_ms, 0.5):.0f} "
          f"p99 {quantile(latency_ms, 0.99):.0f} ms", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose services/ run")
    parser.add_argument("--rates", default="500,1000,2270", help="refusals a second offered, comma-separated")
    parser.add_argument("--seconds", type=float, default=10.0, help="each attack's length (and the background's)")
    parser.add_argument("--cpu", help="pin gunicorn to these cores (taskset -c), as the lab pins a path")
    args = parser.parse_args()
    rates = [int(rate) for rate in args.rates.split(",")]
    repo = args.repo.resolve()
    label = f"flask-postgres ({repo})"
    vegeta = vegeta_binary()
    postgres = PostgresServer().start()
    try:
        service = flask_postgres(repo, stored(postgres.url), args.cpu).start()
        try:
            measure(service, vegeta, rates, args.seconds, label)
        finally:
            service.stop()
    finally:
        postgres.stop()


if __name__ == "__main__":
    main()
