"""The lab's files in PostgreSQL: GridFS's layout in two tables, so that the
lab compares store against store. `files` holds one row per revision (the
newest of a filename is the file, as in GridFS), `chunks` one bytea row per
chunk of CHUNK_SIZE bytes with primary key (file_id, n), as fs.files and
fs.chunks do. The seed writes it in the database's own schema
(loadgen/seed/postgres_store.py), where services/flask-postgres reads it; bench's
write phase in a schema of its own (bench/databases/stores.py). One
rendering for both, so the two stay the same layout; the table and column
names are what flask-postgres reads."""
import re

CHUNK_SIZE = 255 * 1024  # GridFS's default chunk size
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def tables(schema: str | None = None, *, served: bool = True, chunks_first: bool = False) -> str:
    """The layout's DDL, idempotent (IF NOT EXISTS throughout).

    schema: created if need be and the tables put in it; None: the
    connection's search path's (public).
    served: the columns a serving path answers from beside the bytes
    (chunk_size, content_type, upload_date), a file's newest revision its
    latest upload_date; without them, its highest id.
    chunks_first: a file's chunks go in before its row (which carries the
    sha256, known only once every chunk has been read): the foreign key is
    checked at commit, and the row takes the id its writer drew from the
    sequence beforehand.

    chunks.data: STORAGE EXTERNAL keeps the chunks out of line but
    uncompressed, as GridFS stores them (the lab's bytes do not compress,
    and compression attempts would only cost the writer)."""
    if schema is not None and not SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"schema {schema!r}: expected a lowercase SQL identifier")
    at = f"{schema}." if schema else ""
    identity = "BY DEFAULT" if chunks_first else "ALWAYS"
    metadata = ("    chunk_size integer NOT NULL CHECK (chunk_size > 0),\n"
                "    upload_date timestamptz NOT NULL DEFAULT clock_timestamp(),\n"
                "    content_type text,\n") if served else ""
    newest = "upload_date DESC, id DESC" if served else "id DESC"
    deferred = " DEFERRABLE INITIALLY DEFERRED" if chunks_first else ""
    return (f"CREATE SCHEMA IF NOT EXISTS {schema};\n" if schema else "") + f"""\
CREATE TABLE IF NOT EXISTS {at}files (
    id bigint GENERATED {identity} AS IDENTITY PRIMARY KEY,
    filename text NOT NULL,
    length bigint NOT NULL CHECK (length >= 0),
{metadata}    sha256 text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{{64}}$')
);
CREATE INDEX IF NOT EXISTS files_newest_revision ON {at}files (filename, {newest});
CREATE TABLE IF NOT EXISTS {at}chunks (
    file_id bigint NOT NULL REFERENCES {at}files (id) ON DELETE CASCADE{deferred},
    n integer NOT NULL CHECK (n >= 0),
    data bytea NOT NULL,
    PRIMARY KEY (file_id, n)
);
ALTER TABLE {at}chunks ALTER COLUMN data SET STORAGE EXTERNAL;
"""
