"""A perf profile of one process tree, read as what its time went to:
`perf report --stdio -n --sort dso,sym` parsed (a pure function, tested on
a captured report), then each (object, symbol) grouped by the work it is
part of, so the module's CPU per request can be accounted for: receiving
and sending in the kernel, parsing BSON, the driver, copies, thread
hand-offs, nginx itself, the module's own code."""
import re
import subprocess
from pathlib import Path

ROW = re.compile(r"^\s*([\d.]+)%\s+(\d+)\s+(\S+)\s+\[([.k])\]\s+(.+?)\s*$")

# (what, does this (object, symbol) belong to it), first match wins
GROUPS = [
    ("kernel: copies to and from user space", lambda o, s: o == "kernel" and re.search(
        r"copy_(user|to_user|from_user|page)|_copy_(to|from)_iter|rep_movs|memcpy", s)),
    ("kernel: page faults and memory", lambda o, s: o == "kernel" and re.search(
        r"page|fault|mm_|folio|memcg|mem_cgroup|lru|pte|pmd|mas_|vma|rmap|zone|charge|alloc_pages|munmap|mmap|brk"
        r"|tlb", s)),
    ("kernel: TCP/IP, send and receive", lambda o, s: o == "kernel" and re.search(
        r"tcp|inet|ip_|ipv4|__ip|skb|sock|net_|netif|napi|loopback|dev_|neigh|sk_|__sys_(send|recv)|sendmsg|recvmsg"
        r"|nf_|raw_|udp", s)),
    ("kernel: scheduling and thread hand-offs", lambda o, s: o == "kernel" and re.search(
        r"futex|schedule|switch|wake|enqueue|dequeue|pick_next|update_curr|update_load|select_task|idle|cpuidle"
        r"|ttwu|migrate|rq_|_raw_spin", s)),
    ("kernel: system calls, epoll, timers", lambda o, s: o == "kernel" and re.search(
        r"syscall|entry_|ep_|epoll|fdget|fput|__x64|do_|ksys|hrtimer|timer|clock|ktime|eventfd|poll", s)),
    ("kernel: other", lambda o, s: o == "kernel"),
    ("BSON parsing (libbson)", lambda o, s: "libbson" in o),
    ("driver (libmongoc)", lambda o, s: "libmongoc" in o),
    ("the module's own code", lambda o, s: "gridfs" in o or s.startswith("ngx_http_gridfs")),
    ("memcpy and memmove", lambda o, s: o.startswith("libc") and re.search(r"mem(cpy|move)", s)),
    ("malloc and free", lambda o, s: o.startswith("libc") and re.search(r"malloc|free|_int_|calloc|realloc|tcache",
                                                                         s)),
    ("nginx itself", lambda o, s: o == "nginx"),
    ("libc: other", lambda o, s: o.startswith("libc") or o.startswith("libpthread") or o.startswith("ld-linux")),
]
OTHER = "other libraries"


def parse_report(text: str) -> list[tuple[str, str, int]]:
    """[(object, symbol, samples)] of `perf report --stdio -n --sort
    dso,sym` (no call graphs). The kernel's object is named "kernel"."""
    rows = []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        m = ROW.match(line)
        if m is None:
            continue
        _, samples, dso, level, symbol = m.groups()
        obj = "kernel" if level == "k" or dso.startswith("[kernel") else Path(dso).name
        rows.append((obj, symbol, int(samples)))
    return rows


def group_of(obj: str, symbol: str) -> str:
    return next((what for what, belongs in GROUPS if belongs(obj, symbol)), OTHER)


def breakdown(rows: list[tuple[str, str, int]]) -> dict[str, int]:
    """Samples per group."""
    groups: dict[str, int] = {}
    for obj, symbol, samples in rows:
        what = group_of(obj, symbol)
        groups[what] = groups.get(what, 0) + samples
    return groups


def perf_report(data: Path) -> list[tuple[str, str, int]]:
    out = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "-n", "--no-children", "--sort", "dso,sym",
                          "-g", "none", "--percent-limit", "0"], capture_output=True, text=True, timeout=300)
    return parse_report(out.stdout)
