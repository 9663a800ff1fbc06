"""The seed's PostgreSQL store: the lab's files in GridFS's layout as
tables (labfiles/postgres_layout.py), in the database's own schema, where
services/flask-postgres reads them."""
import hashlib
import time
from collections.abc import Iterable, Iterator

import psycopg

from labfiles import postgres_layout
from labfiles.postgres_layout import CHUNK_SIZE

# Idempotent, and serialised by an advisory lock should two seeds meet.
SCHEMA = "SELECT pg_advisory_xact_lock(hashtext('gridfs-lab schema'));\n" + postgres_layout.tables()
NEWEST = ("SELECT f.id, f.length, f.sha256, f.content_type,"
          " (SELECT count(*) FROM chunks c WHERE c.file_id = f.id),"
          " (SELECT coalesce(sum(length(c.data)), 0) FROM chunks c WHERE c.file_id = f.id)"
          " FROM files f WHERE f.filename = %s ORDER BY f.upload_date DESC, f.id DESC LIMIT 1")


def create_schema(connection: psycopg.Connection) -> None:
    with connection.transaction():
        connection.execute(SCHEMA)


def settle(connection: psycopg.Connection, timeout_s: float) -> None:
    """VACUUM ANALYZE of both tables, now rather than by autovacuum in the
    minute after the writes, while cases are timed (seed.py: settle)."""
    connection.execute(f"SET statement_timeout = {int(timeout_s * 1000)}")
    try:
        connection.execute("VACUUM (ANALYZE) files, chunks")
    finally:
        connection.execute("RESET statement_timeout")


def chunk_count(size: int, chunk_size: int = CHUNK_SIZE) -> int:
    return -(-size // chunk_size)


def insert_file(connection: psycopg.Connection, name: str, data: bytes, content_type: str | None,
                chunk_size: int = CHUNK_SIZE) -> int:
    """A new revision of `name` (older ones stay); its id."""
    digest = hashlib.sha256(data).hexdigest()
    file_id = connection.execute(
        "INSERT INTO files (filename, length, chunk_size, content_type, sha256)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id",
        (name, len(data), chunk_size, content_type, digest)).fetchone()[0]
    with connection.cursor() as cursor:
        cursor.executemany("INSERT INTO chunks (file_id, n, data) VALUES (%s, %s, %s)",
                           [(file_id, n, data[n * chunk_size:(n + 1) * chunk_size])
                            for n in range(chunk_count(len(data), chunk_size))])
    return file_id


def store(connection: psycopg.Connection, name: str, data: bytes, sha256: str, content_type: str) -> str:
    """The file as the newest revision of `name`, unless it is already
    there whole; the state, for the seed's log."""
    newest = connection.execute(NEWEST, (name,)).fetchone()
    if newest is not None:
        _, length, digest, stored_type, chunks, stored_bytes = newest
        if (length, digest, stored_type, chunks, stored_bytes) == \
                (len(data), sha256, content_type, chunk_count(len(data)), len(data)):
            return "unchanged"
    started = time.perf_counter()
    with connection.transaction():  # readers see the old revision or the new one, never half
        connection.execute("DELETE FROM files WHERE filename = %s", (name,))
        insert_file(connection, name, data, content_type)
    seconds = time.perf_counter() - started
    return f"written at {len(data) / 1e6 / seconds:.1f} MB/s ({seconds * 1000:.1f} ms)"


def read_back(connection: psycopg.Connection, name: str) -> bytes:
    """The newest revision of `name`, its chunks joined in order (the whole
    file: the seed's files are small)."""
    row = connection.execute("SELECT id, chunk_size FROM files WHERE filename = %s"
                             " ORDER BY upload_date DESC, id DESC LIMIT 1", (name,)).fetchone()
    if row is None:
        return b""
    chunks = connection.execute("SELECT n, data FROM chunks WHERE file_id = %s ORDER BY n",
                                (row[0],), binary=True).fetchall()
    if [n for n, _ in chunks] != list(range(len(chunks))):
        return b""
    return b"".join(data for _, data in chunks)


# The seed's file set, in batches: one query lists it, one transaction
# writes a batch (one INSERT for the rows, one COPY for the chunks), one
# cursor reads it back.
def list_revisions(connection: psycopg.Connection, prefix: str) -> list[tuple[int, str, int, str]]:
    """(id, filename, length, sha256) of every revision of every file whose
    name starts with `prefix`, each name's newest first."""
    return connection.execute(
        "SELECT id, filename, length, sha256 FROM files WHERE starts_with(filename, %s)"
        " ORDER BY filename, upload_date DESC, id DESC", (prefix,)).fetchall()


def delete_revisions(connection: psycopg.Connection, ids: list[int]) -> None:
    connection.execute("DELETE FROM files WHERE id = ANY(%s)", (ids,))  # chunks go with them (cascade)


def insert_files(connection: psycopg.Connection, files: list[tuple[str, int, str, str | None, Iterable[bytes]]],
                 chunk_size: int = CHUNK_SIZE) -> None:
    """New revisions of (name, length, sha256, content_type, chunks) in one
    transaction; each chunk but the last is chunk_size bytes."""
    with connection.transaction():
        ids = dict(connection.execute(
            "INSERT INTO files (filename, length, chunk_size, content_type, sha256)"
            " SELECT name, length, %s, content_type, sha256"
            " FROM unnest(%s::text[], %s::bigint[], %s::text[], %s::text[]) AS f (name, length, content_type, sha256)"
            " RETURNING filename, id",
            (chunk_size, [f[0] for f in files], [f[1] for f in files], [f[3] for f in files],
             [f[2] for f in files])).fetchall())
        with connection.cursor() as cursor, \
                cursor.copy("COPY chunks (file_id, n, data) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "int4", "bytea"])
            for name, _, _, _, chunks in files:
                for n, data in enumerate(chunks):
                    copy.write_row((ids[name], n, data))


def read_newest(connection: psycopg.Connection, prefix: str) -> Iterator[tuple[str, bytes]]:
    """(filename, chunk) for every chunk of the newest revision of every
    file whose name starts with `prefix`, a file's chunks together and in
    order, through one server-side cursor; a chunk out of sequence ends the
    file's bytes there."""
    with connection.transaction(), connection.cursor("read_newest", binary=True) as cursor:
        cursor.itersize = 100
        cursor.execute(
            "SELECT f.filename, c.n, c.data FROM (SELECT DISTINCT ON (filename) id, filename FROM files"
            "  WHERE starts_with(filename, %s) ORDER BY filename, upload_date DESC, id DESC) f"
            " JOIN chunks c ON c.file_id = f.id ORDER BY f.filename, c.n", (prefix,))
        name, expected_n = None, 0
        for filename, n, data in cursor:
            if filename != name:
                name, expected_n = filename, 0
            if n == expected_n:
                expected_n += 1
                yield filename, data
