"""Bench settings from the environment (compose passes .env through), with an
error naming the variable when one is wrong."""
import os
from dataclasses import dataclass

# Knobs recorded in results.json as `parameters`: every one that shapes a run.
RECORDED = [
    "MONGO_IMAGE", "NGINX_BASE_IMAGE", "PYTHON_IMAGE", "NODE_IMAGE", "CADVISOR_IMAGE",
    "FILE_SIZES", "GRIDFS_DB", "BENCH_TARGETS", "BENCH_CONCURRENCY", "BENCH_REQUESTS",
    "BENCH_WARMUP_REQUESTS", "BENCH_REPETITIONS", "BENCH_TOOLS", "BENCH_SWEEP", "BENCH_SWEEP_REQUESTS",
    "BENCH_ALLOW_NONCONFORMING", "LOADGEN_CPU_QUOTA", "NGINX_WORKERS", "GUNICORN_WORKERS",
    "MONGO_CPUS", "TARGET_CPUS", "LOADGEN_CPUS", "SEED_CPUS", "CADVISOR_CPUS",
    "MONGO_MEM", "TARGET_MEM", "LOADGEN_MEM", "SEED_MEM", "CADVISOR_MEM",
]


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class Settings:
    targets: list[str]
    concurrency: list[int]
    requests: int
    warmup_requests: int
    startup_timeout: float
    mongo_uri: str
    files_dir: str
    results_dir: str
    target_port: int
    cadvisor_url: str  # empty: CPU and memory are not measured
    repetitions: int = 3          # counted runs of each case, after a primer and a warm-up
    tools: tuple[str, ...] = ("ab",)  # "wrk" adds ab -k against wrk on every case
    sweep: tuple[int, ...] = ()   # concurrency levels of the sweep; empty: no sweep
    sweep_requests: int = 200     # per level (at least one per connection)
    reference: str = "nginx-static"  # every target's HTTP answers are judged against it
    allow_nonconforming: bool = False  # time a target that fails conformance, marked

    def url_of(self, target: str) -> str:
        return f"http://{target}:{self.target_port}"


def _ints(env, name: str, default: str) -> list[int]:
    text = env.get(name, default)
    try:
        values = [int(word) for word in text.replace(",", " ").split()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise SettingsError(f"{name}={text!r}: expected positive whole numbers, e.g. {default!r}")
    return values


TOOLS = ("ab", "wrk")


def _tools(env) -> tuple[str, ...]:
    text = env.get("BENCH_TOOLS", "ab")
    tools = text.split() or ["ab"]
    if "ab" not in tools or not set(tools) <= set(TOOLS):
        raise SettingsError(f"BENCH_TOOLS={text!r}: expected 'ab' (seed 000's tool, always run) or 'ab wrk' "
                            "(adds ab -k against wrk on every case)")
    return tuple(t for t in TOOLS if t in tools)


def _sweep(env) -> tuple[int, ...]:
    text = env.get("BENCH_SWEEP", "1 5 25 100 250")
    if text.strip().lower() in ("", "0", "off", "no"):
        return ()
    return tuple(sorted(set(_ints(env, "BENCH_SWEEP", "1 5 25 100 250"))))


def from_env(env=os.environ) -> Settings:
    targets = env.get("BENCH_TARGETS", "").split()
    if not targets:
        raise SettingsError("BENCH_TARGETS is empty: name the serving paths to time, e.g. 'nginx-static flask node'")
    concurrency = _ints(env, "BENCH_CONCURRENCY", "5 100")
    (requests,) = _ints(env, "BENCH_REQUESTS", "500")[:1]
    if requests < max(concurrency):
        raise SettingsError(f"BENCH_REQUESTS={requests} is below the highest BENCH_CONCURRENCY "
                            f"({max(concurrency)}); ab needs at least one request per connection")
    (warmup,) = _ints(env, "BENCH_WARMUP_REQUESTS", "100")[:1]
    (timeout,) = _ints(env, "BENCH_STARTUP_TIMEOUT", "180")[:1]
    (repetitions,) = _ints(env, "BENCH_REPETITIONS", "3")[:1]
    (sweep_requests,) = _ints(env, "BENCH_SWEEP_REQUESTS", "200")[:1]
    return Settings(
        targets=targets, concurrency=concurrency, requests=requests,
        warmup_requests=max(warmup, max(concurrency)), startup_timeout=float(timeout),
        mongo_uri=env.get("MONGO_URI", "mongodb://mongo:27017"),
        files_dir=env.get("FILES_DIR", "/data/files"),
        results_dir=env.get("RESULTS_DIR", "/results"),
        target_port=int(env.get("TARGET_PORT", "8080")),
        cadvisor_url=env.get("CADVISOR_URL", "http://cadvisor:8080"),
        repetitions=repetitions, tools=_tools(env), sweep=_sweep(env), sweep_requests=sweep_requests,
        allow_nonconforming=env.get("BENCH_ALLOW_NONCONFORMING", "0").lower() in ("1", "true", "yes"),
    )


def recorded_parameters(env=os.environ) -> dict:
    return {name: env.get(name) for name in RECORDED}
