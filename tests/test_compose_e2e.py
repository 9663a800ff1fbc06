"""The whole lab, end to end, as a user runs it: `docker compose up bench` on
the local images (make local-images), with small files and few requests.
Then more bench runs on the same stack: a target that never answers, a
target that ignores Range, and long windows to check CPU accounting."""
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from bench.benchmark.schedule import round_order
from bench.env_file import read_env_file
from test_least_privilege import inspected_problems

pytestmark = pytest.mark.lab  # the whole lab, end to end

REPO = Path(__file__).resolve().parent.parent
PROJECT = "gridfs-lab-e2e"  # fixed, so its images are reused from run to run
SIZES = "1KB 300KB"          # one file within a chunk, one across two chunks
CONCURRENCY = [8]           # c=1 is the sweep's (BENCH_SWEEP below): one timed level halves the run
# A tiny working set and store benchmark: every path and every store, in seconds.
FILE_SET = "200x1KB-6KB"
WRITES = {"BENCH_WRITE": "on", "WRITE_FILES": "5", "WRITE_SIZE": "300KB", "WRITE_THREADS": "3"}
GRIDFS_TARGETS = {"nginx-gridfs", "flask", "node", "gridfs-fuse"}
EVERY_PATH = GRIDFS_TARGETS | {"nginx-static", "httpd-static", "nginx-cache", "flask-postgres"}


def env_value(name: str) -> str:
    return read_env_file(REPO / "local.env")[name]


def compose(*args: str, env: dict, timeout: float) -> subprocess.CompletedProcess:
    # local.env carries the 2-core pins on a small machine (local-images/build.sh)
    return subprocess.run(["docker", "compose", "-p", PROJECT, "--env-file", "local.env", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def bench_again(env: dict, *extra: str, entrypoint: list[str] | None = None) -> subprocess.CompletedProcess:
    """One more bench run on the running stack (the store benchmark is the
    first run's to check: off here)."""
    args = ["run", "--rm", "--no-deps", "-e", "BENCH_WRITE=off", *extra]
    if entrypoint:
        args += ["--entrypoint", entrypoint[0], "bench", *entrypoint[1:]]
    else:
        args += ["bench"]
    return compose(*args, env=env, timeout=900)


def bench_lines(proc: subprocess.CompletedProcess) -> str:
    """bench's own progress lines: what a failure message needs."""
    return "\n".join(line for line in proc.stdout.splitlines() if "[bench]" in line or "FAIL" in line)[-8000:]


def latest(results: Path) -> dict:
    return json.loads((results / "latest" / "results.json").read_text())


@pytest.fixture(scope="module")
def lab():
    if not (REPO / "local.env").exists():
        pytest.fail("local.env is missing: run `make local-images` (make test does)")
    results = REPO / "results" / f"e2e-{os.getpid()}"
    results.mkdir(parents=True)
    env = {**os.environ, "RESULTS_DIR": str(results)}
    # bench is not root: it writes the results as RESULTS_OWNER, as make lab runs it
    owner = subprocess.run([str(REPO / "tools" / "lab" / "results-owner.sh"), "local.env"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=60, check=True)
    env["RESULTS_OWNER"] = owner.stdout.strip()
    env = {**env, "FILE_SIZES": SIZES,
           "BENCH_CONCURRENCY": " ".join(map(str, CONCURRENCY)), "BENCH_DURATION": "1", "BENCH_WARMUP": "1",
           "BENCH_MIN_REQUESTS": "0", "BENCH_REPETITIONS": "2", "BENCH_TARGET_WIDTH": "off",
           "BENCH_TOOLS": "ab wrk", "BENCH_OPEN_LOOP": "0.5",
           "BENCH_OPEN_LOOP_SECONDS": "2",
           "BENCH_SWEEP": "1 8", "BENCH_SWEEP_DURATION": "1", "BENCH_PROFILE": "full", "FILE_SET": FILE_SET,
           **WRITES}
    compose("down", "-v", "--remove-orphans", "-t", "2", env=env, timeout=300)  # an interrupted run's
    try:
        up = compose("up", "--build", "--exit-code-from", "bench", "bench", env=env, timeout=2400)
        first = latest(results) if (results / "latest").exists() else None
        yield up, first, results, env
    finally:
        compose("down", "-v", "--remove-orphans", "-t", "2", env=env, timeout=300)
        shutil.rmtree(results, ignore_errors=True)


def test_bench_exits_zero_with_every_target_verified_and_timed(lab):
    up, data, results, _ = lab
    assert up.returncode == 0, bench_lines(up) + up.stderr[-2000:]
    targets = env_value("BENCH_TARGETS").split()
    assert EVERY_PATH <= set(targets)
    assert [t["name"] for t in data["targets"]] == targets
    assert all(t["verified"] and t["error"] is None for t in data["targets"]), data["targets"]
    cases = {(r["target"], r["file"], r["concurrency"]) for r in data["runs"]}
    assert cases == {(t, f"{s}.bin", c) for t in targets for s in SIZES.split() for c in CONCURRENCY}
    for run in data["runs"]:
        assert run["status"] == "ok" and run["rps"] > 0 and run["failed"] == 0, run
        assert all(0.9 <= r["seconds"] <= 1.5 for r in run["repetitions"]), run  # timed by seconds
        assert run["p50_ms"] <= run["p99_ms"]
        assert (results / data["run_id"] / run["raw_output"]).exists()
    assert data["status"] == "complete"
    assert {(o["target"], o["file"]) for o in data["open_loop"]} == {
        (t, f"{s}.bin") for t in targets for s in SIZES.split()}
    assert all(o["status"] == "ok" and o["requests"] > 0 and o["p50_ms"] <= o["p99_ms"] for o in data["open_loop"])


def test_every_container_ran_unprivileged_or_says_why(lab):
    """What Docker ran, not only what compose.yaml asks for: each container
    of the run, inspected (tests/test_least_privilege.py's rules)."""
    _, _, results, env = lab
    ids = compose("ps", "-a", "-q", env=env, timeout=60).stdout.split()
    containers = json.loads(subprocess.run(["docker", "inspect", *ids], capture_output=True, text=True, timeout=60,
                                           check=True).stdout)
    ran = {c["Config"]["Labels"]["com.docker.compose.service"]: c for c in containers}
    assert EVERY_PATH | {"settings", "seed", "bench", "mongo", "postgres", "cadvisor"} <= set(ran)
    assert [p for c in containers for p in inspected_problems(c)] == []
    assert ran["bench"]["Config"]["User"] == env["RESULTS_OWNER"]
    # and the results are the owner's, from the run directory down
    owner = tuple(map(int, env["RESULTS_OWNER"].split(":")))
    run_dir = results / json.loads((results / "latest" / "results.json").read_text())["run_id"]
    assert {(p.stat().st_uid, p.stat().st_gid) for p in [run_dir, *run_dir.iterdir()]} == {owner}


def test_gridfs_fuse_serves_as_nobody_with_no_capability(lab):
    """The one path that starts as root (for its mount): what still runs as
    root in it is only the entrypoint that waits on the two servers."""
    _, _, _, env = lab
    container = compose("ps", "-q", "gridfs-fuse", env=env, timeout=60).stdout.strip()
    top = subprocess.run(["docker", "top", container, "-eo", "pid,comm"], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()[1:]
    processes = {int(pid): comm for pid, comm in (line.split(None, 1) for line in top)}
    status = {pid: dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                        if ":\t" in line) for pid in processes}
    servers = {pid for pid, comm in processes.items() if comm.strip() in ("gridfs-fuse", "nginx")}
    assert {processes[p].strip() for p in servers} == {"gridfs-fuse", "nginx"}, processes
    for pid in servers:
        uids = status[pid]["Uid"].split()
        assert set(uids) == {"65534"} and int(status[pid]["CapEff"], 16) == 0, (processes[pid], status[pid])
        assert int(status[pid]["CapPrm"], 16) == 0, (processes[pid], status[pid])
    assert {processes[p].strip() for p in set(processes) - servers} == {"entrypoint.sh"}, processes
    # its nginx waits out each open of the mount on its event loop: FUSE_NGINX_WORKERS of them, not one
    workers = [pid for pid in servers if processes[pid].strip() == "nginx" and status[pid]["PPid"] in
               {str(p) for p in servers}]
    assert len(workers) == int(env_value("FUSE_NGINX_WORKERS")) == 4, processes


def test_every_target_conforms_to_nginx_static(lab):
    _, data, _, _ = lab
    for target in data["targets"]:
        failed = [c for c in target["conformance"] if not c["passed"]]
        assert target["conforming"] is True and not failed, (target["name"], failed[:5])
        assert sum(c["case"].startswith("hostile:") for c in target["conformance"]) >= 200


def test_cadvisor_measured_cpu_of_each_target_and_of_mongo_within_their_allowance(lab):
    _, data, results, _ = lab
    assert not data["warnings"], data["warnings"]
    for run in data["runs"]:
        assert run["cpu"][run["target"]]["cpu_seconds"] > 0, run
        assert run["cpu"]["bench"]["cpu_seconds"] > 0, run
        if run["target"] in GRIDFS_TARGETS:
            assert run["cpu"]["mongo"]["cpu_seconds"] > 0, run
        if run["target"] == "flask-postgres":
            assert run["cpu"]["postgres"]["cpu_seconds"] > 0, run
        if run["target"] == "nginx-cache":  # warmed: every counted request a hit
            assert run["cache"]["hit_ratio"] >= 0.99 and "cache-missed" not in run["flags"], run
        for rep in run["repetitions"]:
            for role, used in (rep["cpu"] or {}).items():
                assert used["cores"] <= used["allowance_cores"] * 1.05, (run["target"], role, used)
            assert rep["loadgen_cpu_seconds"] <= (rep["ended_ns"] - rep["started_ns"]) / 1e9
        assert isinstance(run["flags"], list)
    # report.md's charts: SVG files beside it (bench/report/svg.py), one a case
    run_dir = results / data["run_id"]
    linked = re.findall(r"^!\[[^\]]*\]\(([^)]+)\)$", (run_dir / "report.md").read_text(), re.M)
    assert "cpu-ms-per-request-by-container-1kb-c-8.svg" in linked and not list(run_dir.glob("*.png"))
    assert all((run_dir / name).stat().st_size > 1000 and name.endswith(".svg") for name in linked), linked


def test_results_record_what_produced_the_run(lab):
    _, data, _, _ = lab
    assert data["parameters"]["MONGO_IMAGE"] == env_value("MONGO_IMAGE")
    assert data["parameters"]["FILE_SIZES"] == SIZES
    assert data["environment"]["server"]["product"] == "FerretDB"
    assert data["environment"]["host_cores"] == os.cpu_count()
    # each service's own base defaults to the shared one (one swap, one service)
    assert data["parameters"]["FLASK_IMAGE"] == data["parameters"]["SEED_IMAGE"] == env_value("PYTHON_IMAGE")
    assert data["parameters"]["NGINX_GRIDFS_IMAGE"] == env_value("NGINX_BASE_IMAGE")
    # what each container ran, from Docker: its image and that image's ID
    images = data["environment"]["images"]
    assert set(images) == set(env_value("BENCH_TARGETS").split()) | {"mongo", "postgres", "bench"}
    assert all(i["image_id"].startswith("sha256:") and i["image"] for i in images.values()), images
    assert images["mongo"]["image"] == env_value("MONGO_IMAGE")
    # each path's store as its container declares it (compose label lab.store), recorded per target
    labels = {name: (s.get("labels") or {}).get("lab.store")
              for name, s in yaml.safe_load((REPO / "compose.yaml").read_text())["services"].items()}
    stores = {t["name"]: t["store"] for t in data["targets"]}
    assert stores == {t: labels[t] for t in env_value("BENCH_TARGETS").split()}, stores


def test_bench_compare_runs_in_the_bench_image(lab):
    _, data, results, env = lab
    run = f"/results/{data['run_id']}"
    done = compose("run", "--rm", "--no-deps", "bench", "compare", run, run, "--out", "/results/compare-self",
                   env=env, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    compared = json.loads((results / "compare-self" / "compare.json").read_text())
    assert compared["differences"] == [] and compared["cases"]
    assert not any(m and m["significant"] for c in compared["cases"] for m in c["metrics"].values())


def test_report_has_the_seed_table_conformance_and_cpu(lab):
    _, data, results, _ = lab
    report = (results / data["run_id"] / "report.md").read_text()
    assert "FerretDB v1.24.2" in report
    assert report.index("## Headline") < report.index("## Verification")
    assert "[5747]" in report  # seed 000's nginx figure for 1KB (0.174 ms per request) beside ours
    assert "## Conformance" in report and "## CPU ms per request" in report
    assert "## Latency at a fixed rate" in report


def test_the_run_page_passes_the_browser_check(lab):
    """The tiny run's own index.html in headless Chromium: no console error,
    every chart drawn, the headline's figures equal results.json's, no
    overflow at 1280 or 390 px (tests/support/browser_check.py)."""
    from support.browser_check import check_page
    _, data, results, _ = lab
    assert check_page(results / data["run_id"] / "index.html") == []


def test_cpu_per_request_counts_the_requests_inside_its_window(lab):
    """Every ab run in the bench image kept its per-request times (-g) as
    completion bins that hold exactly its requests, within its own run; a
    row whose window held two cAdvisor readings divides by the requests in
    it (ab) or by the run's rate (wrk, which has no per-request times); the
    1 s runs here mostly fall back to the whole run."""
    _, data, _, _ = lab
    rows = [(run["target"], rep) for run in data["runs"] for rep in run["repetitions"]]
    rows += [(c["target"], rep) for c in data["comparisons"] for tool in ("ab_keepalive", "wrk")
             for rep in c[tool]["repetitions"]]
    expected = {"ab": "requests in the window", "ab -k": "requests in the window", "wrk": "run's rate"}
    for target, rep in rows:
        if rep["tool"] in ("ab", "ab -k"):
            bins = rep["completions"]
            assert sum(n for _, n in bins) == pytest.approx(rep["requests"], abs=0.05), (target, rep["tool"])
            assert rep["started_ns"] / 1e9 - 0.1 <= bins[0][0] and bins[-1][0] <= rep["ended_ns"] / 1e9, target
        else:
            assert rep.get("completions") is None
        used = (rep.get("cpu") or {}).get(target)
        if used and used["inner_window"]:
            assert used["cpu_ms_per_request_from"] == expected[rep["tool"]], (target, rep)
        elif used:
            assert used["cpu_ms_per_request_from"] == "whole run", (target, rep)


def test_a_target_that_never_answers_is_named_and_fails_the_run(lab):
    _, first, results, env = lab
    bad = bench_again(env, "-e", "BENCH_TARGETS=nginx-static no-such-path", "-e", "BENCH_STARTUP_TIMEOUT=3",
                      "-e", "BENCH_PROFILE=quick")
    assert bad.returncode == 1, bench_lines(bad)
    assert "no-such-path: FAILED verification" in bad.stdout
    data = latest(results)
    assert data["run_id"] != first["run_id"], "a second run must not overwrite the first"
    assert (results / first["run_id"] / "results.json").exists()
    failed = {t["name"]: t for t in data["targets"]}["no-such-path"]
    assert not failed["verified"] and "never answered" in failed["error"]
    assert {r["target"] for r in data["runs"]} == {"nginx-static"}


def test_a_target_that_ignores_range_is_not_timed(lab):
    """Python's http.server inside the bench container serves the files
    volume (and a /health file) correctly but knows no Range, ETag or 304: it
    verifies, then fails conformance, so bench refuses to time it."""
    _, _, results, env = lab
    script = ("mkdir /tmp/www && ln -s /data/files /tmp/www/files && echo ok > /tmp/www/health"
              " && (python -m http.server 8080 --directory /tmp/www >/dev/null 2>&1 &) && sleep 1"
              " && exec python -m bench")
    # the quick profile: what is checked here is that a target is refused, not how the other is timed
    bad = bench_again(env, "-e", "BENCH_TARGETS=nginx-static localhost", "-e", "BENCH_PROFILE=quick",
                      entrypoint=["sh", "-c", script])
    assert bad.returncode == 1, bench_lines(bad)
    data = latest(results)
    plain = {t["name"]: t for t in data["targets"]}["localhost"]
    assert plain["conforming"] is False and not plain["verified"]
    assert "conformance cases failed" in plain["error"]
    failed = {c["case"] for c in plain["conformance"] if not c["passed"]}
    assert "Range first byte (bytes=0-0) 1KB.bin" in failed
    assert {r["target"] for r in data["runs"]} == {"nginx-static"}
    assert "| localhost | Range first byte (bytes=0-0) 1KB.bin |" in (results / "latest" / "report.md").read_text()
    # bench did not wait for a container of the refused target (it has none)
    assert not [w for w in data["warnings"] if "localhost" in w], data["warnings"]


def test_cpu_accounting_agrees_with_the_host(lab):
    """Over a run of several seconds, cAdvisor's machine-wide cores agree with
    the host's /proc/stat within 5%, and the containers' sum stays within
    the machine's (no container is overcounted) and above 90% of the host's:
    the rest is Docker's own processes outside containers (dockerd, the shims,
    the attached compose client), 4-5% measured here. /proc/stat covers the
    whole run, cAdvisor its readings inside it (about a second apart, so up
    to a second short at each end): 10 s, as over 6 s the two once differed
    by 5.7% (1.028 cores against 0.972)."""
    _, _, results, env = lab
    run = bench_again(env, "-e", "BENCH_TARGETS=nginx-static", "-e", "BENCH_CONCURRENCY=5",
                      "-e", "BENCH_DURATION=10", "-e", "BENCH_REPETITIONS=1", "-e", "BENCH_TOOLS=ab",
                      "-e", "BENCH_SWEEP=off", "-e", "BENCH_OPEN_LOOP=0")
    assert run.returncode == 0, bench_lines(run)
    windows = [rep["cpu_window"] for r in latest(results)["runs"] for rep in r["repetitions"]]
    longest = max(windows, key=lambda w: w["seconds"])
    assert longest["seconds"] >= 9, f"windows too short to compare: {windows}"
    host, machine = longest["host_cores"], longest["machine_cores"]
    print(f"\nlongest window {longest['seconds']} s: host {host} cores, cAdvisor machine {machine}, "
          f"containers {longest['containers_cores']}")
    assert machine == pytest.approx(host, rel=0.05)
    assert 0.9 * host <= longest["containers_cores"] <= machine * 1.02


def test_repetitions_spread_tools_sweep_and_phases(lab):
    _, data, results, _ = lab
    run_dir = results / data["run_id"]
    targets = env_value("BENCH_TARGETS").split()
    for run in data["runs"]:
        assert len(run["repetitions"]) == 2, run
        rps = sorted(r["rps"] for r in run["repetitions"])
        row = next(r for r in run["repetitions"] if r["rps"] == run["rps"])  # one repetition per row
        assert run["rps"] == rps[0] and run["p99_ms"] == row["p99_ms"] and run["cpu"] == row["cpu"]
        assert (run["spread"]["min"], run["spread"]["max"]) == (rps[0], rps[1])
        assert ("noisy" in run["flags"]) == run["spread"]["noisy"]
        assert all((run_dir / r["raw_output"]).exists() for r in run["repetitions"])
    # the targets run in each round's order, drawn again here from the recorded seed, and ran as recorded
    orders = data["schedule"]["orders"]["1KB.bin c=8"]
    assert data["schedule"]["seed"] == data["run_id"]
    assert orders == [round_order(targets, f"{data['run_id']}:1KB.bin c=8", i) for i in (1, 2)]
    assert all(r["round"] == i for run in data["runs"] for i, r in enumerate(run["repetitions"], 1))
    assert data["rounds"]["rounds"] == 2 and data["rounds"]["stopped"] == "fixed count"
    assert {(r["target"], r["file"]) for r in data["rounds"]["rows"]} == {
        (t, f"{s}.bin") for t in targets if t != "nginx-static" for s in SIZES.split()}
    first_round = [o for o in data["order"] if " 1KB.bin c=8 r=" in o]  # not ab -k / wrk's, at c=8 too
    assert first_round == [f"{t} 1KB.bin c=8 r={i}" for i, order in enumerate(orders, 1) for t in order]
    # every target's warm-up before every case is recorded (BENCH_WARMUP=1: one window)
    warm_ups = data["schedule"]["warm_ups"]
    assert {f"{t} {s}.bin c={c}" for t in targets for s in SIZES.split() for c in CONCURRENCY} <= set(warm_ups)
    assert all(w["seconds"] == 1.0 and len(w["windows"]) == 1 for w in warm_ups.values())
    cases = {(r["target"], r["file"], max(CONCURRENCY)) for r in data["runs"]}
    assert {(c["target"], c["file"], c["concurrency"]) for c in data["comparisons"]} == cases
    for c in data["comparisons"]:
        for tool in (c["ab_keepalive"], c["wrk"]):
            assert tool["rps"] > 0 and tool["failed"] == 0 and len(tool["repetitions"]) == 2, c
            assert tool["p50_ms"] <= tool["p90_ms"] <= tool["p99_ms"] <= tool["max_ms"], c
        assert c["difference"] >= 0
    assert {(p["target"], p["file"], p["concurrency"], p["tool"]) for p in data["sweep"]} == {
        (t, f"{s}.bin", c, tool) for t in targets for s in SIZES.split() for c in (1, 8) for tool in ("ab", "wrk")}
    for size in SIZES.split():  # the sweep's charts, a size and tool each, beside report.md
        for tool in ("ab", "wrk"):
            assert (run_dir / f"concurrency-sweep-{size.lower()}-{tool}.svg").stat().st_size > 1000
    assert {"seed", "verify", "conformance", "timed cases", "ab -k vs wrk", "sweep", "charts",
            "bench total"} <= set(data["phases"])
    report = (run_dir / "report.md").read_text()
    for heading in ("## ab -k against wrk", "## Concurrency sweep", "## What this run cost"):
        assert heading in report


def test_a_starved_load_generator_is_flagged_loadgen_bound(lab):
    _, _, results, env = lab
    # 1 KB only: at 300 KB nginx's own sending can set the pace before a
    # tenth of a core of load generator does (once, in a full suite: not flagged)
    run = bench_again({**env, "LOADGEN_CPU_QUOTA": "0.1"}, "-e", "BENCH_TARGETS=nginx-static",
                      "-e", "FILE_SIZES=1KB", "-e", "BENCH_CONCURRENCY=5", "-e", "BENCH_DURATION=3",
                      "-e", "BENCH_REPETITIONS=1",
                      "-e", "BENCH_SWEEP=off", "-e", "BENCH_OPEN_LOOP=0")
    assert run.returncode == 0, bench_lines(run)
    data = latest(results)
    assert data["environment"]["loadgen_allowance_cores"] == pytest.approx(0.1)
    assert data["runs"] and all("loadgen-bound" in r["flags"] for r in data["runs"]), data["runs"]
    assert all("loadgen-bound" in c[t]["flags"] for c in data["comparisons"] for t in ("ab_keepalive", "wrk"))
    assert "⚑ `loadgen-bound`" in (results / "latest" / "report.md").read_text()


def test_a_path_that_dies_mid_run_reads_failed_and_the_report_is_written(lab):
    """flask is stopped while bench times it (after the first round, which
    every case had): each case it had rounds left in reads failed in every
    table, keeping its rounds before, nginx-static's go on, report.md is
    written, bench exits 1."""
    _, _, results, env = lab
    before = set(results.iterdir())
    proc = subprocess.Popen(
        ["docker", "compose", "-p", PROJECT, "--env-file", "local.env", "run", "--rm", "--no-deps",
         "-e", "BENCH_TARGETS=nginx-static flask", "-e", "BENCH_CONCURRENCY=4 8", "-e", "BENCH_SWEEP=off",
         "-e", "BENCH_WRITE=off",
         "-e", "BENCH_TOOLS=ab", "-e", "BENCH_OPEN_LOOP=0", "bench"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # until the first round is in results.json
            written = [d / "results.json" for d in set(results.iterdir()) - before if (d / "results.json").exists()]
            if written and json.loads(written[0].read_text() or "{}").get("runs"):
                break
            time.sleep(0.5)
        compose("stop", "-t", "1", "flask", env=env, timeout=60)
        out, _ = proc.communicate(timeout=600)
    finally:
        proc.kill()
        compose("start", "flask", env=env, timeout=120)
    assert proc.returncode == 1, out[-3000:]
    data = latest(results)
    flask = [r for r in data["runs"] if r["target"] == "flask"]
    assert len(flask) == 2 * len(SIZES.split()) and all(r["status"] == "failed" and r["error"] for r in flask), flask
    assert all(r["repetitions"] and r["repetitions"][0]["round"] == 1 for r in flask), flask
    assert all(r["status"] == "ok" for r in data["runs"] if r["target"] == "nginx-static")
    report = (results / data["run_id"] / "report.md").read_text()
    assert "| flask | GridFS | 1KB | failed | failed |" in report
    assert "flask stopped answering during the run" in report


def test_the_working_set_is_timed_on_every_path(lab):
    """The seed's set of many files, requested at random by wrk from every
    path: each served a sample byte for byte, then answered every request."""
    _, data, results, _ = lab
    ws = data["working_set"]
    assert (ws["spec"], ws["count"], ws["concurrency"]) == (FILE_SET, 200, max(CONCURRENCY))
    assert 200 * 1024 <= ws["total_bytes"] <= 200 * 6 * 1024
    assert ws["memory_limits"]["nginx-static"] == 512 * 2**20  # TARGET_MEM, as Docker reports it
    assert [r["target"] for r in ws["runs"]] == env_value("BENCH_TARGETS").split()
    for run in ws["runs"]:
        assert run["status"] == "ok" and run["failed"] == 0 and run["rps"] > 0, run
        assert len(run["repetitions"]) == 2 and run["cpu"][run["target"]]["cpu_seconds"] > 0, run
        if run["target"] in GRIDFS_TARGETS:
            assert run["cpu"]["mongo"]["cpu_seconds"] > 0, run
    assert next(r for r in ws["runs"] if r["target"] == "nginx-cache")["cache"]["requests"] > 0
    report = (results / data["run_id"] / "report.md").read_text()
    assert "## Working set: many files in random order" in report and f"`{FILE_SET}`" in report


def test_every_store_is_written_verified_and_read_back(lab):
    """Seed 002's benchmark, tiny: GridFS (FerretDB), PostgreSQL and the
    writes volume, 1 and 3 threads, every file verified, then removed."""
    _, data, results, _ = lab
    stores = {"gridfs", "postgres", "filesystem"}
    assert {(w["store"], w["threads"]) for w in data["writes"]} == {(s, t) for s in stores for t in (1, 3)}
    assert {(r["store"], r["threads"], r["order"]) for r in data["reads"]} == {
        (s, t, o) for s in stores for t, o in ((1, "in order"), (3, "random"))} | {("filesystem", 1, "in order, cold")}
    for row in data["writes"] + data["reads"]:
        assert row["status"] == "ok" and row["files"] == 5 and row["file_bytes"] == 300 * 1024, row
        assert len(row["passes"]) == 2 and row["mb_per_s"] > 0 and row["cpu_s_per_gb"]["bench"] > 0, row
        if row["store"] != "filesystem":
            service = "mongo" if row["store"] == "gridfs" else "postgres"
            assert row["cpu_s_per_gb"][service] > 0, row
    for row in data["writes"]:
        assert row["verified"] is True and row["disk"]["bytes"] >= row["files"] * row["file_bytes"] * 0.9, row
    durability = data["store_setup"]["durability"]
    assert durability["postgres"]["fsync"] == "on" and durability["postgres"]["synchronous_commit"] == "on"
    order = [o for o in data["order"] if " write threads=1 " in o]
    first = data["schedule"]["orders"]["stores write threads=1"][0]
    assert order[:3] == [f"{s} write threads=1 r=1" for s in first]
    assert sorted(first) == ["filesystem", "gridfs", "postgres"]
    report = (results / data["run_id"] / "report.md").read_text()
    assert "## Stores: writes and reads (seed 002)" in report and "gridfs (FerretDB)" in report
    # removed after the phase: the writes volume is empty again
    left = compose("run", "--rm", "--no-deps", "--entrypoint", "ls", "bench", "-A", "/data/writes", env=lab[3],
                   timeout=120)
    assert left.returncode == 0 and left.stdout.strip() == "", left.stdout + left.stderr


# --- A/B in one run: the calibration and the pull-request gate, on the same stack ---
AB_TINY = {"LAB_ENV_FILE": "local.env", "LAB_PROJECT": PROJECT, "AB_FILES": "1KB", "AB_CONCURRENCY": "8",
           "AB_BLOCKS": "8", "AB_THRESHOLD": "5", "AB_WINDOW": "1", "AB_WARMUP": "1",
           "BENCH_MIN_REQUESTS": "0"}


def ci_lab(env: dict, *args: str, timeout: float = 1500) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO / "tools" / "ci" / "ci-lab.sh"), *args], cwd=REPO, env={**env, **AB_TINY},
                          capture_output=True, text=True, timeout=timeout)


def change_runs(results: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(results.glob("*/ab.json"))]


@pytest.fixture(scope="module")
def change_gate(lab):
    """An A/A of flask (the calibration), then the gate on flask twice: the
    checkout against itself (a pull request that changes nothing), and with
    B throttled to a fifth of a core (one that makes flask slower), that
    one after an A/A of its own on this machine (B unchanged there)."""
    _, _, results, env = lab
    calibrated = ci_lab({**env, "AB_CALIBRATION_RUNS": "1"}, "ab-calibrate", "flask")  # one A/A: its page is checked
    # the restarts are the calibration's to check: the gate's runs keep the twins up (a minute of suite time)
    unchanged = ci_lab({**env, "AB_RESTART_TWINS": "off", "AB_GATE_CALIBRATION_RUNS": "0"}, "ab-gate", "HEAD", "flask")
    throttled = ci_lab({**env, "B_CPUS": "0.2", "AB_RESTART_TWINS": "off", "AB_GATE_CALIBRATION_RUNS": "1"},
                       "ab-gate", "HEAD", "flask")
    return calibrated, unchanged, throttled, change_runs(results), results


def test_an_aa_run_counts_its_own_false_alarms(change_gate):
    calibrated, _, _, runs, results = change_gate
    # make ab-calibrate's loop with one run: measured, but too few to judge (exit 2, and it says why)
    assert calibrated.returncode == 2, calibrated.stdout[-3000:] + calibrated.stderr[-2000:]
    calibration_dir = Path(re.findall(r"^run-dir: (.+)$", calibrated.stdout, re.M)[-1])
    summary = json.loads((calibration_dir / "calibration.json").read_text())
    assert len(summary["statistics"]["measured"]) == 1 and "at least 3 are needed" in calibrated.stdout
    aa = runs[0]
    assert (aa["kind"], aa["a"], aa["b"]) == ("A/A", "flask", "flask-b")
    assert len(aa["cases"]) == 1
    blocks = aa["cases"][0]["blocks"]
    # AB_BLOCKS blocks, and one more for each disturbed among them, up to four; only clean ones count
    planned = int(AB_TINY["AB_BLOCKS"])
    first = [b for b in blocks if b["block"] <= planned]
    spoiled = sum(not b["counted"] for b in first)
    assert [b["block"] for b in blocks] == list(range(1, planned + 1 + min(spoiled, 4)))
    assert all(b["counted"] == ("disturbed" not in b["flags"]) for b in blocks)
    counted = sum(b["counted"] for b in blocks)
    # the default design, the duet: the database's CPU serves both twins at once, so no total is judged
    assert aa["design"] == "duet" and {r["metric"] for r in aa["rows"]} == {"rps", "cpu_path"}
    assert all(r["n"] == counted for r in aa["rows"] if r["metric"] == "rps")
    assert counted < 6 or all(r["low"] is not None for r in aa["rows"] if r["metric"] == "rps")
    # A's and B's windows of a block ran at the same moments, from one wrk each, both after one warm-up
    data = json.loads((results / aa["run_id"] / "results.json").read_text())
    windows = {(r["variant"], rep["block"]): rep for r in data["runs"] if r["variant"] for rep in r["repetitions"]}
    for block in blocks:
        assert block["a"]["rps"] > 0 and block["b"]["rps"] > 0
        a, b = windows["A", block["block"]], windows["B", block["block"]]
        assert abs(a["started_ns"] - b["started_ns"]) < 0.2e9 and abs(a["ended_ns"] - b["ended_ns"]) < 1e9, block
        assert block["a"]["cpu_path"] and block["b"]["cpu_path"], block
    # make ab restarted both twins before every block (bench asked, tools/lab/change.py ran docker restart):
    # each block's pair of containers started anew, and the exchange left nothing in the run's folder
    restarts = aa["cases"][0]["restarts"]
    assert aa["restart_twins"] and [r["block"] for r in restarts] == [b["block"] for b in blocks]
    for name in ("flask", "flask-b"):
        started = [r["started_at"][name] for r in restarts]
        assert len(set(started)) == len(started), (name, started)
    assert not (results / aa["run_id"] / ".twins").exists()
    orders = data["schedule"]["orders"]["A/B 1KB.bin c=8"]
    assert len(orders) == planned and all(o[::-1] == orders[i + 1] for i, o in enumerate(orders[:-1]))
    assert {r["variant"] for r in data["runs"]} == {"A", "B"}
    page = (results / aa["run_id"] / "ab.md").read_text()
    assert "every \"better\" or \"worse\" verdict below is a false alarm" in page
    # its page, in a real browser: drawn, no error, usable at 390 px
    from support.browser_check import check_page
    assert check_page(results / aa["run_id"] / "index.html", results_json=False) == []
    assert "Paired changes per block" in (results / aa["run_id"] / "index.html").read_text()


def test_the_gate_passes_a_change_that_changes_nothing(change_gate):
    _, unchanged, _, runs, _ = change_gate
    # shown within the threshold (0) or not shown safe (3, a neutral check in the workflow); never failed
    if unchanged.returncode == 2 and "blocks counted of" in unchanged.stdout:
        pytest.skip("work outside the lab disturbed more blocks than a run repeats: not measured, as said")
    assert unchanged.returncode in (0, 3), unchanged.stdout[-3000:] + unchanged.stderr[-2000:]
    assert ("**Gate: the gate passes** (exit 0)." if unchanged.returncode == 0
            else "**Gate: inconclusive (not shown within the threshold)** (exit 3).") in unchanged.stdout
    gated = runs[1]
    assert gated["kind"] == "A/B" and "A built from the lab at HEAD" in gated["change"]
    # the A/B report quotes the A/A just run on this machine
    assert gated["calibration"]["run_id"] == runs[0]["run_id"]


def test_the_gate_fails_a_b_throttled_to_a_fifth_of_a_core(change_gate):
    _, _, throttled, runs, _ = change_gate
    if throttled.returncode == 2 and "blocks counted of" in throttled.stdout:
        pytest.skip("work outside the lab disturbed more blocks than a run repeats: not measured, as said")
    assert throttled.returncode == 1, throttled.stdout[-3000:] + throttled.stderr[-2000:]
    rps = next(r for r in runs[3]["rows"] if r["metric"] == "rps")
    assert rps["gate_fails"] and rps["high"] < 0.95 and rps["verdict"] == "worse", rps
    assert "B slower by" in throttled.stdout and "**Gate: the gate fails** (exit 1)." in throttled.stdout
    # its A/A on this machine first, without the change to B, quoted in the summary and on the A/B's page
    assert (runs[2]["kind"], runs[2]["change"]) == ("A/A", ""), runs[2]["change"]
    assert "- **1 A/A run on this runner** before this A/B" in throttled.stdout
    assert runs[3]["calibration_set"]["calibration"].startswith("calibration-flask-"), runs[3]["calibration_set"]
