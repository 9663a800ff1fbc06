"""Flask + PostgreSQL serving path: GET|HEAD /files/<name> streams the
newest revision of <name> out of PostgreSQL tables laid out as GridFS lays
out its collections (loadgen/labfiles/postgres_layout.py; the seed
creates them): `files` (one row per revision) and `chunks` (one bytea row
per 255 KiB chunk, primary key (file_id, n)). The HTTP semantics are
services/python-common/lab_http, shared with the GridFS Flask path, so the
two compare store against store.

Hot path per request: one indexed lookup in files, then one query per
1.25 MiB of the chunks the answer needs (lab_http.chunks.read_plan: a file
up to that size is one query), each on a pooled connection held for that
query only (a slow client holds no connection).

Environment: POSTGRES_URL (postgresql://user:password@host:5432/db),
POSTGRES_POOL_SIZE (connections per worker, default 10),
POSTGRES_CONNECT_TIMEOUT (seconds, default 2), POSTGRES_STATEMENT_TIMEOUT
(seconds, default 5).
"""
import os

import psycopg

from lab_http import StoredFile, before_deadline, create_app
from lab_http.chunks import checked_file, chunk_span, read_plan, slice_chunks
from pool import Pool

SERVICE = "gridfs-lab-flask-postgres"
FIND_FILE = ("SELECT id, length, chunk_size, upload_date, content_type FROM files"
             " WHERE filename = %s ORDER BY upload_date DESC, id DESC LIMIT 1")
READ_CHUNKS = "SELECT n, data FROM chunks WHERE file_id = %s AND n BETWEEN %s AND %s ORDER BY n"


class ConfigError(Exception):
    pass


def setting(name: str, default: str, minimum: float) -> float:
    text = os.environ.get(name, default)
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ConfigError(f"flask-postgres: {name}={text!r} is not a number >= {minimum:g}")
    return value


def postgres_url() -> str:
    url = os.environ.get("POSTGRES_URL", "")
    if not url:
        raise ConfigError("flask-postgres: POSTGRES_URL is not set; expected e.g. "
                          "postgresql://lab:<password>@postgres:5432/lab")
    if not url.startswith(("postgresql://", "postgres://")):
        raise ConfigError("flask-postgres: POSTGRES_URL must start with postgresql:// (value not shown: "
                          "it may hold a password)")
    try:
        psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error as error:
        raise ConfigError(f"flask-postgres: POSTGRES_URL cannot be parsed ({type(error).__name__}; "
                          "value not shown: it may hold a password)") from None
    return url


class PostgresStore:
    kind = "PostgreSQL"

    def __init__(self, pool: Pool):
        self.pool = pool

    def within(self, deadline: float):
        # The pool closes a connection a timeout interrupted and gives its
        # slot back, so gevent's timeout may land anywhere in it.
        return before_deadline(deadline)

    def find(self, name: str) -> StoredFile | None:
        rows = self.pool.query(FIND_FILE, (name,))
        if not rows:
            return None
        file_id, length, chunk_size, uploaded, content_type = rows[0]
        return checked_file(f"file {file_id}", f"{file_id:x}", length, chunk_size, uploaded, content_type,
                            file_id)

    def read(self, stored: StoredFile, start: int, end: int):
        file_id, chunk_size = stored.location
        first, last = chunk_span(chunk_size, start, end)
        rows = self._rows(file_id, read_plan(stored.length, chunk_size, first, last))
        yield from slice_chunks(rows, stored.length, chunk_size, start, end, f"file {file_id}")

    def _rows(self, file_id: int, plan: list[tuple[int, int]]):
        """Rows (n, data), one query per read of the plan; stops at a short
        read (slice_chunks names the missing chunk)."""
        for first, last in plan:
            batch = self.pool.query(READ_CHUNKS, (file_id, first, last))
            yield from batch
            if len(batch) != last - first + 1:
                return


def make_store() -> PostgresStore:
    return PostgresStore(Pool(
        postgres_url(), size=int(setting("POSTGRES_POOL_SIZE", "10", 1)),
        connect_timeout=int(setting("POSTGRES_CONNECT_TIMEOUT", "2", 1)),
        statement_timeout=setting("POSTGRES_STATEMENT_TIMEOUT", "5", 0.1),
        application_name=SERVICE))


app = create_app(make_store(), SERVICE)
