"""`python -m bench resilience-load URL FILE RATE SECONDS [DATABASE]`: the
load side of make resilience, run in a bench container while the host
(tools/lab/resilience.py) takes the database away. Waits until URL serves FILE
byte for byte, prints one JSON line (the file's sha256, the database server),
then streams vegeta's answers as `vegeta encode -to=json` lines as they come,
so the host sees the load start. Open loop: requests leave on schedule
whether or not the path answers, as they would from real clients.

With DATABASE (mongo or postgres), the database itself is probed meanwhile,
a fresh connection every PROBE_EVERY_S, and each change is a line
{"database": "answering" | "silent", "at": Unix seconds}: a restarted
database is back when it answers, not when `docker compose start` returns,
so a path's recovery is timed from then."""
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import psycopg
import pymongo

from ..environment import database_server
from ..settings import read
from ..clients.timing import vegeta_rate
from ..checks.verify import VerificationError, wait_until_serving

FILES_DIR = "/data/files"
READY_TIMEOUT_S = 120     # the path, and its database after the last case's fault, answering again
CLIENT_TIMEOUT_S = 30     # vegeta's per-request timeout: a hang shows as a long latency up to this
MAX_WORKERS = 2000        # open connections at most while answers are late
PROBE_EVERY_S = 0.1       # the database probe's period ...
PROBE_TIMEOUT_S = 0.5     # ... and each probe's deadline (connect and answer)
DATABASES = ("mongo", "postgres")


def database_answers(database: str) -> bool:
    """One probe on a fresh connection: a pooled one would time the
    driver's reconnection, not the database."""
    try:
        if database == "mongo":
            ms = int(PROBE_TIMEOUT_S * 1000)
            with pymongo.MongoClient(read("MONGO_URI"), directConnection=True, connectTimeoutMS=ms,
                                     socketTimeoutMS=ms, serverSelectionTimeoutMS=ms) as client:
                client.admin.command("ping")
        else:
            with psycopg.connect(read("POSTGRES_URL"), connect_timeout=1,
                                 options=f"-c statement_timeout={int(PROBE_TIMEOUT_S * 1000)}") as conn:
                conn.execute("SELECT 1")
        return True
    except (pymongo.errors.PyMongoError, psycopg.Error, OSError):
        return False


class Output:
    """stdout shared by vegeta's lines and the probe's, a whole line at a time."""

    def __init__(self):
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()


def probe(database: str, out: Output, stop: threading.Event) -> None:
    """A line each time the database starts or stops answering."""
    state = None
    while not stop.is_set():
        began = time.time()
        now = "answering" if database_answers(database) else "silent"
        if now != state:
            # answering: by the end of the probe; silent: since its start
            out.line(json.dumps({"database": now, "at": round(time.time() if now == "answering" else began, 3)}))
            state = now
        stop.wait(max(0.0, PROBE_EVERY_S - (time.time() - began)))


def main(args: list[str]) -> int:
    if len(args) not in (4, 5) or (len(args) == 5 and args[4] not in DATABASES):
        print(f"usage: python -m bench resilience-load URL FILE RATE SECONDS [{' | '.join(DATABASES)}]",
              file=sys.stderr)
        return 2
    url, name, rate, seconds = args[0], args[1], float(args[2]), int(args[3])
    database = args[4] if len(args) == 5 else None
    try:
        with open(os.path.join(FILES_DIR, os.path.basename(name)), "rb") as f:
            sha256 = hashlib.sha256(f.read()).hexdigest()
        wait_until_serving(url, sha256, time.monotonic() + READY_TIMEOUT_S)
    except (OSError, VerificationError) as e:
        print(f"resilience-load: {e}", file=sys.stderr)
        return 1
    try:
        server = database_server(read("MONGO_URI"), read("GRIDFS_DB"))
    except pymongo.errors.PyMongoError as e:  # still measured; the report says it is unknown
        server = {"product": "unknown", "error": str(e)[:200]}
    out = Output()
    out.line(json.dumps({"expected_sha256": sha256, "server": server}))
    stop = threading.Event()
    watcher = threading.Thread(target=probe, args=(database, out, stop), daemon=True) if database else None
    if watcher:
        watcher.start()
    try:
        return run_load(url, rate, seconds, out)
    finally:
        stop.set()
        if watcher:
            watcher.join(timeout=PROBE_TIMEOUT_S * 4 + 2)


def run_load(url: str, rate: float, seconds: int, out: Output) -> int:
    """vegeta at `rate` for `seconds`, its answers passed on line by line."""
    vegeta = os.environ.get("VEGETA", "vegeta")
    attack = subprocess.Popen(
        [vegeta, "attack", f"-rate={vegeta_rate(rate)}", f"-duration={seconds}s", f"-timeout={CLIENT_TIMEOUT_S}s",
         f"-max-workers={MAX_WORKERS}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    attack.stdin.write(f"GET {url}\n".encode())
    attack.stdin.close()
    encode = subprocess.Popen([vegeta, "encode", "-to=json"], stdin=attack.stdout, stdout=subprocess.PIPE,
                              text=True)
    attack.stdout.close()  # encode holds it now

    def pass_on():
        for line in encode.stdout:
            out.line(line)

    passer = threading.Thread(target=pass_on, daemon=True)
    passer.start()
    try:
        attack.wait(timeout=seconds + CLIENT_TIMEOUT_S + 30)
        encode.wait(timeout=30)
        passer.join(timeout=30)
    except subprocess.TimeoutExpired:
        for p in (attack, encode):
            p.kill()
        print(f"resilience-load: vegeta ran past {seconds + CLIENT_TIMEOUT_S + 30} s", file=sys.stderr)
        return 1
    return attack.returncode or encode.returncode
