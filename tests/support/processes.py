"""Real servers for native tests: PostgreSQL + FerretDB (a MongoDB-protocol
server), started in a temporary directory and stopped afterwards.

FerretDB stands in for MongoDB here because no MongoDB server can be
installed on this machine; it runs on PostgreSQL because its SQLite backend
scans whole collections on every GridFS chunk lookup.
"""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

PG_BIN = Path("/usr/lib/postgresql/15/bin")
GRIDFS_INDEXES = Path(__file__).resolve().parents[2] / "local-images" / "mongo" / "gridfs-indexes.sql"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, what: str, proc: subprocess.Popen | None = None, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


def _as_postgres(cmd: list[str]) -> list[str]:
    # PostgreSQL refuses to run as root.
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


class PostgresServer:
    def __init__(self):
        # Its own directory: pytest's tmp tree is private to root, and
        # PostgreSQL runs as the postgres user.
        self.datadir = Path(tempfile.mkdtemp(prefix="lab-pg-")) / "pgdata"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def start(self) -> "PostgresServer":
        self.datadir.parent.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.datadir.parent, "postgres")
        subprocess.run(_as_postgres([str(PG_BIN / "initdb"), "-D", str(self.datadir), "-A", "trust",
                                     "-U", "postgres", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]),
                       check=True, stdout=subprocess.DEVNULL)
        return self.run()

    def run(self) -> "PostgresServer":
        """The server on its cluster as it is: after start(), or again after
        a stop of its process (a test taking the database away)."""
        self.proc = subprocess.Popen(_as_postgres([
            str(PG_BIN / "postgres"), "-D", str(self.datadir), "-p", str(self.port),
            "-k", str(self.datadir), "-c", "listen_addresses=127.0.0.1",
            "-c", "fsync=off", "-c", "max_connections=200"]),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, "postgres", self.proc)
        return self

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def stop(self) -> None:
        stop_process(self.proc)
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


class FerretDBServer:
    """FerretDB v1 on PostgreSQL. stop()/start() may be called repeatedly to
    simulate MongoDB going away and coming back on the same port."""

    def __init__(self, binary: str, postgres: PostgresServer):
        self.binary = binary
        self.postgres = postgres
        self.port = free_port()
        self.debug_port = free_port()  # its Prometheus metrics: /debug/metrics
        self.proc: subprocess.Popen | None = None

    @property
    def log_path(self) -> Path:
        return self.postgres.datadir.parent / "ferretdb.log"

    def start(self) -> "FerretDBServer":
        # the lab's stand-in's GIN indexes for GridFS lookups (local-images/mongo)
        subprocess.run(_as_postgres([str(PG_BIN / "psql"), "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
                                     "-p", str(self.postgres.port), "-U", "postgres", "-d", "postgres",
                                     "-f", "-"]),
                       input=GRIDFS_INDEXES.read_bytes(), check=True, stdout=subprocess.DEVNULL, timeout=30)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([
            self.binary, f"--listen-addr=127.0.0.1:{self.port}", "--handler=postgresql",
            f"--postgresql-url={self.postgres.url}", "--telemetry=disable",
            f"--state-dir={self.postgres.datadir.parent}", "--log-level=error",
            # its metrics listener defaults to a fixed port: two servers would collide
            f"--debug-addr=127.0.0.1:{self.debug_port}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_for_port(self.port, "ferretdb", self.proc)
        except RuntimeError as e:
            raise RuntimeError(f"{e}; its log ends: {self.log_path.read_text()[-1000:]}") from e
        return self

    @property
    def uri(self) -> str:
        return f"mongodb://127.0.0.1:{self.port}/"

    def pause(self) -> None:
        """Freeze the server: connections stay open but nothing answers."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    @contextlib.contextmanager
    def paused(self):
        """Frozen for the block, and resumed however it ends."""
        self.pause()
        try:
            yield
        finally:
            self.resume()

    def stop(self) -> None:
        stop_process(self.proc)
        self.log.close()


def stop_process(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGCONT)
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def rss_mib(roots: list[int]) -> float:
    """Resident memory of these processes and their children (gunicorn's
    and nginx's workers), MiB."""
    pids = roots + [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
                    if _parent(stat) in roots]
    total_kib = 0
    for each in pids:
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except FileNotFoundError:
            continue
        total_kib += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    return total_kib / 1024


def cpu_seconds(roots: list[int]) -> float:
    """CPU time (user and system) these processes and their children have
    used so far, seconds."""
    pids = roots + [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
                    if _parent(stat) in roots]
    ticks = 0
    for each in pids:
        try:
            # after the command's closing parenthesis: utime and stime are the 12th and 13th
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, IndexError, ValueError):
            continue
    return ticks / os.sysconf("SC_CLK_TCK")


def _parent(stat: Path) -> int | None:
    try:
        # after the command's closing parenthesis: state, then the parent's pid
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, IndexError, ValueError):
        return None
