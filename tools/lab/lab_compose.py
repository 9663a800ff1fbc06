"""What the host-side tools (tools/lab/resilience.py, tools/lab/overload.py,
tools/lab/change.py) share: running docker compose with a timeout and an
error naming the step, their project taken down whatever happened (a
SIGTERM, SIGINT or SIGHUP too), their checked number settings, the paths a
run considers, the run's directory, and a container's memory as its cgroup
counts it (v1 and v2).
bench comes from .venv (installed editable: make's .venv/bin/python) or
from loadgen/ on PYTHONPATH (tools/ci/ci-lab.sh, for the host's python3)."""
import json
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.env_file import read_env_file  # the one reader of the lab's env files

ROOT = Path(__file__).resolve().parents[2]


class LabError(Exception):
    pass


def settings_in(env_file: Path) -> dict:
    """NAME=value lines of an env file (comments and blanks skipped), as bench.env_file reads every env file."""
    return read_env_file(env_file)


def number(env: dict, name: str, default: str, low: float, high: float, whole: bool = False) -> float:
    """One number within bounds, or a LabError naming the variable."""
    text = env.get(name, default).strip()
    try:
        value = int(text) if whole else float(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        kind = "a whole number" if whole else "a number"
        raise LabError(f"{name}={text!r}: expected {kind} from {low:g} to {high:g}")
    return value


# A run past its time limit gets SIGTERM, so that its own teardown runs, and SIGKILL only this much later.
# tools/lab/change.py's on SIGTERM (stop_on_sigterm): its twin restarts stop (one in flight: up to a minute,
# DOCKER_TIMEOUT_S there), then `docker compose down -t 5` of the A/B project, some seconds (5 s for each
# container to stop, then the containers and the network go), more on a loaded machine.
TEARDOWN_GRACE_S = 120


class Stopped(Exception):
    """SIGTERM, SIGINT or SIGHUP reached this tool while its child ran (a CI
    job cancelled, Ctrl-C, the terminal closed): the child was given SIGTERM
    and its teardown awaited. Its text says which signal and how the child
    ended; the tool stops there."""


# What ends a tool: a CI job cancelled or timeout(1) (SIGTERM), Ctrl-C (SIGINT), its terminal gone (SIGHUP).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def heard_stop_signals() -> tuple[signal.Signals, ...]:
    """STOP_SIGNALS but SIGHUP where it is ignored already: nohup's, the
    tool meant to outlive its terminal."""
    return tuple(name for name in STOP_SIGNALS
                 if name != signal.SIGHUP or signal.getsignal(name) is not signal.SIG_IGN)


def ignore_stop_signals() -> None:
    """From here on a stop signal is ignored: a teardown under way must not
    be cut short. Ignored, not handled, so that the `down` started next
    inherits it too (Ctrl-C reaches the whole process group); its own
    timeout bounds it."""
    for name in heard_stop_signals():
        signal.signal(name, signal.SIG_IGN)


def _interrupted(signum, _frame):
    # Once: Ctrl-C reaches the whole process group, and the gate or a calibration above this passes it on as
    # SIGTERM (run_stopped_at); a second KeyboardInterrupt would cut the `down` short.
    ignore_stop_signals()
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_sigterm() -> None:
    """SIGTERM (a CI job cancelled, timeout(1), kill) and SIGHUP take
    Ctrl-C's path: a KeyboardInterrupt, so the tool's teardown (a `finally`,
    measure_then_finish) runs and takes its compose project down. Python's
    default ends the process at once, the project left running. The first
    of these signals only: any later one is ignored while the project goes
    down."""
    for name in heard_stop_signals():
        signal.signal(name, _interrupted)


def exit_text(code: int) -> str:
    """A child's end as a reader needs it: Popen gives -N for a signal."""
    return f"ended by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


def run_stopped_at(args: list[str], timeout: float, grace: float = TEARDOWN_GRACE_S, **popen) -> int | str:
    """`args` run attached (its output shows as it goes): its exit code, or,
    when it runs past `timeout`, SIGTERM (for its own teardown), SIGKILL
    `grace` seconds later if it is still running, and a line saying so.
    subprocess.run's timeout would SIGKILL at once: no teardown. SIGTERM,
    SIGINT or SIGHUP to this process while `args` runs takes the same way,
    then raises Stopped: without it the child would not hear of it (SIGTERM
    to a parent is not passed on) and its compose project would stay up. A
    second signal is noted, not passed on: it must not cut that teardown
    short."""
    heard = heard_stop_signals()
    received: list[str] = []

    def note(signum, _frame):
        received.append(signal.Signals(signum).name)

    def stop(signum, frame):
        for name in heard:  # from here on noted only: the child's teardown must not be cut short
            signal.signal(name, note)
        note(signum, frame)
        raise Stopped(received[0])

    with subprocess.Popen(args, **popen) as proc:
        before = {name: signal.signal(name, stop) for name in heard}
        try:
            try:
                return proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                why, timed_out = f"no end within {timeout:g} s", True
            except Stopped as e:
                why, timed_out = f"{e} to this tool", False
            for name in heard:
                signal.signal(name, note)
            proc.terminate()
            try:
                ended = f"{why}: SIGTERM, then {exit_text(proc.wait(timeout=grace))}"
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                ended = f"{why}: SIGTERM, then SIGKILL {grace:g} s later"
        finally:
            for name, handler in before.items():
                signal.signal(name, handler)
    if received:  # timed out: the signal came while the child past its time was being stopped
        raise Stopped(f"{ended}; {received[0]} to this tool meanwhile" if timed_out else ended)
    return ended


def compose_run(base: list[str], args: list[str], env: dict, timeout: float, what: str) -> str:
    try:
        p = subprocess.run(base + args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LabError(f"{what}: no end after {timeout:g} s (docker compose {' '.join(args)})") from None
    if p.returncode != 0:
        raise LabError(f"{what}: docker compose {' '.join(args)} exited {p.returncode}: "
                       f"{(p.stderr or p.stdout).strip()[-600:]}")
    return p.stdout


def compose_services(base: list[str], env: dict) -> dict:
    return json.loads(compose_run(base, ["config", "--format", "json"], env, 60, "reading compose.yaml"))["services"]


def known_targets(services: dict, targets: list[str]) -> list[str]:
    unknown = [t for t in targets if t not in services]
    if unknown:
        raise LabError(f"BENCH_TARGETS names {' '.join(unknown)}, not services in compose.yaml")
    if not targets:
        raise LabError("BENCH_TARGETS is empty")
    return targets


def results_base(env: dict, lab: dict) -> Path:
    """RESULTS_DIR as the lab reads it: the environment's, else the env file's."""
    base = Path(env.get("RESULTS_DIR") or lab.get("RESULTS_DIR", "./results"))
    return base if base.is_absolute() else ROOT / base


def results_dir(env: dict, lab: dict, kind: str) -> tuple[str, Path]:
    """A new results/<kind>-<UTC time>/ (RESULTS_DIR as the lab reads it)."""
    base = results_base(env, lab)
    run_id = f"{kind}-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    (base / run_id).mkdir(parents=True)
    return run_id, base / run_id


def newest_result(results: Path, before: set[str]) -> Path | None:
    """The ab.json of the run folder made since `before`; not through
    results/latest, a link to it whose name sorts after every run id."""
    made = sorted(p for p in results.glob("*/ab.json") if p.parent.name not in before and not p.parent.is_symlink())
    return made[-1] if made else None


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def container_id(base: list[str], env: dict, service: str) -> str:
    out = compose_run(base, ["ps", "-q", service], env, 60, f"finding {service}'s container").strip()
    if not out:
        raise LabError(f"{service}: no container (did it exit?)")
    return out.splitlines()[0]


def inspect(cid: str) -> dict:
    p = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise LabError(f"docker inspect {cid[:12]}: {p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)[0]


def oom_events(cid: str, since: float, until: float) -> int:
    """The kernel's OOM kills in the container's cgroup (Docker's `oom`
    event: the whole container, or one process of it, such as an nginx
    worker)."""
    p = subprocess.run(["docker", "events", "--since", f"{since:.3f}", "--until", f"{until:.3f}",
                        "--filter", f"container={cid}", "--filter", "event=oom", "--format", "{{json .}}"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise LabError(f"docker events: {p.stderr.strip()[-300:]}")
    return sum(1 for line in p.stdout.splitlines() if line.strip())


CGROUP = Path("/sys/fs/cgroup")


def docker_cgroups(cid: str) -> tuple[str, str]:
    """A container's cgroup as Docker names it: its cgroupfs driver's, its systemd driver's."""
    return f"/docker/{cid}", f"/system.slice/docker-{cid}.scope"


def memory_stat_file(cid: str) -> Path | None:
    """The container's memory.stat: cgroup v1 or v2, cgroupfs or systemd driver."""
    for name in docker_cgroups(cid):
        for candidate in (CGROUP / "memory" / name.lstrip("/"), CGROUP / name.lstrip("/")):
            if (candidate / "memory.stat").exists():
                return candidate / "memory.stat"
    return None


def unreclaimable_bytes(stat_text: str) -> int:
    """What the kernel cannot drop to stay under the limit: anonymous memory
    and tmpfs (v1: total_rss + total_shmem; v2: anon + shmem). The page cache
    of files read is left out: it is dropped at the limit, not killed for."""
    fields = dict(line.split() for line in stat_text.splitlines() if len(line.split()) == 2)
    if "anon" in fields:  # v2
        return int(fields["anon"]) + int(fields.get("shmem", 0))
    return int(fields.get("total_rss", fields.get("rss", 0))) + int(fields.get("total_shmem", fields.get("shmem", 0)))


def kernel_memory(directory: Path) -> dict:
    """The container's own memory cgroup's counters (v1 or v2): its peak
    usage, page cache included (v1 memory.max_usage_in_bytes, v2
    memory.peak; None where the kernel has none) and its OOM kills (v1
    memory.oom_control, v2 memory.events: `oom_kill N`)."""
    def read(name: str) -> str | None:
        try:
            return (directory / name).read_text()
        except OSError:
            return None
    peak = read("memory.max_usage_in_bytes") or read("memory.peak")
    events = read("memory.oom_control") or read("memory.events") or ""
    kills = dict(line.split() for line in events.splitlines() if len(line.split()) == 2).get("oom_kill")
    return {"peak_bytes": int(peak) if peak and peak.strip().isdigit() else None,
            "oom_kills": int(kills) if kills is not None else None}


class PeakMemory:
    """Samples a container's unreclaimable memory five times a second in a
    thread; .peak is the highest seen (None when its cgroup is not found)."""

    def __init__(self, cid: str):
        self.stat = memory_stat_file(cid)
        self.peak: int | None = None
        # the kernel's own counters over the same span: its peak (reset at
        # the start where the kernel allows it: v1) catches what 5 Hz
        # sampling misses, page cache and kernel socket memory included
        self.kernel_peak: int | None = None
        self.kernel_oom_kills: int | None = None
        self._kills_before: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            try:
                value = unreclaimable_bytes(self.stat.read_text())
                self.peak = value if self.peak is None else max(self.peak, value)
            except (OSError, ValueError):
                return  # the cgroup went with its container: the peak so far stands
            self._stop.wait(0.2)

    def __enter__(self):
        if self.stat:
            try:  # cgroup v1: writing 0 starts the peak anew; v2 counts from the container's start
                (self.stat.parent / "memory.max_usage_in_bytes").write_text("0")
            except OSError:
                pass
            self._kills_before = kernel_memory(self.stat.parent)["oom_kills"]
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self.stat:
            counters = kernel_memory(self.stat.parent)  # gone with its container: None, said as unknown
            self.kernel_peak = counters["peak_bytes"]
            if counters["oom_kills"] is not None and self._kills_before is not None:
                self.kernel_oom_kills = counters["oom_kills"] - self._kills_before


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise LabError(f"{what}: not within {timeout:g} s")


LOG_LINES = 200  # of a path's log per case, kept beside the results


def keep_log(base: list[str], env: dict, out: Path, name: str, service: str, since: float) -> None:
    """What `service` logged since `since` (its last LOG_LINES lines), kept
    as out/<name>.log: a cut answer, a 500 or a restart is read there after
    the project is gone."""
    try:
        text = compose_run(base, ["logs", "--no-color", "--no-log-prefix", "--since", f"{since:.0f}",
                                  "--tail", str(LOG_LINES), service], env, 60, f"{service}'s log")
    except LabError as e:
        text = f"(no log: {e})\n"
    (out / f"{name}.log").write_text(text)


def save(out: Path, doc: dict) -> None:
    (out / "results.json").write_text(json.dumps(doc, indent=2) + "\n")


def take_down(tool: str, base: list[str], env: dict) -> None:
    """The tool's compose project down (containers, network, volumes), the
    stop signals ignored meanwhile; a failure is a warning."""
    ignore_stop_signals()
    try:
        compose_run(base, ["down", "-v", "--remove-orphans"], env, 300, "taking the project down")
    except LabError as e:
        print(f"{tool}: warning: {e}", file=sys.stderr)


def finish(tool: str, base: list[str], env: dict, out: Path, doc: dict, render) -> int:
    """Takes the tool's compose project down, whatever happened, then writes
    results.json and report.md; 1 when a case was not measured."""
    take_down(tool, base, env)
    doc["finished"] = now_iso()
    save(out, doc)
    report = render(doc)
    (out / "report.md").write_text(report)
    try:  # the run's index.html and results/index.html; a rendering failure costs only those
        from bench.report.html import write_page
        from bench.report.run_index import write_index
        write_page(out, all_runs=True)
        write_index(out.parent)
    except Exception as e:  # noqa: BLE001
        print(f"{tool}: warning: index.html not written: {type(e).__name__}: {e}", file=sys.stderr)
    print(report)
    print(f"[{tool}] wrote {out}/report.md, index.html and results.json", flush=True)
    return 1 if doc["failed"] else 0


STOPPED = 130  # a tool's exit when a stop signal ended its run, as a shell gives Ctrl-C's


def measure_then_finish(tool: str, base: list[str], env: dict, out: Path, doc: dict, render, measure,
                        where: dict) -> int:
    """measure() (which brings the tool's project up and fills doc), then
    finish: the project down, whatever happened. A LabError and a stop
    signal (stop_on_sigterm, set here) are rows of doc["failed"] (`where`
    says where, for the report's table); a stop signal exits STOPPED. Any
    other error: the project down, then raised on."""
    stop_on_sigterm()
    stopped = False
    try:
        try:
            measure()
        except LabError as e:
            print(f"{tool}: error: {e}", file=sys.stderr)
            doc["failed"].append({**where, "error": str(e)})
        finally:
            ignore_stop_signals()  # the teardown from here: a signal now would leave the project up
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM or SIGHUP (stop_on_sigterm)
        stopped = True
        print(f"{tool}: stopped by {e}: taking the project down; what was measured is kept", file=sys.stderr)
        doc["failed"].append({**where, "error": f"stopped by {e}"})
    except BaseException:
        take_down(tool, base, env)
        raise
    code = finish(tool, base, env, out, doc, render)
    return STOPPED if stopped else code


def open_lab(env: dict, prefix: str, project: str) -> tuple[Path, dict, list[str]]:
    """The env file PREFIX_ENV_FILE names (default local.env), its settings,
    and the docker compose command for the tool's own project PREFIX_PROJECT."""
    env_file = ROOT / env.get(f"{prefix}_ENV_FILE", "local.env")
    if not env_file.exists():
        raise LabError(f"{prefix}_ENV_FILE: {env_file} does not exist (make local-images writes local.env; "
                       f"{prefix}_ENV_FILE=.env runs official images)")
    base = ["docker", "compose", "-p", env.get(f"{prefix}_PROJECT", project), "--env-file", str(env_file)]
    return env_file, settings_in(env_file), base
