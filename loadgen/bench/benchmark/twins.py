"""Fresh twins for every block of an A/B run. bench has no Docker socket (by
design), so it asks the one that started the run, tools/lab/change.py on the host,
to restart A and B, through files in the run's folder: bench writes
`.twins/<block>.restart` (JSON: the services), tools/lab/change.py restarts them and
answers `<block>.done` (JSON: each container's new start time, the seconds
it took) or `<block>.failed` (JSON: why). Both sides write a file whole
(a temporary name, then a rename), so neither reads one half written.

Why restart at all: in an A/A of flask at 1 MB (shedding half its answers
at the deadline) one twin served 15.6% more than the other in 13 of 14
blocks, with nothing changed (docs/ab.md). What a container keeps for a
whole run (its connections to the database, how many, its queues) is drawn
once per run, and no pairing of blocks within the run can see it: a run's
blocks then agree with each other about a difference that is the two
containers', not their images'. Restarting both before each block draws
that state anew each block, so the blocks' spread, and so the interval,
covers it."""
import json
import os
import time
from pathlib import Path

FOLDER = ".twins"
POLL_S = 0.1


class TwinRestartError(Exception):
    pass


def write_whole(path: Path, doc: dict) -> None:
    """The file appears complete or not at all."""
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(doc))
    os.replace(part, path)


def read_answer(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except ValueError as e:
        raise TwinRestartError(f"{path.name}: not JSON ({e})") from None


class Restarter:
    """bench's side: restart(block) asks for both twins to be restarted and
    waits for the answer, at most `timeout` seconds."""

    def __init__(self, run_dir: Path, services: list[str], timeout: float):
        self.folder, self.services, self.timeout = Path(run_dir) / FOLDER, list(services), timeout

    def restart(self, block: str) -> dict:
        self.folder.mkdir(exist_ok=True)
        asked = self.folder / f"{block}.restart"
        write_whole(asked, {"services": self.services})
        give_up = time.monotonic() + self.timeout
        done, failed = asked.with_suffix(".done"), asked.with_suffix(".failed")
        try:
            while time.monotonic() < give_up:
                if done.exists():
                    return read_answer(done)
                if failed.exists():
                    raise TwinRestartError(read_answer(failed).get("error") or "failed, no reason given")
                time.sleep(POLL_S)
            raise TwinRestartError(f"no answer within {self.timeout:g} s (tools/lab/change.py restarts them; "
                                   "AB_RESTART_TWINS=off runs without restarts)")
        finally:
            for path in (asked, done, failed):
                path.unlink(missing_ok=True)

    def close(self) -> None:
        """The folder goes with the run's last restart: nothing of it is a result."""
        try:
            self.folder.rmdir()
        except OSError:
            pass


def pending(results_dir: Path, since: float) -> list[Path]:
    """The host's side: restarts asked for in any run folder created since
    `since` (seconds of the epoch) and not answered yet."""
    asked = []
    for path in Path(results_dir).glob(f"*/{FOLDER}/*.restart"):
        try:
            if path.parent.parent.stat().st_mtime < since - 5:
                continue
        except OSError:
            continue
        if not (path.with_suffix(".done").exists() or path.with_suffix(".failed").exists()):
            asked.append(path)
    return asked


def answer(asked: Path, restart) -> None:
    """Runs restart(services) -> dict (the containers' start times) and
    writes the answer bench waits for; an error becomes `.failed`."""
    try:
        services = read_answer(asked).get("services") or []
        write_whole(asked.with_suffix(".done"), restart(services))
    except Exception as e:  # every failure is bench's to report, with its cause
        write_whole(asked.with_suffix(".failed"), {"error": str(e) or repr(e)})
