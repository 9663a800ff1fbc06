"""The working set over HTTP against real nginx on 127.0.0.1 with real wrk:
working_set.lua asks for many different files at random, a path that
serves the set right is timed, one that lacks part of it is failed before
timing, and the report puts the set beside the hot-file figures."""
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from support.service_processes import NginxStatic
from support.processes import free_port, stop_process, wait_for_port

from bench.benchmark.cases import Timer
from bench.progress import Progress
from bench.report.markdown import render_markdown
from bench.results import Results, TargetResult
from bench.settings import from_env
from bench.clients.timing import run_wrk
from bench.benchmark.working_set import SCRIPT, sample, time_working_set

COUNT = 300


def make_set(files: Path) -> dict:
    entries = []
    for i in range(COUNT):
        data = os.urandom(1024 + 7 * i)
        name = f"set-{i:05d}.bin"
        (files / name).write_bytes(data)
        (files / name).chmod(0o644)
        entries.append({"name": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return {"spec": f"{COUNT}x1KB-3KB", "count": COUNT, "total_bytes": sum(e["size"] for e in entries),
            "files": entries}


@pytest.fixture
def served_set():
    # not under pytest's tmp tree: it is private to root, and nginx's worker is not root
    files = Path(tempfile.mkdtemp(prefix="lab-set-"))
    files.chmod(0o755)
    file_set = make_set(files)
    yield files, file_set
    shutil.rmtree(files, ignore_errors=True)


def test_the_script_asks_for_many_files_at_random(served_set, tmp_path):
    """An nginx that logs every request: one second of wrk with the script
    reaches nearly every file of the set, and the same thread asks for the
    same names in the same order on every run."""
    files, file_set = served_set
    port, log = free_port(), tmp_path / "access.log"
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"daemon off; worker_processes 1; pid {tmp_path}/nginx.pid; error_log {tmp_path}/error.log;\n"
                    f"events {{}}\nhttp {{ access_log {log}; server {{ listen 127.0.0.1:{port};\n"
                    f"location /files/ {{ alias {files}/; }} }} }}\n")
    names = tmp_path / "names.txt"
    names.write_text("".join(f"{f['name']}\n" for f in file_set["files"]))
    proc = subprocess.Popen(["nginx", "-p", str(tmp_path), "-c", str(conf)], stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, "nginx", proc)
        first = run_wrk(f"http://127.0.0.1:{port}/", 1, 1, script=SCRIPT, script_args=(str(names),))
        asked = [line.split()[6] for line in log.read_text().splitlines()]
        log.write_text("")
        run_wrk(f"http://127.0.0.1:{port}/", 1, 1, script=SCRIPT, script_args=(str(names),))
        again = [line.split()[6] for line in log.read_text().splitlines()]
    finally:
        stop_process(proc)
    assert first.failed == 0 and first.requests >= 1000
    assert len(set(asked)) >= 0.95 * COUNT and set(asked) <= {f"/files/{f['name']}" for f in file_set["files"]}
    common = min(len(asked), len(again))
    assert asked[:common] == again[:common]  # deterministic: one thread, seeded by its number


def test_paths_are_timed_on_the_set_and_one_that_lacks_files_fails(served_set, tmp_path):
    files, file_set = served_set
    partial = Path(tempfile.mkdtemp(prefix="lab-set-partial-"))
    partial.chmod(0o755)
    for f in file_set["files"][:-1]:  # all but the last
        shutil.copy2(files / f["name"], partial / f["name"])
    whole, lacking = NginxStatic(files).start(), NginxStatic(partial).start()
    try:
        cfg = from_env({"BENCH_TARGETS": "nginx-static lacking", "BENCH_DURATION": "1", "BENCH_WARMUP": "1",
                        "BENCH_REPETITIONS": "2", "BENCH_CONCURRENCY": "4", "BENCH_MIN_REQUESTS": "0",
                        "CADVISOR_URL": ""})
        targets = [TargetResult("nginx-static", whole.url, True), TargetResult("lacking", lacking.url, True)]
        results = Results(run_id="t", started_at="s", targets=targets, status="complete",
                          environment={"server": {"product": "MongoDB", "version": "7.0"}})
        timer = Timer(cfg, tmp_path, results, None, 1.0, Progress(60))
        ws = time_working_set(timer, targets, file_set, 4)
    finally:
        whole.stop()
        lacking.stop()
        shutil.rmtree(partial, ignore_errors=True)
    assert file_set["files"][-1] in sample(file_set) and len(sample(file_set)) < COUNT
    good, bad = ws.runs
    assert good.ok and good.failed == 0 and good.rps > 0 and len(good.repetitions) == 2, good
    assert good.file == f"set {file_set['spec']}" and good.size_bytes == file_set["total_bytes"] // COUNT
    assert all((tmp_path / r["raw_output"]).exists() for r in good.repetitions)
    assert not bad.ok and f"{file_set['files'][-1]['name']}: status 404" in bad.error
    assert results.order == [f"nginx-static set {file_set['spec']} c=4 r={i}" for i in (1, 2)]
    results.working_set = ws
    assert results.failed
    report = render_markdown(results)
    assert "## Working set: many files in random order" in report
    assert "| lacking | not recorded | failed |" in report
