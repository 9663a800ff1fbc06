"""Benchmarks of the nginx GridFS module that print figures (no timed
assertions): the worker's peak memory with many slow clients, and the
database's CPU per request through the module against pymongo's
GridFSBucket. Sizes are small by default; set GRIDFS_SLOW_CLIENTS=1000 and
GRIDFS_CPU_REQUESTS=100 for the figures quoted in issue 13, and
NGINX_GRIDFS_MODULE_DIR to a copy of a previous module/ for its figures."""
import os
import select
import shutil
import socket
import tempfile
import time
from pathlib import Path

import gridfs
import pymongo
import pytest
import requests

from support.nginx_gridfs_build import Nginx, build_module

pytestmark = pytest.mark.bench  # figures to read, not a test to pass: make floor

DB = "nginx_gridfs_bench"
SLOW_CLIENTS = int(os.environ.get("GRIDFS_SLOW_CLIENTS", "100"))
CPU_REQUESTS = int(os.environ.get("GRIDFS_CPU_REQUESTS", "20"))
# gridfs_buffer_size for every benchmark (empty: the module's default, 1m)
BUFFER = os.environ.get("GRIDFS_BUFFER_SIZE", "")
CLK_TCK = os.sysconf("SC_CLK_TCK")
# which module the figures are of
MODULE = "module" + (f" ({os.environ['NGINX_GRIDFS_MODULE_DIR']})" if os.environ.get("NGINX_GRIDFS_MODULE_DIR") else "")


@pytest.fixture(scope="module")
def stored(mongo_uri):
    client = pymongo.MongoClient(mongo_uri)
    client.drop_database(DB)
    bucket = gridfs.GridFSBucket(client[DB])
    data = {"1MB.bin": os.urandom(1_000_000), "1MiB.bin": os.urandom(1 << 20), "10MB.bin": os.urandom(10_000_000)}
    for name, content in data.items():
        bucket.upload_from_stream(name, content)
    yield {"data": data, "bucket": bucket}
    client.drop_database(DB)
    client.close()


def start_nginx(uri: str, http_extra: str = "") -> Nginx:
    if BUFFER:
        http_extra += f"gridfs_buffer_size {BUFFER};"
    prefix = Path(tempfile.mkdtemp(prefix="lab-nginx-gridfs-"))
    files_dir = prefix / "files"
    files_dir.mkdir()
    files_dir.chmod(0o755)
    return Nginx(build_module(), uri, files_dir, prefix, DB, http_extra)


def slow_client(port: int, path: str) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    s.connect(("127.0.0.1", port))
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    s.setblocking(False)
    return s


@pytest.mark.parametrize("name", ["1MB.bin", "10MB.bin"])
def test_peak_memory_with_slow_clients(stored, mongo_uri, name):
    """SLOW_CLIENTS clients read a file 4 KiB at a time; the worker's peak
    RSS (VmHWM) is printed, with the module's default window unless
    GRIDFS_BUFFER_SIZE sets one. A 1 MB file is one window; 10 MB files are
    streamed, from one cursor by the responses that hold a client (half the
    pool, 50) and a query per window by the others."""
    # The queue may be long: FerretDB serves about 30 1 MB files a second.
    nginx = start_nginx(mongo_uri, "gridfs_queue_timeout 600s;")
    size = len(stored["data"][name])
    # past the first window (5 chunks of 255 KiB at the 1m default)
    target = min(size, 1_400_000)
    try:
        assert requests.get(nginx.url(f"/files/{name}"), timeout=60).status_code == 200
        base = nginx.worker_status("VmRSS")
        clients = [slow_client(nginx.port, f"/files/{name}") for _ in range(SLOW_CLIENTS)]
        received = {c: 0 for c in clients}
        peak = 0
        deadline = time.monotonic() + 60 + SLOW_CLIENTS * 0.2
        # read slowly (4 KiB per client per round) until everyone has
        # more than the first window
        while time.monotonic() < deadline and min(received.values()) < target:
            ready, _, _ = select.select(list(received), [], [], 0.2)
            for c in ready:
                try:
                    chunk = c.recv(4096)
                except BlockingIOError:
                    continue
                received[c] += len(chunk) if chunk else size
            peak = max(peak, nginx.worker_status("VmRSS"))
            time.sleep(0.05)
        hwm = nginx.worker_status("VmHWM")
        for c in clients:
            c.close()
        served = sum(1 for n in received.values() if n >= target)
        print(f"\n{MODULE}: {SLOW_CLIENTS} slow clients on {name}, gridfs_buffer_size {BUFFER or 'default'}: "
              f"worker RSS {base / 1024:.0f} MiB idle, "
              f"peak {hwm / 1024:.0f} MiB (VmHWM; sampled {peak / 1024:.0f} MiB), "
              f"{(hwm - base) / SLOW_CLIENTS:.0f} KiB per client; {served} read past {target} bytes")
        assert "exited on signal" not in nginx.log()
    finally:
        nginx.stop()
        shutil.rmtree(nginx.prefix, ignore_errors=True)


def tree_cpu_seconds(root: int) -> float:
    """CPU time of a process and all its descendants, reaped ones included."""
    children, stats = {}, {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry))
            stats[int(entry)] = sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats.get(pid, 0)
        todo.extend(children.get(pid, []))
    return total / CLK_TCK


def database_cpu(ferretdb, postgres) -> float:
    return tree_cpu_seconds(ferretdb.proc.pid) + tree_cpu_seconds(postgres.proc.pid)


@pytest.mark.parametrize("name", ["1MB.bin", "1MiB.bin", "10MB.bin"])
def test_database_cpu_per_request_module_vs_pymongo(stored, mongo_uri, ferretdb, postgres, name):
    nginx = start_nginx(mongo_uri)
    try:
        data = stored["data"][name]
        session = requests.Session()
        assert session.get(nginx.url(f"/files/{name}"), timeout=60).content == data
        assert stored["bucket"].open_download_stream_by_name(name).read() == data
        # 10 MB through the module costs FerretDB seconds: fewer of those
        count = CPU_REQUESTS if len(data) <= 1 << 20 else max(2, CPU_REQUESTS // 10)
        figures = {}
        for label, fetch in (
                ("module", lambda: session.get(nginx.url(f"/files/{name}"), timeout=60).content),
                ("pymongo", lambda: stored["bucket"].open_download_stream_by_name(name).read())):
            time.sleep(0.5)
            before = database_cpu(ferretdb, postgres)
            for _ in range(count):
                assert len(fetch()) == len(data)
            figures[label] = (database_cpu(ferretdb, postgres) - before) / count * 1000
        print(f"\n{name}, gridfs_buffer_size {BUFFER or 'default'}: database (FerretDB + PostgreSQL) CPU per request: "
              f"{MODULE} {figures['module']:.1f} ms, "
              f"pymongo GridFSBucket {figures['pymongo']:.1f} ms ({count} requests each)")
    finally:
        nginx.stop()
        shutil.rmtree(nginx.prefix, ignore_errors=True)
