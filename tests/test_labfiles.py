"""What the seed and bench read alike (loadgen/labfiles): FILE_SIZES and
FILE_SET as the one parser reads them for both (the seed writes the files,
bench's settings check refuses a bad value first), and the PostgreSQL layout
as rendered for the seed's tables and for bench's schema of its own. The DDL
run on a real server is the native tests' (test_seed.py, test_stores.py,
test_flask_postgres.py)."""
import re

import pytest

from labfiles import postgres_layout
from labfiles.sizes import Spec, SpecError, parse_set, parse_sizes


# --- FILE_SIZES -------------------------------------------------------------------
def test_parse_sizes():
    assert parse_sizes("1KB 100kb, 1MB 7B 3gb") == [("1KB", 1024), ("100KB", 102400), ("1MB", 1048576), ("7B", 7),
                                                    ("3GB", 3 * 1024 ** 3)]
    assert parse_sizes(" 01KB ") == [("1KB", 1024)]


@pytest.mark.parametrize("bad, why", [
    ("", "no size"), (" , ", "no size"), ("1KB 2XB", "cannot read '2XB'"), ("KB", "cannot read 'KB'"),
    ("1 KB", "cannot read '1'"), ("1KiB", "cannot read"), ("1.5MB", "cannot read"), ("1TB", "cannot read"),
    ("1KB 1kb", "1KB twice"), ("1KB 01KB", "1KB twice"),
])
def test_a_bad_file_sizes_is_named_with_what_is_wrong(bad, why):
    with pytest.raises(SpecError) as error:
        parse_sizes(bad)
    assert str(error.value).startswith(f"FILE_SIZES={bad!r}: ") and why in str(error.value)
    assert str(error.value).endswith("expected sizes like 1KB 100KB 1MB, each once (B, KB, MB or GB; KB = 1024 bytes)")


# --- FILE_SET ---------------------------------------------------------------------
def test_parse_set():
    assert parse_set("10000x1KB-30KB") == Spec("10000x1KB-30KB", 10000, 1024, 30720)
    assert parse_set(" 60X1kb-40kb ") == Spec("60x1KB-40KB", 60, 1024, 40960)
    assert parse_set("100x1MB") == Spec("100x1MB", 100, 1048576, 1048576)
    assert parse_set("1x7b-7B") == Spec("1x7B-7B", 1, 7, 7)
    assert parse_set("1000000x1B-1GB").count == 1_000_000
    for off in ("", "  ", "off", "OFF"):
        assert parse_set(off) is None


@pytest.mark.parametrize("bad, why", [
    ("10000x30KB-1KB", "the smallest size comes first"), ("0x1KB", "the count must be 1 to"),
    ("1000001x1KB", "the count must be 1 to 1,000,000"), ("10x0B-1KB", "at least 1B"), ("5x0B", "at least 1B"),
    ("10000", "expected COUNTxMIN-MAX"), ("x1KB", "expected"), ("10x1QB", "expected"), ("10x1KB-", "expected"),
    ("10x1KB-30KB-40KB", "expected"), ("5x1KB-30KB extra", "expected"), ("on", "expected"),
])
def test_a_bad_file_set_is_named_with_what_is_wrong(bad, why):
    with pytest.raises(SpecError) as error:
        parse_set(bad)
    assert str(error.value).startswith(f"FILE_SET={bad!r}: ") and why in str(error.value)
    assert "such as 10000x1KB-30KB" in str(error.value)


def test_a_message_names_the_variable_it_is_given():
    with pytest.raises(SpecError, match=r"^WRITE_SET='lots': "):
        parse_set("lots", "WRITE_SET")
    with pytest.raises(SpecError, match=r"^WRITE_SIZES='1XB': "):
        parse_sizes("1XB", "WRITE_SIZES")


# --- the PostgreSQL layout ----------------------------------------------------------
SEEDS = postgres_layout.tables()
BENCHS = postgres_layout.tables("bench_writes", served=False, chunks_first=True)
# Every place a statement names a table.
TABLE_NAMED = re.compile(r"(?:CREATE TABLE IF NOT EXISTS|ALTER TABLE|REFERENCES|CREATE INDEX IF NOT EXISTS \w+ ON) "
                         r"([\w.]+)")


def columns(sql: str) -> dict[str, dict[str, str]]:
    """Each table's columns and their definitions, from its CREATE TABLE."""
    found = {}
    for table, body in re.findall(r"CREATE TABLE IF NOT EXISTS ([\w.]+) \((.*?)\n\);", sql, re.S):
        lines = [line.strip().rstrip(",") for line in body.strip().splitlines()]
        found[table] = {line.split()[0]: line.split(None, 1)[1] for line in lines if not line.startswith("PRIMARY")}
    return found


def test_the_seeds_tables_have_what_flask_postgres_reads():
    seeds = columns(SEEDS)
    assert list(seeds) == ["files", "chunks"] and "CREATE SCHEMA" not in SEEDS
    assert list(seeds["files"]) == ["id", "filename", "length", "chunk_size", "upload_date", "content_type", "sha256"]
    assert list(seeds["chunks"]) == ["file_id", "n", "data"]
    assert "ON files (filename, upload_date DESC, id DESC)" in SEEDS  # flask-postgres's newest revision
    assert "ALTER TABLE chunks ALTER COLUMN data SET STORAGE EXTERNAL" in SEEDS


def test_benchs_tables_are_the_seeds_in_a_schema_of_their_own():
    seeds, benchs = columns(SEEDS), columns(BENCHS)
    assert BENCHS.startswith("CREATE SCHEMA IF NOT EXISTS bench_writes;\n")
    assert len(TABLE_NAMED.findall(BENCHS)) == len(TABLE_NAMED.findall(SEEDS)) == 5
    assert all(name.startswith("bench_writes.") for name in TABLE_NAMED.findall(BENCHS))  # nothing of the seed's
    files = benchs["bench_writes.files"]
    assert list(files) == ["id", "filename", "length", "sha256"]
    assert all(files[name] == seeds["files"][name] for name in files if name != "id")
    assert files["id"] == seeds["files"]["id"].replace("ALWAYS", "BY DEFAULT")  # bench draws a file's id first
    chunks = benchs["bench_writes.chunks"]
    assert chunks == {**seeds["chunks"], "file_id": seeds["chunks"]["file_id"].replace("files", "bench_writes.files")
                      + " DEFERRABLE INITIALLY DEFERRED"}  # the chunks go in before their file's row


@pytest.mark.parametrize("schema", ["bench writes", "x; DROP TABLE files", "Bench", ""])
def test_a_schema_name_is_an_identifier(schema):
    with pytest.raises(ValueError, match="expected a lowercase SQL identifier"):
        postgres_layout.tables(schema)
