"""The stores of the write phase (seed 002): GridFS, PostgreSQL tables in
GridFS's layout, and plain files on a scratch directory, behind one small
interface the phase runner drives from up to WRITE_THREADS threads at once:
open, durability, reset, write, read, disk_bytes, close.

Each store keeps the phase's files apart from everything else (its own
bucket, schema or file names), so reset() and disk_bytes() concern the
phase's files alone. Every network call has a timeout, and every failure is
a StoreError naming the store and the cause, never a password."""
import hashlib
import os
import queue
import re
import threading
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import gridfs
import psycopg
import pymongo
from pymongo.errors import OperationFailure, PyMongoError

from labfiles import postgres_layout
from labfiles.postgres_layout import CHUNK_SIZE  # GridFS's default chunk size, the SQL store's too

from ..environment import ferretdb_backend

READ_PIECE = 1 << 20         # the filesystem's write and read unit
CONNECT_TIMEOUT_S = 5
IO_TIMEOUT_S = 300           # one 10 MB write or read on a slow, busy server
MESSAGE_LIMIT = 600          # characters of a driver's message kept in a StoreError


class StoreError(Exception):
    pass


def one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= MESSAGE_LIMIT else text[:MESSAGE_LIMIT] + " ..."


class Store:
    """What the phase runner drives. `location` names the store in messages
    (never a password); `failures` are the exceptions `guard` turns into
    StoreError."""
    name: str
    service: str | None = None
    location: str
    failures: tuple[type[BaseException], ...] = ()

    def error(self, cause: str) -> StoreError:
        return StoreError(f"{self.name} at {self.location}: {cause}")

    @contextmanager
    def guard(self, doing: str):
        try:
            yield
        except self.failures as e:
            raise self.error(f"{doing}: {one_line(e)}") from e

    def open(self) -> None:
        raise NotImplementedError

    def durability(self) -> dict:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def write(self, source) -> None:
        raise NotImplementedError

    def read(self, name: str, digest=None) -> int:
        raise NotImplementedError

    def disk_bytes(self) -> dict:
        raise NotImplementedError

    def settle(self) -> str:
        """Makes what was written reach the disk before its size is read (a
        checkpoint, an fsync); says how, or why it could not."""
        raise NotImplementedError

    # Why bench cannot read this store cold (None: it can, with evict()).
    cold_reads_unavailable: str | None = ("the database's own cache goes only when it restarts, which bench (no "
                                          "Docker socket, by design) cannot do")
    eviction = ""  # how evict() empties the caches, for store_setup

    def evict(self, names: list[str]) -> None:
        """Drops the files from every cache bench can reach, for a cold read."""
        raise NotImplementedError

    def close(self) -> None:
        pass


# --- GridFS -------------------------------------------------------------------

def mongo_hosts(uri: str) -> str:
    """The host list of a MongoDB URI, without its user info."""
    return urlsplit(uri).netloc.rpartition("@")[2]


def first_host(hosts: str) -> str:
    host = hosts.split(",")[0]
    if host.startswith("["):  # [IPv6]:port
        return host[1:].partition("]")[0]
    return host.rpartition(":")[0] if ":" in host else host


class GridFSStore(Store):
    """A GridFS bucket of its own, `bench_writes`, in the lab's database:
    the seeded `fs` bucket is never touched."""
    name = "gridfs"
    BUCKET = "bench_writes"
    failures = (PyMongoError,)
    WRITE_CONCERN = {"w": 1, "j": True}

    def __init__(self, uri: str, db: str, threads: int):
        self.uri, self.db_name, self.threads = uri, db, threads
        hosts = mongo_hosts(uri)
        self.location = f"{urlsplit(uri).scheme}://{hosts}"
        self.service = first_host(hosts) or None
        self.client = self.db = self.bucket = None  # set by a successful open()
        self.server: dict = {}
        self._indexed = False
        self._index_lock = threading.Lock()
        self._baseline: int | None = None  # FerretDB: dbStats totalSize without the bucket

    @property
    def collections(self) -> list[str]:
        return [f"{self.BUCKET}.files", f"{self.BUCKET}.chunks"]

    def open(self) -> None:
        with super().guard("cannot connect"):  # not self.guard: that one wants a client already
            # One connection per writer thread, one spare for the runner's own calls.
            client = pymongo.MongoClient(
                self.uri, serverSelectionTimeoutMS=CONNECT_TIMEOUT_S * 1000,
                connectTimeoutMS=CONNECT_TIMEOUT_S * 1000, socketTimeoutMS=IO_TIMEOUT_S * 1000,
                maxPoolSize=max(self.threads, 1) + 1, w=self.WRITE_CONCERN["w"], journal=self.WRITE_CONCERN["j"],
                appname="gridfs-lab-bench-writes")
            self.client, self.db = client, client[self.db_name]
            try:
                self.server = self._describe_server()
            except PyMongoError:
                self.client = self.db = None
                client.close()
                raise
            self.bucket = gridfs.GridFSBucket(self.db, bucket_name=self.BUCKET)
            self._take_baseline()

    @contextmanager
    def guard(self, doing: str):
        if self.client is None:  # a failed open: fail at once, not after another timeout
            raise self.error(f"{doing}: not connected")
        with super().guard(doing):
            yield

    @property
    def is_ferretdb(self) -> bool:
        return self.server.get("product") == "FerretDB"

    def _describe_server(self) -> dict:
        info = self.client.admin.command("buildInfo")
        if "ferretdbVersion" in info:
            return {"product": "FerretDB", "version": info["ferretdbVersion"],
                    "wire_version": info.get("version"), "backend": self._ferretdb_backend()}
        try:
            engine = self.client.admin.command("serverStatus").get("storageEngine") or {}
        except PyMongoError:
            engine = {}
        return {"product": "MongoDB", "version": info.get("version"), "storage_engine": engine.get("name"),
                "persistent": engine.get("persistent")}

    def _ferretdb_backend(self) -> str | None:
        """From the shape of its explain, which needs a collection: ours, or
        the seeded bucket's before our first write."""
        for collection in (self.collections[1], "fs.chunks"):
            try:
                backend = ferretdb_backend(self.db.command({"explain": {"find": collection, "filter": {}}}))
            except PyMongoError:
                backend = None
            if backend:
                return backend
        return None

    def durability(self) -> dict:
        with self.guard("cannot describe the server"):
            # Now, not at open: FerretDB names its backend only once a collection exists.
            self.server = self._describe_server()
        if self.is_ferretdb:
            # Its insert lists writeConcern among the fields it ignores.
            acknowledged = (f"when its {self.server['backend'] or 'backend'} transaction commits: FerretDB v1 "
                            "ignores writeConcern, so a write is as durable as its backend's settings make it "
                            "(not visible over the MongoDB protocol)")
        else:
            acknowledged = "once it is in the server's on-disk journal (j: true)"
        return {"write_concern": self.client.write_concern.document, "server": dict(self.server),
                "acknowledged": acknowledged,
                "per_file": "one insert of its chunks (pymongo buffers up to 48 MB), then its files document",
                "syncs_per_file": (f"2 {self.server.get('backend') or 'backend'} commits (the chunks' insert, "
                                   "then the files document's)" if self.is_ferretdb else
                                   "2 journal commits (j: true on the chunks' insert and on the files document's)"),
                "atomic": "no: the chunks land before their files document; a crash between them leaves orphan "
                          "chunks, and readers see the file only once its files document is there"}

    def settle(self) -> str:
        with self.guard("cannot ask for an fsync"):
            try:
                self.client.admin.command("fsync")
                return "fsync command (the server flushed to disk)"
            except OperationFailure as e:
                return f"not settled: fsync refused ({one_line(e)}); the size is the server's figure as it stands"

    def reset(self) -> None:
        with self.guard("cannot drop the bench_writes bucket"):
            for collection in self.collections:
                self.db.drop_collection(collection)
            self._indexed = False
            self._take_baseline()

    def _ensure_indexes(self) -> None:
        """GridFS's two indexes, made once before the first write: otherwise
        every thread of a first round would race to create them."""
        if self._indexed:
            return
        with self._index_lock:
            if not self._indexed:
                self.db[self.collections[0]].create_index([("filename", 1), ("uploadDate", 1)])
                self.db[self.collections[1]].create_index([("files_id", 1), ("n", 1)], unique=True)
                self._indexed = True

    def write(self, source) -> None:
        with self.guard(f"cannot write {source.name}"):
            self._ensure_indexes()
            self.bucket.upload_from_stream(source.name, source)

    def read(self, name: str, digest=None) -> int:
        count = 0
        with self.guard(f"cannot read {name}"):
            try:
                stream = self.bucket.open_download_stream_by_name(name)
            except gridfs.errors.NoFile:
                raise self.error(f"no file {name}") from None
            with stream:
                while piece := stream.readchunk():  # iterating a GridOut gives lines, not chunks
                    count += len(piece)
                    if digest is not None:
                        digest.update(piece)
        return count

    def _coll_stats(self, collection: str) -> dict:
        try:
            return self.db.command("collStats", collection)
        except OperationFailure as e:
            if e.code == 26:  # NamespaceNotFound: nothing written yet
                return {}
            raise

    def _database_total(self) -> int:
        return int(self.db.command("dbStats").get("totalSize", 0))

    def _take_baseline(self) -> None:
        """FerretDB: the database's total while the bucket is absent (after a
        reset, or at an open that finds none), what disk_bytes subtracts."""
        if self.is_ferretdb and not self.db.list_collection_names(filter={"name": {"$in": self.collections}}):
            self._baseline = self._database_total()

    def disk_bytes(self) -> dict:
        with self.guard("cannot read collStats"):
            stats = {c: self._coll_stats(c) for c in self.collections}
            sizes = {c: {field: int(s.get(field, 0)) for field in ("storageSize", "totalIndexSize")}
                     for c, s in stats.items()}
            if not self.is_ferretdb:
                return {"bytes": sum(sum(s.values()) for s in sizes.values()),
                        "detail": {"method": "collStats storageSize + totalIndexSize of both collections",
                                   "collections": sizes}}
            if self._baseline is None:
                raise self.error("disk_bytes before a reset: FerretDB's figure is measured from the "
                                 "bucket's absence, and it was there when opened")
            total = self._database_total()
        return {"bytes": total - self._baseline,
                "detail": {"method": "dbStats totalSize now minus without the bucket (FerretDB: its "
                                     "collStats storageSize is the PostgreSQL table's main fork only, "
                                     "without the TOAST that holds the chunks' data)",
                           "dbStats_totalSize": total, "dbStats_totalSize_without_bucket": self._baseline,
                           "collStats": sizes}}

    def close(self) -> None:
        if self.client is not None:
            self.client.close()


# --- PostgreSQL ---------------------------------------------------------------

# The layout the seed writes (labfiles/postgres_layout.py), in a schema of its own,
# without the columns only a serving path reads. The chunks go in first: the
# files row carries the sha256, known only once every chunk has been read.
WRITES_SCHEMA = "bench_writes"
SCHEMA = postgres_layout.tables(WRITES_SCHEMA, served=False, chunks_first=True)
NEXT_ID = f"SELECT nextval(pg_get_serial_sequence('{WRITES_SCHEMA}.files', 'id'))"
INSERT_CHUNK = f"INSERT INTO {WRITES_SCHEMA}.chunks (file_id, n, data) VALUES (%s, %s, %b)"
INSERT_FILE = f"INSERT INTO {WRITES_SCHEMA}.files (id, filename, length, sha256) VALUES (%s, %s, %s, %s)"
NEWEST = f"SELECT id, length FROM {WRITES_SCHEMA}.files WHERE filename = %s ORDER BY id DESC LIMIT 1"
CHUNKS_IN_ORDER = f"SELECT data FROM {WRITES_SCHEMA}.chunks WHERE file_id = %s ORDER BY n"
DURABILITY_SETTINGS = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")
READ_WINDOW_CHUNKS = 4  # chunks per fetch of a read: about 1 MiB in memory


def postgres_location(url: str) -> tuple[str, str]:
    """user@host:port/db for messages (never the password), and the host."""
    try:
        params = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.Error:
        raise StoreError("postgres: POSTGRES_URL cannot be parsed; expected postgresql://user@host:5432/db "
                         "(value not shown: it may hold a password)") from None
    host = params.get("host", "localhost")
    return (f"{params.get('user', '')}@{host}:{params.get('port', 5432)}/{params.get('dbname', '')}", host)


class ConnectionPool:
    """Up to `size` connections, each lent to one thread at a time; made
    when first needed, replaced when broken."""

    def __init__(self, connect, size: int):
        self._connect = connect
        self._idle = queue.SimpleQueue()
        self._slots = threading.BoundedSemaphore(size)

    @contextmanager
    def connection(self):
        if not self._slots.acquire(timeout=IO_TIMEOUT_S):
            raise TimeoutError(f"no connection free within {IO_TIMEOUT_S} s")
        try:
            connection = self._take()
            try:
                yield connection
            finally:
                self._give_back(connection)
        finally:
            self._slots.release()

    def _give_back(self, connection: psycopg.Connection) -> None:
        if connection.broken or connection.closed:
            connection.close()
            return
        if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            # A transaction left open would swallow the next borrower's as a savepoint.
            try:
                connection.rollback()
            except psycopg.Error:
                connection.close()
                return
        self._idle.put(connection)

    def _take(self) -> psycopg.Connection:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            return self._connect()

    def close(self) -> None:
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class PostgresStore(Store):
    """The seed's layout in a schema of its own, bench_writes: a files row and
    one bytea row per 255 KiB chunk, written in one transaction per file."""
    name = "postgres"
    failures = (psycopg.Error, TimeoutError)

    def __init__(self, url: str, threads: int):
        self.url = url
        self.location, self.service = postgres_location(url)
        self.pool = ConnectionPool(self._connect, max(threads, 1))

    def _connect(self) -> psycopg.Connection:
        return psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=False,
                               application_name="gridfs-lab-bench-writes",
                               options=f"-c statement_timeout={IO_TIMEOUT_S * 1000}")

    def open(self) -> None:
        with self.guard("cannot connect"), self.pool.connection() as connection, connection.transaction():
            connection.execute(SCHEMA)

    def durability(self) -> dict:
        with self.guard("cannot read its settings"), self.pool.connection() as connection, \
                connection.transaction():
            settings = {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in DURABILITY_SETTINGS}
        return {**settings, "per_file": "one transaction (its files row and chunk rows), committed before "
                                        "write returns",
                "syncs_per_file": "1 WAL flush, at the commit (fsync and synchronous_commit as above)",
                "atomic": "yes: the files row and its chunks commit together or not at all"}

    def settle(self) -> str:
        try:
            with self.pool.connection() as connection:
                connection.execute("CHECKPOINT")
            return "CHECKPOINT"
        except psycopg.Error as e:
            return f"not settled: CHECKPOINT refused ({one_line(e)}); the size is the tables' as they stand"

    def reset(self) -> None:
        with self.guard(f"cannot recreate schema {WRITES_SCHEMA}"), self.pool.connection() as connection, \
                connection.transaction():
            connection.execute(f"DROP SCHEMA IF EXISTS {WRITES_SCHEMA} CASCADE")
            connection.execute(SCHEMA)

    def write(self, source) -> None:
        digest = hashlib.sha256()

        def chunk_rows(file_id: int):
            for n, piece in enumerate(source.pieces(CHUNK_SIZE)):
                digest.update(piece)
                yield file_id, n, piece

        with self.guard(f"cannot write {source.name}"), self.pool.connection() as connection, \
                connection.transaction():
            file_id = connection.execute(NEXT_ID).fetchone()[0]
            with connection.cursor() as cursor:
                cursor.executemany(INSERT_CHUNK, chunk_rows(file_id))  # pipelined
            connection.execute(INSERT_FILE, (file_id, source.name, source.size, digest.hexdigest()))

    def read(self, name: str, digest=None) -> int:
        count = 0
        with self.guard(f"cannot read {name}"), self.pool.connection() as connection, connection.transaction():
            newest = connection.execute(NEWEST, (name,)).fetchone()
            if newest is None:
                raise self.error(f"no file {name}")
            file_id, length = newest
            # A server-side cursor: a window of chunks per fetch, never the whole file.
            with connection.cursor(name="bench_read", binary=True) as cursor:
                cursor.itersize = READ_WINDOW_CHUNKS
                cursor.execute(CHUNKS_IN_ORDER, (file_id,))
                for (piece,) in cursor:
                    count += len(piece)
                    if digest is not None:
                        digest.update(piece)
        if count != length:
            raise self.error(f"{name}: its chunks hold {count} bytes, its files row says {length}")
        return count

    def disk_bytes(self) -> dict:
        with self.guard("cannot read table sizes"), self.pool.connection() as connection, connection.transaction():
            files, chunks = connection.execute(
                f"SELECT pg_total_relation_size('{WRITES_SCHEMA}.files'),"
                f" pg_total_relation_size('{WRITES_SCHEMA}.chunks')").fetchone()
        return {"bytes": files + chunks,
                "detail": {"method": "pg_total_relation_size (heap, TOAST and indexes) of both tables",
                           "files": files, "chunks": chunks}}

    def close(self) -> None:
        self.pool.close()


# --- the filesystem -------------------------------------------------------------

# The only names the phase writes there: its files and their temporary names.
PHASE_FILE = re.compile(r"^write-\d{5,}\.bin(\.\d+-\d+\.partial)?$")


def mount_type(path: Path) -> str | None:
    """The type of the filesystem holding `path`, from /proc/self/mounts
    (the longest mount point above it)."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return None
    path, best, kind = str(path.resolve()), "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FilesystemStore(Store):
    """Plain files in a scratch directory, each made durable before write
    returns, as a database commit is: written under a temporary name,
    fsynced, renamed, and the directory fsynced."""
    name = "filesystem"
    service = None
    failures = (OSError,)

    def __init__(self, directory: str):
        self.directory = Path(directory)
        self.location = str(self.directory)

    def open(self) -> None:
        with self.guard("cannot create the directory"):
            self.directory.mkdir(parents=True, exist_ok=True)

    def durability(self) -> dict:
        return {"fsync": "each file, then its directory", "filesystem": mount_type(self.directory),
                "syncs_per_file": "2 fsyncs (the file, then its directory after the rename)",
                "atomic": "yes: written under a temporary name and renamed, so a reader sees the old file or "
                          "the whole new one"}

    def settle(self) -> str:
        os.sync()
        return "sync(2) (each file was fsync'd as written)"

    cold_reads_unavailable = None
    eviction = "posix_fadvise(DONTNEED) on every file before each pass: the kernel drops their clean pages"

    def evict(self, names: list[str]) -> None:
        """The next read comes from the disk (or from a cache below the
        volume's filesystem, which no container can reach)."""
        with self.guard("cannot drop the files from the page cache"):
            for name in names:
                with open(self.directory / name, "rb") as f:
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)

    def _phase_files(self) -> list[Path]:
        return [p for p in self.directory.iterdir() if PHASE_FILE.match(p.name)]

    def reset(self) -> None:
        with self.guard("cannot remove the phase's files"):
            for path in self._phase_files():
                path.unlink(missing_ok=True)
            fsync_directory(self.directory)

    def write(self, source) -> None:
        path = self.directory / source.name
        temporary = self.directory / f"{source.name}.{os.getpid()}-{threading.get_ident()}.partial"
        with self.guard(f"cannot write {source.name}"):
            try:
                with open(temporary, "wb") as out:
                    for piece in source.pieces(READ_PIECE):
                        out.write(piece)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temporary, path)
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
            fsync_directory(self.directory)

    def read(self, name: str, digest=None) -> int:
        count = 0
        with self.guard(f"cannot read {name}"):
            try:
                stream = open(self.directory / name, "rb")
            except FileNotFoundError:
                raise self.error(f"no file {name}") from None
            with stream:
                while piece := stream.read(READ_PIECE):
                    count += len(piece)
                    if digest is not None:
                        digest.update(piece)
        return count

    def disk_bytes(self) -> dict:
        with self.guard("cannot list the phase's files"):
            stats = [p.stat() for p in self._phase_files()]
        return {"bytes": sum(s.st_blocks * 512 for s in stats),
                "detail": {"method": "st_blocks * 512 of the phase's files (what du counts)",
                           "files": len(stats), "apparent_bytes": sum(s.st_size for s in stats)}}


def make_stores(mongo_uri: str, gridfs_db: str, postgres_url: str, write_dir: str, threads: int) -> list[Store]:
    """GridFS always; PostgreSQL when postgres_url is set; the filesystem when
    write_dir is set. Not opened yet: the runner opens each and carries on
    without one that fails."""
    stores: list[Store] = [GridFSStore(mongo_uri, gridfs_db, threads)]
    if postgres_url:
        stores.append(PostgresStore(postgres_url, threads))
    if write_dir:
        stores.append(FilesystemStore(write_dir))
    return stores


def open_stores(mongo_uri: str, gridfs_db: str, postgres_url: str, write_dir: str, threads: int) -> list[Store]:
    """make_stores' stores, each opened; none left open if one fails."""
    stores = make_stores(mongo_uri, gridfs_db, postgres_url, write_dir, threads)
    opened = []
    try:
        for store in stores:
            store.open()
            opened.append(store)
    except BaseException:
        for store in opened:
            store.close()
        raise
    return stores
