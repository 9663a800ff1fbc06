"""`python -m bench fetch URL FILE CLIENTS`: CLIENTS clients at once each
download URL whole and check its bytes against FILE on the files volume
(make overload's large file: 50 clients, 100 MB, a 256 MB container).
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


def download(url: str, sha256: str) -> str:
    """One GET, streamed and hashed: 'whole', '200 cut short', the status, or
    the client error's kind."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=READ_TIMEOUT_S)
    try:
        conn.request("GET", parts.path)
        resp = conn.getresponse()
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
    if len(args) != 3:
        print("usage: python -m bench fetch URL FILE CLIENTS", file=sys.stderr)
        return 2
    url, name, clients = args[0], args[1], int(args[2])
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
        outcome = download(url, sha256)
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
