"""Seeds the lab: one file per size in FILE_SIZES, with deterministic
pseudo-random bytes (a repeated character would compress and flatter), into
GridFS (by filename, with contentType and sha256 metadata), onto the files
volume for the static servers and, when POSTGRES_URL is set, into
PostgreSQL (postgres_store.py: the GridFS layout in tables), reads every
copy back, settles the databases (settle()), then writes a manifest the
load generator checks every answer against, naming the stores that hold
each file. Idempotent: an unchanged file is not written again. FILE_SET
adds a working set of many files (file_set.py), in the same stores and the
manifest's `file_set`.

Environment: MONGO_URI, GRIDFS_DB, FILE_SIZES (e.g. "1KB 100KB 1MB"),
FILES_DIR (default /data/files), SEED_MONGO_TIMEOUT (seconds, default 120),
POSTGRES_URL (optional, postgresql://user:password@host:5432/db),
SEED_POSTGRES_TIMEOUT (seconds, default 120), FILE_SET (e.g. "10000x1KB-30KB"
or "off"), BENCH_PROFILE (a file set for full only). FILE_SIZES and FILE_SET
are read by labfiles/sizes.py, as bench's settings check reads them.
"""
import hashlib
import json
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gridfs
import psycopg
import pymongo
from pymongo.database import Database
from pymongo.errors import ConnectionFailure, PyMongoError

from labfiles.sizes import Spec, SpecError, parse_set, parse_sizes

from . import bad_documents, file_set, postgres_store
from .file_set import CONTENT_TYPE, FileSetError

# One round trip at most this long: the file set's largest deletes and its
# sorted chunk cursor take seconds on FerretDB.
MONGO_SOCKET_TIMEOUT_MS = 300_000
# Settling the databases after the writes: VACUUM ANALYZE of a 10,000-file
# set, or a checkpoint, takes seconds; this long is a fault.
SETTLE_TIMEOUT_S = 300
# Chunks per reply when reading GridFS back: 16 x 255 KiB, about 4 MB.
CHUNKS_PER_BATCH = 16


class SeedError(Exception):
    pass


@dataclass
class ManifestEntry:
    name: str
    size: int
    sha256: str
    content_type: str = CONTENT_TYPE
    stores: list[str] = field(default_factory=list)  # "gridfs", "disk", "postgres": read back and verified


def file_bytes(size: int) -> bytes:
    """The same bytes for a size on every run and machine."""
    return random.Random(f"gridfs-lab:{size}").randbytes(size)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def connect(uri: str, timeout: float) -> pymongo.MongoClient:
    client = pymongo.MongoClient(uri, serverSelectionTimeoutMS=2000, connectTimeoutMS=5000,
                                 socketTimeoutMS=MONGO_SOCKET_TIMEOUT_MS)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.admin.command("ping")
            return client
        except ConnectionFailure as e:  # not up yet; any other error is final
            if time.monotonic() > deadline:
                raise SeedError(f"mongo at {uri} did not answer within {timeout:.0f} s: {e}") from e
            print(f"seed: waiting for mongo at {uri} ...", flush=True)
            time.sleep(1)


def postgres_location(url: str) -> str:
    """user@host:port/db, for messages: never the password."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        raise SeedError("POSTGRES_URL cannot be parsed; expected postgresql://user:password@host:5432/db "
                        "(value not shown: it may hold a password)") from None
    return (f"{params.get('user', '')}@{params.get('host', 'localhost')}:{params.get('port', 5432)}"
            f"/{params.get('dbname', '')}")


def connect_postgres(url: str, timeout: float) -> psycopg.Connection:
    where = postgres_location(url)
    deadline = time.monotonic() + timeout
    while True:
        try:
            return psycopg.connect(url, connect_timeout=2, autocommit=True, application_name="gridfs-lab-seed")
        except psycopg.OperationalError as e:  # not up yet (or refusing us): retried until the deadline
            if time.monotonic() > deadline:
                raise SeedError(f"postgres at {where} did not answer within {timeout:.0f} s: "
                                f"{' '.join(str(e).split())}") from e
            print(f"seed: waiting for postgres at {where} ...", flush=True)
            time.sleep(1)


def store_in_gridfs(bucket: gridfs.GridFSBucket, entry: ManifestEntry, data: bytes) -> str:
    newest = next(iter(bucket.find({"filename": entry.name}).sort("uploadDate", -1).limit(1)), None)
    if newest is not None and newest.length == entry.size and \
            (newest.metadata or {}).get("sha256") == entry.sha256:
        return "unchanged"
    for old in bucket.find({"filename": entry.name}):
        bucket.delete(old._id)
    started = time.perf_counter()
    bucket.upload_from_stream(entry.name, data,
                              metadata={"contentType": entry.content_type, "sha256": entry.sha256})
    seconds = time.perf_counter() - started
    return f"written at {entry.size / 1e6 / seconds:.1f} MB/s ({seconds * 1000:.1f} ms)"


def store_on_disk(files_dir: Path, entry: ManifestEntry, data: bytes) -> str:
    path = files_dir / entry.name
    if path.exists() and path.stat().st_size == entry.size and sha256(path.read_bytes()) == entry.sha256:
        return "unchanged"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return "written"


def gridfs_sha256(database: Database, name: str) -> str:
    """The sha256 of the newest revision of `name` in the fs bucket, read in
    batches of CHUNKS_PER_BATCH chunks. The driver's own reader leaves the
    batch size to the server, and FerretDB, unlike MongoDB, does not cap a
    reply at 16 MiB: a 100 MB file came back in one 65 MB reply, over the
    48 MB the driver accepts."""
    grid_out = gridfs.GridFSBucket(database).open_download_stream_by_name(name)
    digest, n = hashlib.sha256(), 0
    for chunk in database["fs.chunks"].find({"files_id": grid_out._id}, {"n": 1, "data": 1}, sort=[("n", 1)],
                                            batch_size=CHUNKS_PER_BATCH):
        if chunk["n"] != n:
            raise SeedError(f"{name}: GridFS chunk {n} missing (found chunk {chunk['n']})")
        digest.update(chunk["data"])
        n += 1
    return digest.hexdigest()


def check_back(database: Database, files_dir: Path, entry: ManifestEntry,
               postgres: psycopg.Connection | None = None) -> None:
    """Every copy read back and compared by sha256; entry.stores names them."""
    copies = {"gridfs": lambda: gridfs_sha256(database, entry.name),
              "disk": lambda: sha256((files_dir / entry.name).read_bytes())}
    if postgres is not None:
        copies["postgres"] = lambda: sha256(postgres_store.read_back(postgres, entry.name))
    for store, digest_of in copies.items():
        digest = digest_of()
        if digest != entry.sha256:
            raise SeedError(f"{entry.name} read back from {store} has sha256 {digest}, expected {entry.sha256}")
    entry.stores = list(copies)


def settle(database: Database, postgres: psycopg.Connection | None) -> str:
    """Does now what the databases would do on their own in the minute
    after the writes, while the first cases are timed. On FerretDB
    (PostgreSQL underneath), autovacuum of the seeded tables ran 40-70 s
    after a seed and cut nginx-gridfs's rate by about a quarter while it
    ran; the first repetition of every database path's first case read
    low. FerretDB's `compact` is its VACUUM ANALYZE of a collection's table.
    On MongoDB, fsync: the checkpoint WiredTiger would take within 60 s.
    The lab's PostgreSQL store: VACUUM ANALYZE of its two tables."""
    started = time.monotonic()
    if "ferretdbVersion" in database.client.admin.command("buildInfo"):
        for collection in ("fs.files", "fs.chunks"):
            database.command("compact", collection)
        done = ["GridFS compacted (FerretDB: VACUUM ANALYZE)"]
    else:
        database.client.admin.command("fsync")
        done = ["GridFS checkpointed (fsync)"]
    if postgres is not None:
        postgres_store.settle(postgres, SETTLE_TIMEOUT_S)
        done.append("postgres vacuumed and analyzed")
    return f"{', '.join(done)} in {time.monotonic() - started:.1f} s"


def file_set_spec(env=os.environ) -> Spec | None:
    """FILE_SET, for BENCH_PROFILE=full only: the other profiles time no
    working set."""
    spec = parse_set(env.get("FILE_SET", ""))
    profile = env.get("BENCH_PROFILE", "").strip() or "standard"
    if spec is not None and profile != "full":
        print(f"seed: BENCH_PROFILE={profile}: no file set (FILE_SET={spec.text} is for the full profile)", flush=True)
        return None
    return spec


def write_manifest(files_dir: Path, entries: list[ManifestEntry], db: str, seconds: float | None = None,
                   set_manifest: dict | None = None) -> None:
    """seconds: the seed's own wall time, which bench records among a run's
    phases; set_manifest: file_set.load's, None when there is no set."""
    manifest = {"gridfs_db": db, "files": [asdict(e) for e in entries], "file_set": set_manifest}
    if seconds is not None:
        manifest["seconds"] = round(seconds, 1)
    tmp = files_dir / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    tmp.replace(files_dir / "manifest.json")


def check_writable(files_dir: Path) -> None:
    """The files volume must be the seed's: one made by an earlier version of
    the lab, whose seed ran as root, is not (its files are root's)."""
    probe = files_dir / f".seed-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except PermissionError as error:
        sys.exit(f"seed: error: {files_dir} (the files volume) is not writable by uid {os.getuid()} ({error}): "
                 "it was made by an earlier version of the lab, which ran the seed as root. Remove it "
                 "(docker compose down -v, or docker volume rm <project>_files) and run again.")


def main() -> None:
    started = time.monotonic()
    uri = os.environ.get("MONGO_URI", "mongodb://mongo:27017")
    db = os.environ.get("GRIDFS_DB", "lab")
    files_dir = Path(os.environ.get("FILES_DIR", "/data/files"))
    sizes = parse_sizes(os.environ.get("FILE_SIZES", "1KB 100KB 1MB"))
    spec = file_set_spec()
    files_dir.mkdir(parents=True, exist_ok=True)
    check_writable(files_dir)

    client = connect(uri, float(os.environ.get("SEED_MONGO_TIMEOUT", "120")))
    bucket = gridfs.GridFSBucket(client[db])
    postgres_url = os.environ.get("POSTGRES_URL", "")
    postgres = None
    if postgres_url:
        postgres = connect_postgres(postgres_url, float(os.environ.get("SEED_POSTGRES_TIMEOUT", "120")))
        postgres_store.create_schema(postgres)
    entries = []
    for label, size in sizes:
        data = file_bytes(size)
        entry = ManifestEntry(name=f"{label}.bin", size=size, sha256=sha256(data))
        gridfs_state = store_in_gridfs(bucket, entry, data)
        disk_state = store_on_disk(files_dir, entry, data)
        states = f"GridFS {gridfs_state}; disk {disk_state}"
        if postgres is not None:
            states += f"; postgres {postgres_store.store(postgres, entry.name, data, entry.sha256, CONTENT_TYPE)}"
        print(f"seed: {entry.name} ({size} bytes): {states}", flush=True)
        entries.append(entry)
    for entry in entries:
        check_back(client[db], files_dir, entry, postgres)
    print(f"seed: {bad_documents.store(client[db])}", flush=True)
    set_stores = [file_set.GridFSSet(client[db]), file_set.DiskSet(files_dir)]
    if postgres is not None:
        set_stores.append(file_set.PostgresSet(postgres))
    set_manifest = file_set.load(spec, set_stores)  # no spec: any set-* files left from another run go
    print(f"seed: settled before any timing: {settle(client[db], postgres)}", flush=True)
    write_manifest(files_dir, entries, db, time.monotonic() - started, set_manifest)
    in_postgres = f", in postgres {postgres_location(postgres_url)}" if postgres is not None else ""
    print(f"seed: {len(entries)} files verified by sha256 in GridFS db {db!r}{in_postgres} and in {files_dir}",
          flush=True)


def run() -> None:
    """main(), its failures one line on stderr and exit status 1."""
    try:
        main()
    except (SeedError, SpecError, FileSetError, PyMongoError, OSError) as e:
        sys.exit(f"seed: error: {e}")
    except psycopg.Error as e:  # libpq's messages carry no password
        sys.exit(f"seed: error: postgres: {' '.join(str(e).split())}")
