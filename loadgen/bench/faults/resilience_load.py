"""`python -m bench resilience-load URL FILE RATE SECONDS`: the load side of
make resilience, run in a bench container while the host (tools/resilience.py)
takes the database away. Waits until URL serves FILE byte for byte, prints one
JSON line (the file's sha256, the database server), then streams vegeta's
answers as `vegeta encode -to=json` lines as they come, so the host sees the
load start. Open loop: requests leave on schedule whether or not the path
answers, as they would from real clients."""
import hashlib
import json
import os
import subprocess
import sys
import time

import pymongo

from ..environment import database_server
from ..clients.timing import vegeta_rate
from ..checks.verify import VerificationError, wait_until_serving

FILES_DIR = "/data/files"
READY_TIMEOUT_S = 120     # the path, and its database after the last case's fault, answering again
CLIENT_TIMEOUT_S = 30     # vegeta's per-request timeout: a hang shows as a long latency up to this
MAX_WORKERS = 2000        # open connections at most while answers are late


def main(args: list[str]) -> int:
    if len(args) != 4:
        print("usage: python -m bench resilience-load URL FILE RATE SECONDS", file=sys.stderr)
        return 2
    url, name, rate, seconds = args[0], args[1], float(args[2]), int(args[3])
    try:
        with open(os.path.join(FILES_DIR, os.path.basename(name)), "rb") as f:
            sha256 = hashlib.sha256(f.read()).hexdigest()
        wait_until_serving(url, sha256, time.monotonic() + READY_TIMEOUT_S)
    except (OSError, VerificationError) as e:
        print(f"resilience-load: {e}", file=sys.stderr)
        return 1
    try:
        server = database_server(os.environ["MONGO_URI"], os.environ.get("GRIDFS_DB", "lab"))
    except (pymongo.errors.PyMongoError, KeyError) as e:  # still measured; the report says it is unknown
        server = {"product": "unknown", "error": str(e)[:200]}
    print(json.dumps({"expected_sha256": sha256, "server": server}), flush=True)
    vegeta = os.environ.get("VEGETA", "vegeta")
    attack = subprocess.Popen(
        [vegeta, "attack", f"-rate={vegeta_rate(rate)}", f"-duration={seconds}s", f"-timeout={CLIENT_TIMEOUT_S}s",
         f"-max-workers={MAX_WORKERS}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    attack.stdin.write(f"GET {url}\n".encode())
    attack.stdin.close()
    encode = subprocess.Popen([vegeta, "encode", "-to=json"], stdin=attack.stdout)
    attack.stdout.close()  # encode holds it now
    try:
        attack.wait(timeout=seconds + CLIENT_TIMEOUT_S + 30)
        encode.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for p in (attack, encode):
            p.kill()
        print(f"resilience-load: vegeta ran past {seconds + CLIENT_TIMEOUT_S + 30} s", file=sys.stderr)
        return 1
    return attack.returncode or encode.returncode
