"""Checks a serving path before it is timed: it answers /health, serves every
manifest file with the right Content-Length and sha256, and 404s a missing one."""
import hashlib
import http.client
import time
from urllib.parse import urlsplit


class VerificationError(Exception):
    pass


def get(url: str, timeout: float = 30.0) -> tuple[int, dict, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def wait_until_healthy(url: str, deadline: float, interval: float = 0.5) -> None:
    """Polls GET <url>/health every `interval` seconds until 200 or the
    monotonic deadline; raises with the last cause."""
    last = "no answer"
    while True:
        try:
            status, _, _ = get(url + "/health", timeout=2.0)
            if status == 200:
                return
            last = f"GET /health answered {status}"
        except (OSError, http.client.HTTPException) as e:
            last = f"GET /health failed: {e!r}"
        if time.monotonic() >= deadline:
            raise VerificationError(f"never answered at {url}: {last}")
        time.sleep(interval)


def verify_target(url: str, files: list[dict]) -> str | None:
    """Returns the Server header; raises VerificationError naming the file and
    the difference."""
    server = None
    for f in files:
        status, headers, body = get(f"{url}/files/{f['name']}")
        server = headers.get("server", server)
        if status != 200:
            raise VerificationError(f"{f['name']}: status {status}, expected 200")
        length = headers.get("content-length")
        if length is None:
            raise VerificationError(f"{f['name']}: no Content-Length (ab needs it)")
        if int(length) != f["size"]:
            raise VerificationError(f"{f['name']}: Content-Length {length}, expected {f['size']}")
        digest = hashlib.sha256(body).hexdigest()
        if digest != f["sha256"]:
            raise VerificationError(f"{f['name']}: body sha256 {digest[:16]}..., expected {f['sha256'][:16]}... "
                                    f"({len(body)} bytes received)")
    status, _, _ = get(f"{url}/files/gridfs-lab-no-such-file.bin")
    if status != 404:
        raise VerificationError(f"a missing file answered {status}, expected 404")
    return server


def wait_until_serving(url: str, sha256: str, deadline: float) -> None:
    """Polls until the file URL answers 200 with the bytes whose sha256 is
    given (a path back after a fault serves again), or the monotonic
    deadline; raises with the last answer."""
    wait_until_healthy(url.rsplit("/files/", 1)[0], deadline)
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            status, _, body = get(url, timeout=30.0)
            if status == 200 and hashlib.sha256(body).hexdigest() == sha256:
                return
            last = f"status {status}, {len(body)} bytes"
        except (OSError, http.client.HTTPException) as e:
            last = repr(e)
        time.sleep(0.5)
    raise VerificationError(f"{url} did not serve the file whole before the deadline: {last}")
