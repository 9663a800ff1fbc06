"""Every variable of .env is checked before anything starts (compose service
`settings`, `python -m bench check-settings`): the lab's own env files pass,
and each kind of bad value gives exactly one line naming the variable."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import check_settings
from bench.check_settings import VARIABLES, check
from bench.env_file import read_env_file

REPO = Path(__file__).resolve().parent.parent


def env_file(*paths: str) -> dict[str, str]:
    """The env files layered as Compose's --env-file does: later files win."""
    return read_env_file(*(REPO / path for path in paths))


DOTENV = env_file(".env")  # pins for 4 cores
TWO_CORES = env_file(".env", "cpus-2.env")


def named(line: str) -> str:
    """The variable an error line names first: NAME=... or NAME is ..."""
    return re.match(r"[A-Z][A-Z0-9_]*", line).group(0)


@pytest.mark.parametrize("files, host_cores", [
    ((".env",), 4),
    ((".env", "cpus-2.env"), 2),
    ((".env", "local-images/images.env"), 4),
    ((".env", "local-images/images.env", "cpus-2.env"), 2),
    pytest.param(("local.env",), 2, marks=pytest.mark.lab),  # written by make local-images
])
def test_the_lab_env_files_pass(files, host_cores):
    assert check(env_file(*files), host_cores) == []


def test_every_variable_of_env_is_checked():
    assert set(DOTENV) == set(VARIABLES)
    # ... and each rejects a bad value (BAD below has one for every variable)
    assert set(DOTENV) <= {name for name, _ in BAD}


def test_the_image_lists_match_env():
    # the shared bases have a value in .env; each service's own base is empty
    assert all(DOTENV[name] for name in check_settings.BASE_IMAGES)
    assert not any(DOTENV[name] for name in check_settings.SERVICE_IMAGES)


BAD = [
    *((name, "") for name in check_settings.BASE_IMAGES),
    ("MONGO_IMAGE", "mongo 7.0"),
    *((name, "python:3.13 slim") for name in check_settings.SERVICE_IMAGES),
    ("FILE_SIZES", "1KB 2XB"), ("FILE_SIZES", "1KB 1kb"), ("FILE_SIZES", ""),
    ("FILE_SET", "10000x30KB-1KB"), ("FILE_SET", "lots"), ("FILE_SET", "0x1KB"),
    ("GRIDFS_DB", "my.db"), ("GRIDFS_DB", ""), ("GRIDFS_DB", "a" * 64), ("GRIDFS_DB", "lab two"),
    ("GRIDFS_DB", "_ferretdb_lab"),
    # bench's own knobs: settings.from_env's rules
    ("BENCH_TARGETS", " "), ("BENCH_CONCURRENCY", "five"), ("BENCH_DURATION", "4 5"), ("BENCH_WARMUP", "-1"),
    ("BENCH_MIN_REQUESTS", "many"), ("BENCH_REPETITIONS", "0"), ("BENCH_TARGET_WIDTH", "0.9"), ("BENCH_BUDGET", "soon"),
    ("BENCH_CPU_DESIGN", "same moment"),
    ("BENCH_PROFILE", "fast"), ("BENCH_TOOLS", "wrk"),
    ("BENCH_LOADGENS", "0"),
    ("BENCH_OPEN_LOOP", "1.5"), ("BENCH_OPEN_LOOP", "0.5 0.96"), ("BENCH_OPEN_LOOP_SECONDS", "0"),
    ("BENCH_OPEN_LOOP_SECONDS", "2.5"), ("BENCH_SWEEP", "1 x"), ("BENCH_SWEEP_DURATION", "0"), ("BENCH_WRITE", "maybe"),
    ("WRITE_FILES", "0"), ("WRITE_SIZE", "10TB"), ("WRITE_THREADS", "300"), ("BENCH_STARTUP_TIMEOUT", "0"),
    ("BENCH_ALLOW_NONCONFORMING", "2"), ("BENCH_REQUESTS", "500"),
    ("RESULTS_DIR", "results"), ("RESULTS_DIR", "./a:b"), ("RESULTS_DIR", ""), ("RESULTS_DIR", "./my results"),
    ("RESULTS_OWNER", "0:0"), ("RESULTS_OWNER", "1000"), ("RESULTS_OWNER", "me:me"), ("RESULTS_OWNER", ""),
    ("RESULTS_OWNER", "1000:0"), ("RESULTS_OWNER", "1000:1000 2"),
    ("NGINX_WORKERS", "1 2"), ("NGINX_WORKERS", "0"), ("NGINX_WORKERS", "auto"), ("GUNICORN_WORKERS", "1.5"),
    ("FUSE_NGINX_WORKERS", "0"), ("FUSE_NGINX_WORKERS", "auto"),
    ("HTTPD_SERVERS", "65"), ("HTTPD_THREADS", "01"), ("HTTPD_THREADS", "2001"),
    ("REQUEST_DEADLINE_MS", "3s"), ("REQUEST_DEADLINE_MS", "0"), ("REQUEST_DEADLINE_MS", "600001"),
    ("FLASK_MAX_OPEN_STREAMS", "0"), ("FLASK_MAX_OPEN_STREAMS", "many"), ("NODE_MAX_OPEN_STREAMS", "0"),
    ("NODE_MAX_OPEN_STREAMS", "200 300"),
    # an A/B run's (make ab sets them), judged together
    ("AB_A", "flask"), ("AB_B", "flask-b"), ("AB_KIND", "B/A"), ("AB_BLOCKS", "5"), ("AB_WINDOW", "0"),
    ("AB_WARMUP", "x"), ("AB_THRESHOLD", "0"),
    ("AB_THRESHOLD", "five"), ("AB_FILES", "1KB big"), ("AB_CONCURRENCY", "0"), ("AB_RESTART_TWINS", "always"),
    ("AB_DESIGN", "both"), ("AB_ADMITTED", "always"),
    ("CACHE_UPSTREAM", "nginx-gridfs"), ("CACHE_UPSTREAM", "nginx-gridfs:0"), ("CACHE_UPSTREAM", "-x:8080"),
    ("CACHE_UPSTREAM", "a:1 b:2"),
    ("CACHE_SIZE", "256mb"), ("CACHE_SIZE", "1m"), ("CACHE_SIZE", "256 m"),
    ("FUSE_KERNEL_CACHE", "maybe"), ("FUSE_KERNEL_CACHE", "on off"), ("FUSE_ATTR_TIMEOUT", "-1"),
    ("FUSE_ENTRY_TIMEOUT", "1 2"), ("FUSE_ENTRY_TIMEOUT", "90000"),
    ("FUSE_MAX_OPEN_FILES", "0"), ("FUSE_MAX_OPEN_FILES", "65536"), ("FUSE_MAX_OPEN_FILES", "128 files"),
    ("MONGO_TIMEOUT", "0.05"), ("MONGO_TIMEOUT", "2s"), ("MONGO_TIMEOUT", ""),
    ("MONGO_CPUS", "1 2"), ("POSTGRES_CPUS", "2-1"), ("TARGET_CPUS", "4"), ("LOADGEN_CPUS", "x"),
    ("SEED_CPUS", ""), ("CADVISOR_CPUS", "0;1"), ("CADVISOR_CPUS", "0-9"),
    ("LOADGEN_CPU_QUOTA", "1.5"), ("LOADGEN_CPU_QUOTA", "0.001"), ("LOADGEN_CPU_QUOTA", "-1"),
    ("LOADGEN_CPU_QUOTA", ""), ("LOADGEN_CPU_QUOTA", "0 1"),
    ("MONGO_MEM", "300m"), ("MONGO_MEM", "2 g"), ("MONGO_MEM", "lots"), ("POSTGRES_MEM", "128m"),
    ("TARGET_MEM", "200m"), ("LOADGEN_MEM", "200m"), ("LOADGEN_MEM", "1q"), ("SEED_MEM", "100m"),
    ("CADVISOR_MEM", "64m"),
]


@pytest.mark.parametrize("name, value", BAD)
def test_a_bad_value_gives_one_line_naming_the_variable(name, value):
    errors = check({**DOTENV, name: value}, 4)
    assert len(errors) == 1, errors
    assert named(errors[0]) == name
    if not errors[0].startswith(f"{name} is "):  # the value, quoted: BENCH_TARGETS is empty, BENCH_REQUESTS is...
        assert errors[0].startswith(f"{name}={value!r}: "), errors[0]


def test_the_examples_of_the_issue():
    assert check({**DOTENV, "BENCH_ALLOW_NONCONFORMING": "2"}, 4) == ["BENCH_ALLOW_NONCONFORMING='2': expected 0 or 1"]
    assert check({**DOTENV, "NGINX_WORKERS": "1 2"}, 4) == ["NGINX_WORKERS='1 2': expected one whole number from 1"]
    [cpus] = check({**TWO_CORES, "TARGET_CPUS": "7"}, 2)
    assert cpus.startswith("TARGET_CPUS='7': expected one cpuset of this machine's 2 cores (cpus 0 to 1)")
    # the full profile's store benchmark (20 threads x 10 MB) needs about 828 MiB in bench
    [memory] = check({**DOTENV, "LOADGEN_MEM": "256m", "BENCH_PROFILE": "full"}, 4)
    assert memory.startswith("LOADGEN_MEM='256m': WRITE_THREADS=20 x WRITE_SIZE=10,000,000 bytes need about 828 MiB")


def test_a_cpuset_fits_the_machine():
    # .env's pins are for 4 cores: on 2, both out of range are named, with the fix
    errors = check(DOTENV, 2)
    assert [named(e) for e in errors] == ["TARGET_CPUS", "LOADGEN_CPUS"]
    assert all("cpus-2.env" in e for e in errors)
    assert check({**DOTENV, "TARGET_CPUS": "0-1,3", "LOADGEN_CPUS": "2,3"}, 4) == []


def test_the_cpu_quota_is_at_most_the_pinned_cores():
    assert check({**DOTENV, "LOADGEN_CPUS": "2-3", "LOADGEN_CPU_QUOTA": "2"}, 4) == []
    assert check({**DOTENV, "LOADGEN_CPUS": "3", "LOADGEN_CPU_QUOTA": "0.1"}, 4) == []
    [error] = check({**DOTENV, "LOADGEN_CPUS": "2-3", "LOADGEN_CPU_QUOTA": "2.5"}, 4)
    assert error == ("LOADGEN_CPU_QUOTA='2.5': expected one number of cores: 0 (no quota) or from 0.01 to 2, "
                     "the cores LOADGEN_CPUS='2-3' pins")


def test_memory_limits_follow_what_the_services_hold():
    # bench's writer threads: more threads need more than .env's 1g ...
    [error] = check({**DOTENV, "WRITE_THREADS": "40", "BENCH_PROFILE": "full"}, 4)
    assert named(error) == "LOADGEN_MEM" and "WRITE_THREADS=40" in error
    # ... and none without the store benchmark (its own 256 MiB still)
    assert check({**DOTENV, "LOADGEN_MEM": "256m", "BENCH_WRITE": "off"}, 4) == []
    assert check({**DOTENV, "LOADGEN_MEM": "256m", "BENCH_PROFILE": "quick"}, 4) == []
    assert named(check({**DOTENV, "LOADGEN_MEM": "200m", "BENCH_WRITE": "off"}, 4)[0]) == "LOADGEN_MEM"
    # a bad write knob is named alone: LOADGEN_MEM is not judged against it
    assert [named(e) for e in check({**DOTENV, "WRITE_SIZE": "huge", "LOADGEN_MEM": "300m"}, 4)] == ["WRITE_SIZE"]
    # nginx-cache's tmpfs counts toward the serving paths' limit
    [error] = check({**DOTENV, "CACHE_SIZE": "512m"}, 4)
    assert error.startswith("TARGET_MEM='512m': expected a memory size of at least 576m") and "CACHE_SIZE" in error
    # the seed holds its largest file whole
    [error] = check({**DOTENV, "FILE_SIZES": "1KB 200MB"}, 4)
    assert error.startswith("SEED_MEM='512m': expected a memory size of at least 528m")
    assert check({**DOTENV, "MONGO_MEM": "1.5GiB", "TARGET_MEM": "1073741824b", "SEED_MEM": "1G"}, 4) == []


def test_a_missing_variable_is_checked_as_empty():
    env = {name: value for name, value in DOTENV.items() if name not in ("NGINX_WORKERS", "FLASK_IMAGE")}
    assert check(env, 4) == ["NGINX_WORKERS='': expected one whole number from 1"]


def test_every_bad_variable_is_named_once_in_env_order():
    env = {**DOTENV, "MONGO_MEM": "1m", "BENCH_DURATION": "0", "BENCH_PROFILE": "slow", "FILE_SET": "x",
           "NGINX_WORKERS": "0"}
    assert [named(e) for e in check(env, 4)] == ["FILE_SET", "BENCH_DURATION", "BENCH_PROFILE", "NGINX_WORKERS",
                                                 "MONGO_MEM"]


# --- the command --------------------------------------------------------------
def run_check(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", "check-settings"], cwd=REPO / "loadgen",
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
                          capture_output=True, text=True, timeout=60)


def test_the_command_says_ok_or_every_error():
    host = TWO_CORES if (os.cpu_count() or 1) < 4 else DOTENV
    ok = run_check(host)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == f"[settings] ok: {len(VARIABLES)} variables checked\n" and ok.stderr == ""
    bad = run_check({**host, "BENCH_ALLOW_NONCONFORMING": "2", "NGINX_WORKERS": "1 2"})
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines() == ["[settings] BENCH_ALLOW_NONCONFORMING='2': expected 0 or 1",
                                       "[settings] NGINX_WORKERS='1 2': expected one whole number from 1"]


def test_compose_checks_every_variable_before_anything_starts():
    """The settings service gets every .env variable, and the services
    nothing else waits on (mongo, postgres, cadvisor) wait for it. Read as
    text: no docker here (tests/test_settings.py reads compose config)."""
    compose = (REPO / "compose.yaml").read_text()
    service = re.search(r"^  settings:\n(.*?)\n\n", compose, re.M | re.S).group(1)
    environment = re.search(r"environment: \[(.*?)\]", service, re.S).group(1)
    assert [name.strip() for name in environment.split(",")] == list(DOTENV)
    assert "command: [check-settings]" in service and "context: loadgen" in service
    for name in ("mongo", "postgres", "cadvisor"):
        block = re.search(rf"^  {name}:\n(.*?)(?=^  \S|\Z)", compose, re.M | re.S).group(1)
        assert "settings: {condition: service_completed_successfully}" in block, name
