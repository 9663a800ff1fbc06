"""Builds services/nginx-gridfs/module natively against the host's nginx
(Debian's nginx-dev tree) and caches the .so by a hash of the module sources
and the nginx version, so a test session builds it at most once; runs nginx
with it for tests.

build_module(sanitize=True) builds it with AddressSanitizer and
UndefinedBehaviorSanitizer: Debian's nginx is not instrumented, so nginx
runs with the matching libasan preloaded (every malloc and free is then
checked, the module's own reads and writes too), and each report goes to
a file the tests read. nginx's pools carve small blocks out of larger ones:
an overflow within a pool block is not seen, one of a large block (the
windows, the driver's replies) is."""
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from support.processes import free_port, stop_process, wait_for_port

REPO = Path(__file__).resolve().parents[2]
# NGINX_GRIDFS_MODULE_DIR: build another copy of the module (a previous
# revision, say) instead, to compare figures before and after a change.
MODULE_DIR = Path(os.environ.get("NGINX_GRIDFS_MODULE_DIR") or REPO / "services" / "nginx-gridfs" / "module")
NGINX_SRC = Path("/usr/share/nginx/src")
NGINX_BIN = "/usr/sbin/nginx"
CACHE = Path(os.environ.get("LAB_CACHE", "/var/cache/gridfs-lab")) / "nginx-gridfs"
SO_NAME = "ngx_http_gridfs_module.so"
# -fno-sanitize-recover: a UBSan finding aborts the worker, as an ASan one does
SANITIZE_CFLAGS = "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
SANITIZE_LDFLAGS = "-fsanitize=address,undefined"
# how a report begins ("file:line:col: runtime error: ...", "==pid==ERROR: AddressSanitizer")
SANITIZER_LINE = re.compile(r": runtime error: |ERROR: \w+Sanitizer")


def _source_hash(sanitize: bool = False) -> str:
    digest = hashlib.sha256()
    version = subprocess.run([NGINX_BIN, "-v"], capture_output=True, text=True).stderr
    digest.update(version.encode())
    if sanitize:
        digest.update(SANITIZE_CFLAGS.encode() + subprocess.run(["gcc", "--version"], capture_output=True,
                                                                 text=True).stdout.encode())
    for path in sorted(MODULE_DIR.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _debian_configure_flags() -> list[str]:
    # conf_flags is a bash array: the flags Debian's nginx was configured
    # with (--with-compat, --with-threads...), which modules must match.
    out = subprocess.run(["bash", "-c", f'. {NGINX_SRC}/conf_flags && printf "%s\\n" "${{NGX_CONF_FLAGS[@]}}"'],
                         check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def libasan() -> str:
    """The ASan runtime the sanitized module was linked against."""
    return os.path.realpath(subprocess.run(["gcc", "-print-file-name=libasan.so"], check=True,
                                           capture_output=True, text=True).stdout.strip())


def build_module(sanitize: bool = False) -> Path:
    """Path of the module .so, built now unless the cache has it."""
    target = CACHE / (_source_hash(sanitize) + ("-asan" if sanitize else "")) / SO_NAME
    if target.exists():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another session may be building it
        if target.exists():
            return target
        with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
            # The nginx-dev tree is shared: configure a copy of it.
            tree = Path(tmp) / "nginx"
            shutil.copytree(NGINX_SRC, tree)
            flags = [f"--with-cc-opt={SANITIZE_CFLAGS}", f"--with-ld-opt={SANITIZE_LDFLAGS}"] if sanitize else []
            for cmd in (["./configure", *_debian_configure_flags(), *flags, f"--add-dynamic-module={MODULE_DIR}"],
                        ["make", "-j2", "-f", "objs/Makefile", "modules"]):
                result = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
                if result.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd[:2])} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
            target.parent.mkdir(exist_ok=True)
            shutil.copy(tree / "objs" / SO_NAME, target.with_suffix(".tmp"))
            target.with_suffix(".tmp").rename(target)
    return target


def configured_nginx() -> Path:
    """A configured copy of the nginx-dev tree (objs/ngx_auto_config.h and
    the rest), to compile module sources outside nginx's build."""
    digest = hashlib.sha256(subprocess.run([NGINX_BIN, "-v"], capture_output=True, text=True).stderr.encode())
    tree = CACHE / f"configured-{digest.hexdigest()[:16]}"
    if (tree / "objs" / "ngx_auto_config.h").exists():
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (tree / "objs" / "ngx_auto_config.h").exists():
            return tree
        shutil.rmtree(tree, ignore_errors=True)
        shutil.copytree(NGINX_SRC, tree)
        result = subprocess.run(["./configure", *_debian_configure_flags()], cwd=tree,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"configure failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
    return tree


FUZZ_SOURCE = REPO / "tests" / "fuzz" / "gridfs_fuzz.c"
FUZZ_CFLAGS = ["-g", "-O1", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=undefined",
               "-fno-omit-frame-pointer"]
ADMISSION_DRIVER_SOURCE = REPO / "tests" / "module_policy" / "gridfs_admission_driver.c"
ADMISSION_DRIVER_CFLAGS = ["-g", "-O1", "-Wall", "-Werror", "-fsanitize=address,undefined",
                           "-fno-sanitize-recover=undefined"]


def build_fuzzer() -> Path:
    """tests/fuzz/gridfs_fuzz.c and the module's pure arithmetic
    (ngx_http_gridfs_window.c) as a libFuzzer binary, with ASan and UBSan,
    cached by a hash of both."""
    return _build_with_module("fuzz", "gridfs_fuzz", ["clang", *FUZZ_CFLAGS],
                              [FUZZ_SOURCE, MODULE_DIR / "ngx_http_gridfs_window.c"])


def build_admission_driver() -> Path:
    """tests/module_policy/gridfs_admission_driver.c and the module's
    admission policy (ngx_http_gridfs_admission.c), with ASan and UBSan,
    cached by a hash of both."""
    return _build_with_module("admission", "gridfs_admission_driver", ["gcc", *ADMISSION_DRIVER_CFLAGS],
                              [ADMISSION_DRIVER_SOURCE, MODULE_DIR / "ngx_http_gridfs_admission.c"])


def _build_with_module(kind: str, name: str, compiler: list[str], sources: list[Path]) -> Path:
    """A program of sources compiled against the module's header (nginx's
    and libmongoc's), cached under kind-<hash of the command and sources>."""
    tree = configured_nginx()
    digest = hashlib.sha256(" ".join(compiler).encode())
    for path in [*sources, MODULE_DIR / "ngx_http_gridfs.h"]:
        digest.update(path.read_bytes())
    target = CACHE / f"{kind}-{digest.hexdigest()[:16]}" / name
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    includes = [f"-I{tree / sub}" for sub in ("src/core", "src/event", "src/event/modules", "src/os/unix", "objs")]
    pkg = subprocess.run(["pkg-config", "--cflags", "--libs", "libmongoc-1.0"], check=True,
                         capture_output=True, text=True).stdout.split()
    cmd = [*compiler, *includes, f"-I{MODULE_DIR}", *map(str, sources), *pkg, "-o", str(target.with_suffix(".tmp"))]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"building {name} failed:\n{' '.join(cmd)}\n{result.stderr[-6000:]}")
    target.with_suffix(".tmp").rename(target)
    return target


if __name__ == "__main__":
    import sys
    print(build_fuzzer() if "--fuzzer" in sys.argv else build_module(sanitize="--sanitize" in sys.argv))


class Nginx:
    """/usr/sbin/nginx with the module, one worker, in a temporary prefix;
    http_extra: more directives for the http block; sanitize: the module
    was built with sanitize=True (the runtime is preloaded, reports go to
    files: sanitizer_report())."""

    def __init__(self, module: Path, mongo_uri: str, files_dir: Path, prefix: Path, db: str,
                 http_extra: str = "", threads: int = 8, sanitize: bool = False):
        self.prefix = prefix
        prefix.chmod(0o755)  # the html root must be readable by the worker, as in a real install
        self.port = free_port()
        self.error_log = prefix / "error.log"
        self.debug_log = prefix / "debug.log"
        for sub in ("logs", "tmp"):
            (prefix / sub).mkdir(exist_ok=True)
        self.sanitizer_dir = prefix / "sanitizer"
        env = None
        if sanitize:
            self.sanitizer_dir.mkdir(exist_ok=True)
            self.sanitizer_dir.chmod(0o1777)  # the worker runs as nobody
            report = self.sanitizer_dir / "report"  # the runtime appends .<pid>
            env = {**os.environ, "LD_PRELOAD": libasan(),
                   # nginx frees no pool at exit, by design: no leak check
                   "ASAN_OPTIONS": f"log_path={report}:detect_leaks=0:halt_on_error=1:abort_on_error=0",
                   "UBSAN_OPTIONS": f"log_path={report}:print_stacktrace=1:halt_on_error=1"}
        (prefix / "nginx.conf").write_text(f"""
daemon off;
master_process on;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log {self.error_log} info;
load_module {module};
thread_pool gridfs threads={threads};
worker_rlimit_nofile 8192;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    open_file_cache off;
    server_tokens off;
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    mongo "{mongo_uri}";
    gridfs_thread_pool gridfs;
    {http_extra}
    server {{
        listen 127.0.0.1:{self.port};
        location /files/ {{ gridfs {db} root_collection=fs field=filename type=string; }}
        location /byid/ {{ gridfs {db} field=_id type=objectid; }}
        location /traced/ {{
            gridfs {db} field=filename type=string;
            error_log {self.debug_log} debug;
        }}
        location /static/ {{ alias {files_dir}/; }}
        location = /health {{ return 200 "ok\\n"; }}
    }}
}}
""")
        self.proc = subprocess.Popen([NGINX_BIN, "-p", str(prefix), "-c", str(prefix / "nginx.conf"),
                                      "-e", str(self.error_log)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        wait_for_port(self.port, "nginx", self.proc)

    def url(self, path: str = "") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [int(pid) for pid in children]

    def log(self) -> str:
        return self.error_log.read_text(errors="replace")

    def worker_status(self, field: str) -> int:
        """A /proc/<worker>/status figure in KiB (VmRSS, VmHWM...)."""
        (pid,) = self.worker_pids()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    def sanitizer_report(self) -> str:
        """Every ASan or UBSan report written so far, "" if none. ASan
        writes its reports to files; UBSan, loaded with the module after
        the process started, to stderr, which nginx sends to its error log."""
        if not self.sanitizer_dir.exists():
            return ""
        reports = [f"--- {path.name}\n{path.read_text(errors='replace')}"
                   for path in sorted(self.sanitizer_dir.iterdir())]
        lines = self.log().splitlines()
        for i, line in enumerate(lines):
            if SANITIZER_LINE.search(line):
                reports.append(f"--- {self.error_log.name}\n" + "\n".join(lines[i:i + 30]) + "\n")
        return "".join(reports)

    def assert_no_sanitizer_report(self) -> None:
        report = self.sanitizer_report()
        assert not report, f"sanitizer report:\n{report[:20000]}"

    @contextlib.contextmanager
    def sanitizer_checked(self):
        """Fails with the sanitizer's report if one was written, whatever
        else failed meanwhile (a worker it stopped cuts responses short)."""
        try:
            yield
        finally:
            self.assert_no_sanitizer_report()

    def stop(self) -> None:
        stop_process(self.proc)
