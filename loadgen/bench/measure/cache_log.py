"""A path that caches (nginx-cache) logs one word per request, its cache
status (HIT, MISS, EXPIRED, ...), and serves that log at GET /cache-log.
bench reads what a case's counted repetitions added, by byte offset, and
counts hits and misses: a row whose requests were not nearly all hits
says so (flag cache-missed). Any path may offer the same log."""
import http.client
from collections import Counter
from urllib.parse import urlsplit

PATH = "/cache-log"
HIT_RATIO_WANTED = 0.99


class CacheLogError(Exception):
    pass


def _get(url: str, offset: int, timeout: float = 10.0) -> tuple[int, bytes]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        conn.request("GET", PATH, headers={"Range": f"bytes={offset}-"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    except (OSError, http.client.HTTPException) as e:
        raise CacheLogError(f"GET {url}{PATH} failed: {e!r}") from e
    finally:
        conn.close()


def new_words(url: str, offset: int) -> tuple[list[str], int] | None:
    """The words logged since `offset` and the new offset; None when the
    path has no cache log."""
    status, body = _get(url, offset)
    if status in (403, 404, 405):  # no such log on this path
        return None
    if status == 416:      # nothing new since the offset
        return [], offset
    if status == 206:
        return body.decode("ascii", errors="replace").split(), offset + len(body)
    if status == 200:      # an empty log, or a Range ignored: the whole log
        return body[offset:].decode("ascii", errors="replace").split(), len(body)
    raise CacheLogError(f"GET {url}{PATH} answered {status}")


def counts(words: list[str]) -> dict:
    """{"hits", "misses", "other", "hit_ratio"} of the requests a case made."""
    c = Counter(words)
    hits, misses = c.pop("HIT", 0), c.pop("MISS", 0)
    total = hits + misses + sum(c.values())
    return {"hits": hits, "misses": misses, "other": dict(c), "requests": total,
            "hit_ratio": round(hits / total, 5) if total else None}
