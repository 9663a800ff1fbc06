"""The seed's file set (FILE_SET, read by labfiles/sizes.py): COUNT files of
sizes drawn uniformly from [MIN, MAX], named set-00000.bin, set-00001.bin
..., the working set a run requests in random order. Loaded in batches
into every store the hot files go to (GridFS in its own layout, the files
volume, PostgreSQL in postgres_store's), so that 10,000 files take seconds
rather than the minutes of one upload each; then read back whole and
checked by sha256.

Deterministic: the sizes depend only on MIN and MAX (so 60x1KB-30KB is the
first 60 files of 10000x1KB-30KB: a smaller or larger count writes or
removes only the difference), a file's bytes only on its name and size.
Idempotent: each store is listed in one query; what is already there is not
written again, and set-* files that are not in the set are removed (files
not named set-* are never touched)."""
import hashlib
import random
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

import psycopg
import pymongo
from bson import ObjectId

from labfiles.postgres_layout import CHUNK_SIZE  # 255 KiB, GridFS's default
from labfiles.sizes import Spec

from . import postgres_store

CONTENT_TYPE = "application/octet-stream"  # the hot files' type too
PREFIX = "set-"
# A batch: one insert_many (GridFS) or one transaction (PostgreSQL).
BATCH_FILES, BATCH_BYTES = 1000, 16 * 1024 ** 2
READ_BYTES = 256 * 1024 ** 2  # GridFS chunks per sorted cursor
PROGRESS_EVERY = 5.0  # seconds


class FileSetError(Exception):
    """A store does not hold the set."""


@dataclass(frozen=True)
class SetFile:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Stored:
    """One revision of a set-* file in a store, as its listing shows it."""
    id: object  # the store's own: an ObjectId, a row id, a path
    name: str
    length: int
    sha256: str | None


def file_chunks(name: str, size: int) -> Iterator[bytes]:
    """A set file's bytes, chunk by chunk: pseudo-random (incompressible),
    the same on every machine, different for every name."""
    rng = random.Random(f"gridfs-lab-set:{name}:{size}")
    for start in range(0, size, CHUNK_SIZE):
        yield rng.randbytes(min(CHUNK_SIZE, size - start))


def set_name(index: int, count: int) -> str:
    """set-00042.bin: flat (every path serves GET /files/<name>), and
    sorting as the index does."""
    return f"{PREFIX}{index:0{max(5, len(str(count - 1)))}d}.bin"


def set_files(spec: Spec) -> list[SetFile]:
    sizes = random.Random(f"gridfs-lab-set:{spec.min_size}-{spec.max_size}")
    files = []
    for i in range(spec.count):
        name, size = set_name(i, spec.count), sizes.randint(spec.min_size, spec.max_size)
        digest = hashlib.sha256()
        for chunk in file_chunks(name, size):
            digest.update(chunk)
        files.append(SetFile(name, size, digest.hexdigest()))
    return files


def batches(files: list[SetFile]) -> Iterator[list[SetFile]]:
    batch, size = [], 0
    for f in files:
        if batch and (len(batch) == BATCH_FILES or size + f.size > BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(f)
        size += f.size
    if batch:
        yield batch


class Progress:
    """'seed: file set: 3000 of 10000 written to GridFS, 12 s elapsed, about
    28 s left', at most every PROGRESS_EVERY seconds."""

    def __init__(self, total: int, what: str):
        self.total, self.what, self.done = total, what, 0
        self.started = self.shown = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self.shown >= PROGRESS_EVERY and self.done < self.total:
            self.shown, elapsed = now, now - self.started
            left = elapsed * (self.total - self.done) / self.done
            print(f"seed: file set: {self.done} of {self.total} {self.what}, {elapsed:.0f} s elapsed, "
                  f"about {left:.0f} s left", flush=True)


class GridFSSet:
    """The set in a GridFS bucket, written in GridFS's own layout (what
    GridFSBucket.upload_from_stream writes, without its two round trips per
    file), so that every serving path reads a set file as it reads a hot one."""
    key, label = "gridfs", "GridFS"

    def __init__(self, db: pymongo.database.Database, bucket: str = "fs"):
        self.files, self.chunks = db[f"{bucket}.files"], db[f"{bucket}.chunks"]
        # GridFS's own indexes: a lookup by name, a file's chunks in order.
        self.files.create_index([("filename", 1), ("uploadDate", 1)])
        self.chunks.create_index([("files_id", 1), ("n", 1)], unique=True)

    def revisions(self) -> list[Stored]:
        """Every revision of every set-* file, each name's newest first."""
        docs = self.files.find({"filename": {"$regex": f"^{PREFIX}"}},
                               {"filename": 1, "length": 1, "uploadDate": 1, "metadata.sha256": 1})
        docs = sorted(docs, key=lambda d: (d["filename"], d.get("uploadDate") or datetime.min, d["_id"]),
                      reverse=True)
        return [Stored(d["_id"], d["filename"], d.get("length"), (d.get("metadata") or {}).get("sha256"))
                for d in docs]

    def remove(self, stale: list[Stored]) -> None:
        ids = [s.id for s in stale]
        for start in range(0, len(ids), 50_000):  # a filter stays far below 16 MB
            some = ids[start:start + 50_000]
            self.files.delete_many({"_id": {"$in": some}})  # first: no file is ever seen without chunks
            self.chunks.delete_many({"files_id": {"$in": some}})

    def write(self, files: list[SetFile], progress: Progress) -> None:
        for batch in batches(files):
            ids = [ObjectId() for _ in batch]
            self.insert_chunks({"_id": ObjectId(), "files_id": file_id, "n": n, "data": data}
                               for file_id, f in zip(ids, batch)
                               for n, data in enumerate(file_chunks(f.name, f.size)))
            # The files documents after their chunks, as GridFS writes them.
            self.files.insert_many([{"_id": file_id, "length": f.size, "chunkSize": CHUNK_SIZE,
                                     "uploadDate": datetime.now(timezone.utc), "filename": f.name,
                                     "metadata": {"contentType": CONTENT_TYPE, "sha256": f.sha256}}
                                    for file_id, f in zip(ids, batch)])
            progress.advance(len(batch))

    def insert_chunks(self, chunks: Iterator[dict]) -> None:
        """In insert_many calls of about BATCH_BYTES (a big file's chunks too)."""
        part, size = [], 0
        for chunk in chunks:
            part.append(chunk)
            size += len(chunk["data"])
            if size >= BATCH_BYTES:
                self.chunks.insert_many(part)
                part, size = [], 0
        if part:
            self.chunks.insert_many(part)

    def read(self, newest: dict[str, Stored]) -> Iterator[tuple[str, bytes]]:
        """Every chunk of the newest revisions, sorted as the unique index
        is, in one cursor per READ_BYTES of files_id range (FerretDB sorts
        in memory); a chunk out of sequence ends the file's bytes there."""
        name_of = {s.id: s.name for s in newest.values()}
        expected_n = {}
        for low, high in self.id_ranges(sorted(newest.values(), key=lambda s: s.id)):
            cursor = self.chunks.find({"files_id": {"$gte": low, "$lte": high}},
                                      {"_id": 0, "files_id": 1, "n": 1, "data": 1},
                                      sort=[("files_id", 1), ("n", 1)])
            for chunk in cursor:
                name = name_of.get(chunk["files_id"])
                if name is not None and chunk["n"] == expected_n.setdefault(name, 0):
                    expected_n[name] += 1
                    yield name, chunk["data"]

    @staticmethod
    def id_ranges(stored: list[Stored]) -> Iterator[tuple[object, object]]:
        """(first, last) ids of runs of files of about READ_BYTES together."""
        first, size = None, 0
        for i, s in enumerate(stored):
            first = s.id if first is None else first
            size += s.length or 0
            if size >= READ_BYTES or i == len(stored) - 1:
                yield first, s.id
                first, size = None, 0


def sha256_of(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class DiskSet:
    """The set on the files volume, for the static servers: one file per name."""
    key, label = "disk", "disk"

    def __init__(self, files_dir: Path):
        self.dir = files_dir

    def revisions(self) -> list[Stored]:
        paths = sorted(p for p in self.dir.glob(f"{PREFIX}*") if p.is_file())
        return [Stored(p, p.name, p.stat().st_size, sha256_of(p)) for p in paths]

    def remove(self, stale: list[Stored]) -> None:
        for s in stale:
            s.id.unlink(missing_ok=True)

    def write(self, files: list[SetFile], progress: Progress) -> None:
        for f in files:
            path = self.dir / f.name
            tmp = path.with_suffix(".tmp")  # set-00001.tmp: a set-* name, so a crash's leftover goes next run
            with tmp.open("wb") as out:
                for chunk in file_chunks(f.name, f.size):
                    out.write(chunk)
            tmp.replace(path)
            progress.advance()

    def read(self, newest: dict[str, Stored]) -> Iterator[tuple[str, bytes]]:
        for name in newest:
            with (self.dir / name).open("rb") as f:
                while piece := f.read(CHUNK_SIZE):
                    yield name, piece


class PostgresSet:
    """The set in PostgreSQL, in postgres_store's layout: one transaction per batch."""
    key, label = "postgres", "postgres"

    def __init__(self, connection: psycopg.Connection):
        self.connection = connection

    def revisions(self) -> list[Stored]:
        return [Stored(*row) for row in postgres_store.list_revisions(self.connection, PREFIX)]

    def remove(self, stale: list[Stored]) -> None:
        postgres_store.delete_revisions(self.connection, [s.id for s in stale])

    def write(self, files: list[SetFile], progress: Progress) -> None:
        for batch in batches(files):
            postgres_store.insert_files(self.connection, [
                (f.name, f.size, f.sha256, CONTENT_TYPE, file_chunks(f.name, f.size)) for f in batch])
            progress.advance(len(batch))

    def read(self, newest: dict[str, Stored]) -> Iterator[tuple[str, bytes]]:
        return postgres_store.read_newest(self.connection, PREFIX)  # after sync: exactly `newest`


def newest_revisions(stored: list[Stored]) -> dict[str, Stored]:
    newest = {}
    for s in stored:  # each name's newest first
        newest.setdefault(s.name, s)
    return newest


def sync(store, files: list[SetFile]) -> tuple[int, int]:
    """The store made to hold exactly `files` among its set-* files; how
    many files were written and how many revisions removed."""
    present = store.revisions()
    newest = newest_revisions(present)
    current = {f.name for f in files if (s := newest.get(f.name)) and (s.length, s.sha256) == (f.size, f.sha256)}
    keep = {newest[name].id for name in current}
    stale = [s for s in present if s.id not in keep]
    to_write = [f for f in files if f.name not in current]
    if stale:  # first: a rewritten disk file keeps its path, and space is freed before writing
        store.remove(stale)
    if to_write:
        store.write(to_write, Progress(len(to_write), f"written to {store.label}"))
    return len(to_write), len(stale)


def verify(store, files: list[SetFile]) -> None:
    """Every file read back from the store (its newest revision, whole) and
    compared by length and sha256; raises naming the first that differs."""
    newest = newest_revisions(store.revisions())
    progress = Progress(len(files), f"verified in {store.label}")
    digests = {}
    for name, data in store.read({f.name: newest[f.name] for f in files if f.name in newest}):
        if name not in digests:
            progress.advance()
            digests[name] = hashlib.sha256()
        digests[name].update(data)
    for f in files:
        if f.name not in newest:
            raise FileSetError(f"{f.name} is missing from {store.label}")
        if newest[f.name].length != f.size:
            raise FileSetError(f"{f.name} in {store.label} has length {newest[f.name].length}, expected {f.size}")
        digest = digests[f.name].hexdigest() if f.name in digests else hashlib.sha256().hexdigest()
        if digest != f.sha256:
            raise FileSetError(f"{f.name} read back from {store.label} has sha256 {digest}, expected {f.sha256}")


def load(spec: Spec | None, stores: list) -> dict | None:
    """The set written to and verified in every store (with no spec: every
    set-* file removed); the manifest's `file_set`."""
    files = set_files(spec) if spec else []
    per_store, removed_any = [], False
    for store in stores:
        started = time.monotonic()
        written, removed = sync(store, files)
        verify(store, files)
        removed_any |= removed > 0
        per_store.append(f"{store.label} {time.monotonic() - started:.1f} s ({written} written, {removed} removed)")
    if spec is None:
        if removed_any:
            print(f"seed: no file set: the last one's set-* files removed: {', '.join(per_store)}", flush=True)
        return None
    total = sum(f.size for f in files)
    print(f"seed: file set {spec.text}: {len(files)} files, {total / 1024 ** 2:.1f} MiB, verified by sha256 in "
          f"{', '.join(per_store)}", flush=True)
    return {"spec": spec.text, "count": spec.count, "min_size": spec.min_size, "max_size": spec.max_size,
            "total_bytes": total, "stores": [store.key for store in stores],
            "files": [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in files]}
