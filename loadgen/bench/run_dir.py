"""Where a run is written: results/<UTC time>/ (never an existing one),
results/latest pointing at it, and the seed's manifest it starts from."""
import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

RESULTS_NOT_WRITABLE = ("{path} (RESULTS_DIR, mounted) is not writable by uid {uid}:{gid}, the RESULTS_OWNER "
                        "bench runs as: set RESULTS_OWNER to the directory's owner (make lab sets it to your "
                        "own ids), e.g. RESULTS_OWNER=$(id -u):$(id -g) docker compose up bench")
VOLUME_NOT_WRITABLE = ("{path} (the {volume} volume) is not writable by uid {uid}:{gid}: it was made by an earlier "
                       "version of the lab, which ran as root. Remove it (docker compose down -v, or docker volume "
                       "rm <project>_{volume}) and run again")


def not_writable(path: Path, message: str, **names) -> str | None:
    """`message` filled in when this process cannot create a file in `path`
    (bench is not root: compose.yaml), else None."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".bench-probe-"):
            return None
    except OSError as error:
        return message.format(path=path, uid=os.getuid(), gid=os.getgid(), **names) + f" ({error.strerror})"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_dir(results_dir: Path) -> Path:
    """results/<UTC time>, never an existing one."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    for n in range(1, 1000):
        candidate = results_dir / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            continue
    raise RuntimeError(f"no free run directory under {results_dir}")


def point_latest(results_dir: Path, run_dir: Path) -> None:
    tmp = results_dir / ".latest.tmp"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(run_dir.name)
    tmp.replace(results_dir / "latest")


def load_manifest(files_dir: Path) -> dict:
    """The seed's manifest: `files`, and the seed's own wall time, `seconds`."""
    path = files_dir / "manifest.json"
    if not path.exists():
        raise SystemExit(f"bench: error: no manifest at {path}: the seed service has not completed")
    return json.loads(path.read_text())
