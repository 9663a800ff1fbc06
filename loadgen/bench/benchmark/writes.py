"""Seed 002's store benchmark: WRITE_FILES files of WRITE_SIZE bytes written
into every store (GridFS, PostgreSQL, the filesystem) with 1 thread and with
WRITE_THREADS, each pass into an empty store, the stores in the schedule's
order (bench.benchmark.schedule: a different one each repetition); after each thread
count every file is verified by sha256 and the store's disk use measured;
then the files are read back, 1 thread in order and WRITE_THREADS in random
order (seed 002's method), and finally removed, so reruns start equal."""
import hashlib
import random
import resource
import time
from concurrent.futures import ThreadPoolExecutor

from ..environment import own_memory_limit
from ..progress import Progress, clock, say
from ..results import FAILED, READ, WRITE, Results, StorePass
from ..databases.stores import Store, StoreError, make_stores
from ..clients.timing import Measurement
from ..measure.usage import LOADGEN
from ..databases.write_data import FileSource, base_bytes, file_name
from .phase import Phase, PhaseRun, Scope

IN_ORDER, RANDOM = "in order", "random"
COLD = "in order, cold"  # 1 thread, every file dropped from the caches bench can reach before each pass
MISMATCHES_NAMED = 3
# pymongo holds a whole file per GridFS upload and encodes it again to send
# it (20 threads x 10 MB OOM-killed bench at 512 MiB); bench itself, charts
# and all, needs some more.
UPLOAD_COPIES, BENCH_OWN_BYTES = 3, 256 * 2 ** 20


def memory_shortfall(threads: int, file_bytes: int, limit: int | None) -> str | None:
    """Why bench's memory limit cannot hold the writer threads, or None:
    said before any write, as an OOM kill would lose the run's report."""
    needed = threads * UPLOAD_COPIES * file_bytes + BENCH_OWN_BYTES
    if limit is None or needed <= limit:
        return None
    return (f"WRITE_THREADS={threads} x WRITE_SIZE={file_bytes:,} bytes need about {needed / 2**20:.0f} MiB in bench "
            f"(a GridFS upload holds about {UPLOAD_COPIES} copies of its file, "
            f"plus {BENCH_OWN_BYTES / 2**20:.0f} MiB of bench's own), but LOADGEN_MEM allows {limit / 2**20:.0f} MiB: "
            "raise LOADGEN_MEM, or lower WRITE_THREADS or WRITE_SIZE")


def _own_cpu_seconds() -> float:
    """This process's CPU, every thread: the writers' and readers' own cost."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def _ms_percentile(ordered: list[float], share: float) -> float:
    return round(ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000, 3) if ordered else 0.0


def timed_pass(tool: str, work, indexes: list[int], threads: int, file_bytes: int) -> Measurement:
    """work(index) for every index on `threads` threads, as a Measurement:
    requests are files, latencies the seconds of one file, the tool's CPU
    this process's own. The first error raises, after the pass stops."""
    seconds_each: list[float] = []

    def one(index: int) -> None:
        began = time.perf_counter()
        work(index)
        seconds_each.append(time.perf_counter() - began)

    cpu, started = _own_cpu_seconds(), time.time_ns()
    with ThreadPoolExecutor(threads, thread_name_prefix=tool.replace(" ", "-")) as pool:
        for _ in pool.map(one, indexes):
            pass
    ended, cpu = time.time_ns(), _own_cpu_seconds() - cpu
    seconds = max((ended - started) / 1e9, 1e-9)
    ordered = sorted(seconds_each)
    return Measurement(
        tool=tool, requests=len(indexes), failed=0, seconds=round(seconds, 6), rps=round(len(indexes) / seconds, 3),
        time_per_request_ms=round(seconds * 1000 / len(indexes), 3),
        transfer_kbps=round(len(indexes) * file_bytes / seconds / 1024, 1),
        p50_ms=_ms_percentile(ordered, 0.5), p90_ms=_ms_percentile(ordered, 0.9),
        p99_ms=_ms_percentile(ordered, 0.99), max_ms=_ms_percentile(ordered, 1.0), threads=threads,
        loadgen_cpu_seconds=round(cpu, 6), started_ns=started, ended_ns=ended)


class StoreWritesAndReads(Phase):
    """Last: it fills the stores and the page cache. It plans itself once it
    knows the stores, and says its time left as it goes."""
    name = "store writes and reads"
    in_plan = False

    def enabled(self, cfg, scope: Scope) -> bool:
        return bool(cfg.write)

    def planned_seconds(self, cfg, scope: Scope) -> float:
        return 0.0

    def run(self, run: PhaseRun) -> None:
        StoreBenchmark(run.cfg, run.timer, run.results).run()


class StoreBenchmark:
    """Drives the stores through the passes with a Timer's measured windows
    (the same CPU, flags and quiet machine as every HTTP case)."""

    def __init__(self, cfg, timer, results: Results):
        self.cfg, self.timer, self.results = cfg, timer, results
        self.files, self.size = cfg.write_files, cfg.write_size
        self.threads = sorted({1, cfg.write_threads})
        self.base = base_bytes(self.size)
        self.broken: dict[str, str] = {}  # store -> why its later passes are not run
        self.progress = Progress(1)  # run() plans it once it knows the stores

    def source(self, index: int) -> FileSource:
        return FileSource(self.base, index)

    def run(self) -> None:
        stores = make_stores(self.cfg.mongo_uri, self.cfg.gridfs_db, self.cfg.postgres_url, self.cfg.write_dir,
                             self.cfg.write_threads)
        self.results.store_setup = {
            "files": self.files, "file_bytes": self.size, "threads": self.threads,
            "stores": [s.name for s in stores], "errors": {}}
        # writes and warm reads for each thread count, the cold reads, and a check per store and thread count
        passes = len(stores) * self.cfg.repetitions * (2 * len(self.threads) + 1) + 2 * len(stores) * len(self.threads)
        self.progress = Progress(passes)
        say(f"store benchmark: {self.files} files of {self.size:,} bytes into {', '.join(s.name for s in stores)}; "
            f"writes with {' and '.join(map(str, self.threads))} threads, then reads back, "
            f"{self.cfg.repetitions} passes each ({passes} passes with the checks; time left from the pace)")
        short = memory_shortfall(self.cfg.write_threads, self.size, own_memory_limit())
        for store in stores:
            if short:
                self.fail_store(store, short)
                continue
            try:
                store.open()
                store.reset()
                self.results.store_setup.setdefault("durability", {})[store.name] = store.durability()
            except StoreError as e:
                self.fail_store(store, f"not reachable: {e}")
        expected = [self.source(i).sha256() for i in range(self.files)]
        try:
            for threads in self.threads:
                self.results.writes += self.write_row(stores, threads, expected)
            for threads, order in ((1, IN_ORDER), (self.cfg.write_threads, RANDOM)):
                self.results.reads += self.read_row(stores, threads, order)
            self.results.reads += self.cold_read_row(stores)
        finally:
            for store in stores:
                try:
                    store.reset()  # the phase's files are removed: the next run starts equal
                except StoreError as e:
                    self.results.warnings.append(f"{store.name}: the store benchmark's files not removed: {e}")
                store.close()

    def fail_store(self, store: Store, why: str) -> None:
        self.broken.setdefault(store.name, why)
        self.results.store_setup["errors"][store.name] = self.broken[store.name]
        say(f"{store.name}: FAILED: {why}")

    # --- passes -----------------------------------------------------------
    def rotating_passes(self, stores: list[Store], operation: str, threads: int, order: str,
                        work, indexes: list[int], reset: bool, before_pass=None) -> dict[str, list[dict]]:
        """BENCH_REPETITIONS measured passes, the stores in the schedule's
        order: work(store, index) for every index; `reset` empties the store
        before each pass. A store that fails is out from then on."""
        passes: dict[str, list[dict]] = {s.name: [] for s in stores}
        by_name = {s.name: s for s in stores}
        label = f"{operation}{' ' + order if operation == READ else ''} threads={threads}"

        def one_pass(name: str, i: int) -> None:
            store = by_name[name]
            try:
                if reset:
                    store.reset()
                if before_pass:
                    before_pass(store)  # outside the timed window, like the reset
                passes[name].append(self.timer.measured(store.service or LOADGEN, lambda: timed_pass(
                    f"{name} {operation}", lambda n: work(store, n), indexes, threads, self.size)))
                self.results.order.append(f"{name} {label} r={i}")
            except StoreError as e:
                self.fail_store(store, f"{operation} pass {i} with {threads} threads: {e}")
            self.step(f"{name} {operation} x{threads} pass {i}")

        self.timer.schedule.repeat(f"stores {label}", list(by_name), one_pass, skip=lambda name: name in self.broken)
        return passes

    # --- writes -----------------------------------------------------------
    def write_row(self, stores: list[Store], threads: int, expected: list[str]) -> list[StorePass]:
        passes = self.rotating_passes(stores, WRITE, threads, IN_ORDER, lambda store, n: store.write(self.source(n)),
                                      list(range(self.files)), reset=True)
        rows = []
        for store in stores:
            row = self.row(store, WRITE, threads, IN_ORDER, passes[store.name])
            if row.ok:
                self.check(store, row, expected)
            row.durability = self.results.store_setup.get("durability", {}).get(store.name)
            rows.append(row)
            say(describe(row))
        return rows

    def check(self, store: Store, row: StorePass, expected: list[str]) -> None:
        """Every file read back and matched against its sha256; then what the
        store uses on disk for them."""
        def digest_of(index: int) -> str:
            digest = hashlib.sha256()
            store.read(file_name(index), digest)
            return digest.hexdigest()

        try:
            with ThreadPoolExecutor(self.cfg.write_threads) as pool:
                got = list(pool.map(digest_of, range(self.files)))
            wrong = [file_name(i) for i, (a, b) in enumerate(zip(got, expected)) if a != b]
            row.verified = not wrong
            if wrong:
                row.status = FAILED
                row.error = (f"{len(wrong)} of {self.files} files read back differ from what was written: "
                             + ", ".join(wrong[:MISMATCHES_NAMED]) + (" ..." if len(wrong) > MISMATCHES_NAMED else ""))
            settled = store.settle()  # a checkpoint or fsync first: the size of what reached the disk
            disk = store.disk_bytes()
            row.disk = {**disk, "ratio": round(disk["bytes"] / row.total_bytes, 4)}
            row.disk.setdefault("detail", {})["settled"] = settled
        except StoreError as e:
            row.status, row.error = FAILED, f"after the writes: {e}"
            self.fail_store(store, row.error)
        self.step(f"{store.name} checked")

    # --- reads ------------------------------------------------------------
    def read_row(self, stores: list[Store], threads: int, order: str) -> list[StorePass]:
        """Warm reads: one pass per store first, not counted, so every counted
        pass finds the caches as a steady reader would."""
        indexes = list(range(self.files))
        if order == RANDOM:
            random.Random(f"gridfs-lab-reads:{self.files}").shuffle(indexes)
        for store in stores:
            if store.name not in self.broken:
                try:
                    timed_pass(f"{store.name} warm-up", lambda n: self.read_whole(store, n), indexes, threads,
                               self.size)
                except StoreError as e:
                    self.fail_store(store, f"read warm-up with {threads} threads: {e}")
        passes = self.rotating_passes(stores, READ, threads, order, self.read_whole, indexes, reset=False)
        rows = [self.row(store, READ, threads, order, passes[store.name]) for store in stores]
        for row in rows:
            row.cache_state = "warm"
            say(describe(row))
        return rows

    def cold_read_row(self, stores: list[Store]) -> list[StorePass]:
        """Cold reads, 1 thread in order, for the stores whose caches bench can
        empty before each pass (the filesystem's page cache); for the others
        store_setup's cold_reads says why not."""
        names = [file_name(i) for i in range(self.files)]
        said = self.results.store_setup.setdefault("cold_reads", {})
        cold = []
        for store in stores:
            if store.name in self.broken:
                continue
            if store.cold_reads_unavailable:
                said[store.name] = f"not measured: {store.cold_reads_unavailable}"
            else:
                said[store.name] = store.eviction
                cold.append(store)
        if not cold:
            return []
        passes = self.rotating_passes(cold, READ, 1, COLD, self.read_whole, list(range(self.files)), reset=False,
                                      before_pass=lambda store: store.evict(names))
        rows = [self.row(store, READ, 1, COLD, passes[store.name]) for store in cold]
        for row in rows:
            row.cache_state = "cold"
            say(describe(row))
        return rows

    def read_whole(self, store: Store, index: int) -> None:
        got = store.read(file_name(index))
        if got != self.size:
            raise StoreError(f"{file_name(index)}: read back {got} bytes, expected {self.size}")

    # ---------------------------------------------------------------------
    def row(self, store: Store, operation: str, threads: int, order: str, passes: list[dict]) -> StorePass:
        if store.name in self.broken or len(passes) < self.cfg.repetitions:
            return StorePass(store.name, operation, threads, order, self.files, self.size, status=FAILED,
                             error=self.broken.get(store.name, "not run"), passes=passes)
        return StorePass.of(store.name, operation, threads, order, self.files, self.size, passes, store.service)

    def step(self, what: str) -> None:
        self.progress.advance(1)
        self.progress.report(what, every=10.0)


def describe(row: StorePass) -> str:
    name = f"{row.store} {row.operation} x{row.threads} ({row.order})"
    if not row.ok:
        return f"{name}: FAILED: {row.error}"
    cpu = ", ".join(f"{role} {s:.2f}" for role, s in row.cpu_s_per_gb.items())
    disk = f", disk {row.disk['ratio']:.2f}x the bytes" if row.disk else ""
    took = clock(row.seconds) if row.seconds >= 60 else f"{row.seconds:.2f} s"
    return (f"{name}: {row.mb_per_s:.1f} MB/s, {row.files_per_s:.2f} files/s, {took} for "
            f"{row.files} files" + (f"; CPU s/GB {cpu}" if cpu else "") + disk
            + (f" [{', '.join(row.flags)}]" if row.flags else ""))
