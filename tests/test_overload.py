"""make overload's pure parts: a row judged from wrk's output (real captures
in tests/fixtures/wrk/) or from `bench fetch`'s outcomes and what Docker said
of the container; memory read from a real cgroup v1 memory.stat and from
cgroup v2's format; the settings checked before anything starts; the report."""
from pathlib import Path

import pytest

from bench.faults.overload import ContainerAfter, clients_row, large_file_row
from bench.report.overload import render
from bench.clients.wrk_output import parse
from lab_compose import LabError, unreclaimable_bytes
from support.modules import module_from_file

ROOT = Path(__file__).resolve().parent.parent

FIXTURES = ROOT / "tests" / "fixtures"
MIB = 1024 ** 2
FINE = ContainerAfter(oom_kills=0, status="running", oom_killed=False, exit_code=0, peak_bytes=90 * MIB,
                      limit_bytes=512 * MIB)


def driver():
    return module_from_file(ROOT / "tools" / "lab" / "overload.py", "overload_driver")


def test_clean_run_is_ok():
    wrk = parse((FIXTURES / "wrk" / "nginx-1MB-c100.txt").read_text())
    row = clients_row("nginx-static", "1000 clients x 1MB.bin for 30 s", wrk, FINE)
    assert row.answers == wrk.requests and row.whole == wrk.requests and row.broken == {}
    assert (row.peak_mib, row.limit_mib, row.verdict) == (90.0, 512.0, "ok")


def test_cut_connections_and_a_killed_worker_are_named():
    wrk = parse((FIXTURES / "wrk" / "nginx-stopped-midway.txt").read_text())
    killed = ContainerAfter(oom_kills=3, status="running", oom_killed=False, exit_code=0, peak_bytes=None,
                            limit_bytes=512 * MIB)
    row = clients_row("nginx-gridfs", "x", wrk, killed)
    assert row.broken == {"read error": 13, "write error": 70789}
    assert row.verdict == "3 OOM kills; 13 x read error; 70789 x write error"
    assert row.peak_mib is None


def test_an_oom_killed_container_and_large_file_outcomes():
    dead = ContainerAfter(oom_kills=1, status="exited", oom_killed=True, exit_code=137, peak_bytes=255 * MIB,
                          limit_bytes=256 * MIB)
    fetched = {"clients": 50, "outcomes": {"whole": 20, "503": 5, "200 cut short": 10, "connection refused": 15}}
    row = large_file_row("node", "50 clients x 100MB.bin in 256m", fetched, dead)
    assert (row.whole, row.clean_errors) == (20, 5)
    assert row.broken == {"200 cut short": 10, "connection refused": 15}
    assert row.container == "OOM-killed"
    assert row.verdict == "1 OOM kills; container OOM-killed; 10 x 200 cut short; 15 x connection refused"
    exited = ContainerAfter(0, "exited", False, 1, None, 0)
    assert exited.describe() == "exited (exit 1)"


def test_memory_is_anonymous_plus_tmpfs_on_cgroup_v1_and_v2():
    # a real memory.stat of nginx-cache's container (cgroup v1): total_rss + total_shmem
    v1 = (FIXTURES / "cgroup" / "v1-nginx-cache-memory.stat").read_text()
    fields = dict(line.split() for line in v1.splitlines())
    assert unreclaimable_bytes(v1) == int(fields["total_rss"]) + int(fields["total_shmem"]) > 0
    # cgroup v2 names them anon and shmem (Documentation/admin-guide/cgroup-v2.rst)
    v2 = "anon 104857600\nfile 734003200\nkernel 9437184\nshmem 52428800\nfile_mapped 0\n"
    assert unreclaimable_bytes(v2) == 104857600 + 52428800


def test_settings_are_checked_before_anything_starts():
    d = driver()
    lab = {"BENCH_TARGETS": "nginx-static node"}
    s = d.read_settings({}, lab)
    assert (s["clients"], s["seconds"], s["file"], s["large_file"], s["large_mem"], s["large_cache_size"],
            s["large_deadline_ms"]) == (1000, 30, "1MB", "100MB", "256m", "128m", 300000)
    assert d.read_settings({"LARGE_FILE": "off"}, lab)["checks"] == ["goodput", "clients"]
    for env, words in [({"OVERLOAD_CLIENTS": "1e3"}, "OVERLOAD_CLIENTS='1e3': expected a whole number"),
                       ({"OVERLOAD_FILE": "big"}, "OVERLOAD_FILE='BIG'"),
                       ({"LARGE_MEM": "256MB"}, "LARGE_MEM='256mb': expected a Docker memory size"),
                       ({"LARGE_DEADLINE_MS": "600001"}, "LARGE_DEADLINE_MS='600001': expected a whole number"),
                       ({"OVERLOAD_CHECKS": "clients crash"}, "OVERLOAD_CHECKS='clients crash'")]:
        with pytest.raises(LabError, match=words):
            d.read_settings(env, lab)


def test_report_tables_each_check():
    wrk = parse((FIXTURES / "wrk" / "nginx-1MB-c100.txt").read_text())
    doc = {"run_id": "overload-x", "env_file": "local.env", "started": "a", "finished": "b",
           "settings": {"clients": 1000, "file": "1MB", "seconds": 30, "large_file": "100MB", "large_clients": 50,
                        "large_mem": "256m", "large_deadline_ms": 300000},
           "overload": [clients_row("nginx-static", "l", wrk, FINE).to_dict()],
           "failed": [{"check": "large file", "path": "flask", "error": "flask: wrk: no end"}]}
    text = render(doc)
    assert "## 1000 clients at once on `1MB` for 30 s" in text
    assert (f"| nginx-static | {wrk.requests} | {wrk.requests} | 0 | none | 0 | running "
            "| 90 / 512 MiB (kernel's peak ?) | ok |") in text
    assert "## `100MB` to 50 clients at once" in text and "| flask | - |" in text
    assert "each answer's start within 300 s (LARGE_DEADLINE_MS)" in text


def _local_python_image() -> str:
    import subprocess
    images = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True,
                            text=True, timeout=60).stdout.split()
    found = [i for i in images if i.endswith("/python:3.11") and "local" in i]
    if not found:
        pytest.fail("no local python image: run `make local-images` (make test does)")
    return found[0]


@pytest.mark.lab  # a container
def test_the_kernels_own_peak_and_oom_kills_of_a_real_container():
    """5 Hz sampling misses a spike of a tenth of a second; the cgroup's own
    counters do not. A process allocating 48 MiB for 0.1 s, then another
    killed by the kernel at the container's 96 MiB limit, in one container
    whose shell survives both (cgroup v1 here, v2 read alike)."""
    import subprocess
    import time
    from lab_compose import PeakMemory
    name = f"lab-test-kernel-memory-{int(time.time())}"
    script = ("sleep 2; python3 -c 'import time; b = bytearray(48 * 2**20); time.sleep(0.1)'; sleep 1; "
              "python3 -c 'b = bytearray(256 * 2**20)'; sleep 30")
    cid = subprocess.run(["docker", "run", "-d", "--rm", "--name", name, "--memory", "96m", "--memory-swap", "96m",
                          _local_python_image(), "sh", "-c", script], capture_output=True, text=True, timeout=120,
                         check=True).stdout.strip()
    try:
        with PeakMemory(cid) as peak:
            time.sleep(6)
        assert peak.kernel_peak is not None and peak.kernel_peak >= 48 * 2 ** 20, peak.kernel_peak
        assert peak.kernel_oom_kills == 1
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)


def test_an_oom_kill_the_kernel_counted_fails_the_check_even_without_dockers_event():
    after = ContainerAfter(oom_kills=0, status="running", oom_killed=False, exit_code=0, peak_bytes=10 * 2 ** 20,
                           limit_bytes=256 * 2 ** 20, kernel_peak_bytes=250 * 2 ** 20, kernel_oom_kills=2)
    row = large_file_row("flask", "4 clients", {"clients": 4, "outcomes": {"whole": 4}}, after)
    assert row.oom_kills == 2 and row.verdict == "2 OOM kills" and row.kernel_peak_mib == 250.0
