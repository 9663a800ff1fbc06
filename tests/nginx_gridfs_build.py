"""Builds services/nginx-gridfs/module natively against the host's nginx
(Debian's nginx-dev tree) and caches the .so by a hash of the module sources
and the nginx version, so a test session builds it at most once."""
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODULE_DIR = REPO / "services" / "nginx-gridfs" / "module"
NGINX_SRC = Path("/usr/share/nginx/src")
NGINX_BIN = "/usr/sbin/nginx"
CACHE = Path(os.environ.get("LAB_CACHE", "/var/cache/gridfs-lab")) / "nginx-gridfs"
SO_NAME = "ngx_http_gridfs_module.so"


def _source_hash() -> str:
    digest = hashlib.sha256()
    version = subprocess.run([NGINX_BIN, "-v"], capture_output=True, text=True).stderr
    digest.update(version.encode())
    for path in sorted(MODULE_DIR.iterdir()):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _debian_configure_flags() -> list[str]:
    # conf_flags is a bash array: the flags Debian's nginx was configured
    # with (--with-compat, --with-threads...), which modules must match.
    out = subprocess.run(["bash", "-c", f'. {NGINX_SRC}/conf_flags && printf "%s\\n" "${{NGX_CONF_FLAGS[@]}}"'],
                         check=True, capture_output=True, text=True)
    return out.stdout.splitlines()


def build_module() -> Path:
    """Path of the module .so, built now unless the cache has it."""
    target = CACHE / _source_hash() / SO_NAME
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
            for cmd in (["./configure", *_debian_configure_flags(), f"--add-dynamic-module={MODULE_DIR}"],
                        ["make", "-j2", "-f", "objs/Makefile", "modules"]):
                result = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
                if result.returncode != 0:
                    raise RuntimeError(f"{' '.join(cmd[:2])} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")
            target.parent.mkdir(exist_ok=True)
            shutil.copy(tree / "objs" / SO_NAME, target.with_suffix(".tmp"))
            target.with_suffix(".tmp").rename(target)
    return target


if __name__ == "__main__":
    print(build_module())
