"""Fresh twins before each block (bench/benchmark/twins.py): bench asks
through files in its run folder, the host (tools/lab/change.py) answers. Both real
sides of the exchange run here, the host's in a thread; what it runs to
restart is docker in tools/lab/change.py, exercised end to end in
tests/test_compose_e2e.py (every block's twins have new start times)."""
import json
import threading
import time
from pathlib import Path

import pytest

from bench.benchmark import twins
from bench.benchmark.schedule import Schedule

import change as change_tool
from lab_compose import LabError


def host(results: Path, restart, stop: threading.Event, since: float) -> threading.Thread:
    def serve():
        while not stop.wait(twins.POLL_S):
            for asked in twins.pending(results, since):
                twins.answer(asked, restart)
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_bench_asks_the_host_answers_and_nothing_is_left(tmp_path):
    run = tmp_path / "20261128T010000Z"
    run.mkdir()
    asked = []

    def restart(services):
        asked.append(services)
        return {"started_at": {s: f"2026-11-28T01:00:0{len(asked)}Z" for s in services}, "seconds": 0.1}
    stop = threading.Event()
    thread = host(tmp_path, restart, stop, time.time())
    try:
        restarter = twins.Restarter(run, ["flask", "flask-b"], timeout=10)
        first, second = restarter.restart("1"), restarter.restart("2")
        restarter.close()
    finally:
        stop.set()
        thread.join()
    assert asked == [["flask", "flask-b"], ["flask", "flask-b"]]
    assert first["started_at"] == {"flask": "2026-11-28T01:00:01Z", "flask-b": "2026-11-28T01:00:01Z"}
    assert second["started_at"]["flask-b"] == "2026-11-28T01:00:02Z"
    assert list(run.iterdir()) == []  # the exchange's files and folder went with it


def test_a_failed_restart_is_bench_s_error_with_its_cause(tmp_path):
    run = tmp_path / "run"
    run.mkdir()

    def restart(services):
        raise LabError("flask-b: docker restart exited 1: No such container")
    stop = threading.Event()
    thread = host(tmp_path, restart, stop, time.time())
    try:
        with pytest.raises(twins.TwinRestartError, match="flask-b: docker restart exited 1: No such container"):
            twins.Restarter(run, ["flask", "flask-b"], timeout=10).restart("1")
    finally:
        stop.set()
        thread.join()


def test_nobody_answering_ends_within_the_timeout_and_says_how_to_run_without(tmp_path):
    began = time.monotonic()
    with pytest.raises(twins.TwinRestartError, match="no answer within 0.5 s .*AB_RESTART_TWINS=off"):
        twins.Restarter(tmp_path, ["flask", "flask-b"], timeout=0.5).restart("1")
    assert time.monotonic() - began < 2
    assert not list((tmp_path / twins.FOLDER).iterdir())


def test_the_host_answers_only_new_runs_and_each_request_once(tmp_path):
    old = tmp_path / "old-run" / twins.FOLDER
    old.mkdir(parents=True)
    (old / "1.restart").write_text(json.dumps({"services": ["flask"]}))
    since = time.time() + 60  # every folder here predates the host
    assert twins.pending(tmp_path, since) == []
    assert twins.pending(tmp_path, time.time()) == [old / "1.restart"]
    twins.answer(old / "1.restart", lambda services: {"started_at": {}})
    assert twins.pending(tmp_path, time.time()) == []


def test_the_host_restarts_the_two_twins_and_nothing_else():
    restarts = change_tool.TwinRestarts(["docker", "compose"], {}, Path("/nonexistent"), ["flask", "flask-b"])
    for asked in (["mongo"], ["flask", "postgres"], []):
        with pytest.raises(LabError, match="refused: only flask and flask-b are restarted"):
            restarts.restart(asked)


def test_each_block_begins_with_the_hook_and_a_failed_case_asks_no_more():
    schedule = Schedule(seed="run", repetitions=1)
    events, failed = [], set()

    def one(name, block):
        events.append((name, block))
        if block == 3:
            failed.update(("a", "b"))
    schedule.repeat("A/B 1KB c=5", ["a", "b"], one, repetitions=6, skip=lambda n: n in failed,
                    before=lambda block: events.append(("restart", block)))
    assert [e for e in events if e[0] == "restart"] == [("restart", 1), ("restart", 2), ("restart", 3)]
    assert events[0] == ("restart", 1) and events[3] == ("restart", 2)
