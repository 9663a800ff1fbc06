"""`python -m bench fetch URL FILE CLIENTS [START_S]`: CLIENTS clients at
once each download URL whole and check its bytes against FILE on the files
volume (make overload's large file: 50 clients, 100 MB, a 256 MB container).
Each waits up to START_S seconds (default 60) for its answer to start, the
path's own deadline for it plus a margin, so a request the path holds in
line until then is not the client's timeout; then 60 s at most for each read.
Prints one JSON line: what each got (whole, cut short, a status, a client
error), the slowest download and the time of them all."""
import hashlib
import http.client
import json
import os
import socket
import sys
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

from ..checks.verify import VerificationError, wait_until_serving

FILES_DIR = "/data/files"
READY_TIMEOUT_S = 300   # the first whole download, after a restart
READ_TIMEOUT_S = 60     # one read with nothing arriving: a hang
PIECE = 1 << 20


def file_digest(path: str) -> tuple[str, int]:
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while piece := f.read(PIECE):
            digest.update(piece)
            size += len(piece)
    return digest.hexdigest(), size


def download(url: str, sha256: str, start_s: float = READ_TIMEOUT_S, read_s: float = READ_TIMEOUT_S) -> str:
    """One GET, streamed and hashed: 'whole', '200 cut short', the status, or
    the client error's kind. The status line may take start_s; each read
    after it, read_s."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=start_s)
    try:
        conn.request("GET", parts.path)
        sock = conn.sock  # getresponse() lets go of it when the answer closes the connection
        resp = conn.getresponse()
        sock.settimeout(read_s)
        digest = hashlib.sha256()
        while piece := resp.read(PIECE):
            digest.update(piece)
        if resp.status != 200:
            return str(resp.status)
        return "whole" if digest.hexdigest() == sha256 else "200 cut short"
    except socket.timeout:
        return "client timeout"
    except http.client.IncompleteRead:
        return "200 cut short"
    except ConnectionRefusedError:
        return "connection refused"
    except (ConnectionError, http.client.HTTPException):
        return "connection reset"
    except OSError as e:
        return f"client error ({e.__class__.__name__})"
    finally:
        conn.close()


def main(args: list[str]) -> int:
    if len(args) not in (3, 4):
        print("usage: python -m bench fetch URL FILE CLIENTS [START_S]", file=sys.stderr)
        return 2
    url, name, clients = args[0], args[1], int(args[2])
    start_s = float(args[3]) if len(args) == 4 else READ_TIMEOUT_S
    try:
        sha256, size = file_digest(os.path.join(FILES_DIR, os.path.basename(name)))
        wait_until_serving(url, sha256, time.monotonic() + READY_TIMEOUT_S)
    except (OSError, VerificationError) as e:
        print(f"fetch: {e}", file=sys.stderr)
        return 1
    outcomes: list[tuple[str, float]] = []
    start = threading.Barrier(clients)

    def client():
        start.wait()
        began = time.monotonic()
        outcome = download(url, sha256, start_s)
        outcomes.append((outcome, time.monotonic() - began))

    began = time.monotonic()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps({"clients": clients, "file_bytes": size, "outcomes": dict(Counter(o for o, _ in outcomes)),
                      "slowest_s": round(max(s for _, s in outcomes), 3),
                      "seconds": round(time.monotonic() - began, 3)}), flush=True)
    return 0
