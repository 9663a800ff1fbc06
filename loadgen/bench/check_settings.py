"""Every variable of .env checked before anything starts: compose's `settings`
service runs `python -m bench check-settings` and mongo, postgres and
cadvisor wait for it, so a bad value stops `docker compose up` there with
one line per bad variable, naming it, its value and what it accepts, instead
of minutes later in bench (or never, in a service that silently defaults).

check() is pure: the environment and the machine's core count in, error
lines out. Which variables there are, in which order, and the rule each
gets are settings.REGISTRY's; bench's own knobs go through settings.from_env
(one rule, one place); the rest are checked here against what their
consumers accept: FILE_SIZES and FILE_SET by the parsers the seed reads
them with (labfiles/sizes.py)."""
import math
import os
import re
import sys
from functools import partial

from labfiles.sizes import Spec, SpecError, parse_set, parse_sizes

from .settings import (REGISTRY, REQUEST_DEADLINE_MAX_MS,  # noqa: F401  (tools/lab/overload.py imports it from here)
                       RETIRED, SettingsError, change_from_env, from_env)
from .benchmark.writes import BENCH_OWN_BYTES, memory_shortfall

MIB = 2 ** 20


# --- the variables, in .env's order: settings.REGISTRY's, by the rule each gets
def _checked(kind: str) -> tuple[str, ...]:
    return tuple(setting.name for setting in REGISTRY if setting.check[:1] == (kind,))


# Shared bases: compose builds or runs them as given, so each needs a value.
BASE_IMAGES = _checked("image")
# One service's base alone: empty means the shared base above.
SERVICE_IMAGES = _checked("image-or-empty")
# Read by settings.from_env, which owns their rules.
BENCH_KNOBS = _checked("bench")
# An A/B run's (make ab sets them): judged together, as AB_A needs AB_B.
AB_KNOBS = _checked("ab")
# What decides how much memory bench's writer threads take.
WRITE_KNOBS = ("BENCH_PROFILE", "BENCH_WRITE", "WRITE_THREADS", "WRITE_SIZE")
CPUSETS = _checked("cpuset")
MEMORY_LIMITS = _checked("memory")
VARIABLES = tuple(setting.name for setting in REGISTRY if setting.in_env_file)

# --- memory each service needs at the least ----------------------------------
# Floors below which a service cannot do the lab's work at all, not advice:
# .env's values sit well above them.
MEMORY_FLOORS = {
    # mongod's WiredTiger cache is never smaller than 256 MiB, whatever the
    # limit (max(256 MiB, half of the limit less 1 GiB)); mongod itself, its
    # connections and the GridFS chunks in flight need as much again.
    "MONGO_MEM": (512 * MIB, "mongod's WiredTiger cache alone takes 256 MiB"),
    # PostgreSQL's default shared_buffers (128 MiB) is charged to the
    # container once touched; then a backend per seed, flask-postgres pool
    # and bench writer connection.
    "POSTGRES_MEM": (256 * MIB, "PostgreSQL's shared_buffers alone take 128 MiB, then a backend per connection"),
    # flask and node, the largest serving paths, peaked at 179 and 154 MiB
    # under the lab's load (run 20261123T180012Z, 2 cores); nginx-cache's tmpfs is added
    # below (memory_errors).
    "TARGET_MEM": (256 * MIB, "flask and node peaked at 179 and 154 MiB under the lab's load"),
    # bench without the store benchmark: its own share in writes.py's formula.
    "LOADGEN_MEM": (BENCH_OWN_BYTES, "bench's own (loadgen/bench/benchmark/writes.py)"),
    # Python with pymongo and psycopg, and the file set's 16 MiB batches
    # (loadgen/seed/file_set.py's BATCH_BYTES) encoded for sending; the FILE_SIZES files are
    # added below (memory_errors).
    "SEED_MEM": (128 * MIB, "the seed's Python, drivers and 16 MiB write batches"),
    # cAdvisor's Go runtime plus ten minutes (its --storage_duration) of 1 s
    # stats for each of the lab's dozen containers; half of .env's 256m.
    "CADVISOR_MEM": (128 * MIB, "cAdvisor holds 10 minutes of 1 s stats for every container"),
}
CACHE_TMPFS_HEADROOM = 64 * MIB  # nginx itself beside a full cache tmpfs (it measured about 11 MiB)
SEED_FILE_COPIES = 2  # the seed holds a FILE_SIZES file whole while it reads each copy back whole (seed/loader.py)

# --- formats -----------------------------------------------------------------
WHOLE_NUMBER = re.compile(r"[1-9][0-9]*")  # no sign, no leading zero: httpd-static's start.sh refuses both
DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Docker's memory sizes (go-units RAMInBytes, what compose reads mem_limit
# with): binary units, an optional b or ib, e.g. 512m, 1g, 1.5GiB.
DOCKER_MEMORY = re.compile(r"([0-9]+(?:\.[0-9]+)?)([kmgtp]?)(?:i?b)?", re.IGNORECASE)
BINARY_UNITS = {"": 1, "k": 2 ** 10, "m": 2 ** 20, "g": 2 ** 30, "t": 2 ** 40, "p": 2 ** 50}
# The cache tmpfs size as services/nginx-cache/start.sh reads it (and the
# kernel's tmpfs size=): a whole number with k, m or g, else bytes; from 2m.
CACHE_TMPFS = re.compile(r"([1-9][0-9]*)([kmg]?)", re.IGNORECASE)  # no leading 0: sh would read octal
CACHE_SIZE_MIN_KIB = 2048
CPUSET = re.compile(r"[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*")  # Docker's --cpuset-cpus list
# The smallest CFS quota Docker sets is 1 ms per 100 ms period.
CPU_QUOTA_MIN = 0.01
# services/nginx-cache/start.sh's host check: these characters, not leading - or .
UPSTREAM_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
# What both MongoDB (no /\. "$*<>:|?, under 64 bytes) and FerretDB 1.x (the
# local stand-in: letters, digits, _ and -, at most 63, not _ferretdb_...) accept.
DATABASE_NAME = re.compile(r"[A-Za-z0-9_-]{1,63}")
FERRETDB_RESERVED_PREFIX = "_ferretdb_"
# What services/gridfs-fuse/config.go accepts for FUSE_KERNEL_CACHE.
FUSE_SWITCH = {"on", "1", "true", "yes", "off", "0", "false", "no"}
FUSE_TIMEOUT_MAX = 86400  # seconds, gridfs-fuse's bound


def _one_word(name: str, text: str, accepts: str) -> str:
    """The value, stripped; a SettingsError when it is not exactly one word."""
    value = text.strip()
    if len(value.split()) != 1:
        raise SettingsError(f"{name}={text!r}: expected {accepts}")
    return value


# --- one parser per kind of variable: the value, or a SettingsError ----------
def image(name: str, text: str, optional: bool) -> None:
    if optional and not text.strip():
        return
    accepts = "one image reference such as name:tag"
    _one_word(name, text, f"empty (the shared base) or {accepts}" if optional else accepts)


def file_sizes(name: str, text: str) -> list[tuple[str, int]]:
    """As the seed reads it: '1KB 100KB 1MB' -> [('1KB', 1024), ...]."""
    try:
        return parse_sizes(text, name)
    except SpecError as e:
        raise SettingsError(str(e)) from None


def file_set(name: str, text: str) -> Spec | None:
    """As the seed reads it: '10000x1KB-30KB' -> Spec; '', 'off' -> None."""
    try:
        return parse_set(text, name)
    except SpecError as e:
        raise SettingsError(str(e)) from None


def database_name(name: str, text: str) -> str:
    value = text.strip()
    if not DATABASE_NAME.fullmatch(value) or value.startswith(FERRETDB_RESERVED_PREFIX):
        raise SettingsError(f"{name}={text!r}: expected one database name of 1 to 63 letters, digits, _ or - "
                            "(what MongoDB and FerretDB both accept), e.g. 'lab'")
    return value


def results_dir(name: str, text: str) -> str:
    # compose.yaml mounts `${RESULTS_DIR}:/results`: Compose reads a source
    # not starting with . / or ~ as a volume name, and ':' as a separator;
    # the tools (matrix.py, resilience.py) open it as a path, without ~.
    accepts = "one directory path starting with ./ or / such as ./results, without ':'"
    value = _one_word(name, text, accepts)
    if not value.startswith((".", "/")) or ":" in value:
        raise SettingsError(f"{name}={text!r}: expected {accepts} (Compose reads a bare name as a volume)")
    return value


def results_owner(name: str, text: str) -> str:
    # compose.yaml runs bench as `user: ${RESULTS_OWNER}`; root would undo
    # the least privilege every other container of the lab keeps.
    accepts = "uid:gid, two numbers other than 0 such as 1000:1000 (your own: id -u, id -g)"
    value = _one_word(name, text, accepts)
    ids = value.split(":")
    if len(ids) != 2 or not all(WHOLE_NUMBER.fullmatch(i) for i in ids):
        raise SettingsError(f"{name}={text!r}: expected {accepts}")
    return value


def whole_number(name: str, text: str, maximum: int | None) -> int:
    value = text.strip()
    if not WHOLE_NUMBER.fullmatch(value) or (maximum is not None and int(value) > maximum):
        bounds = "from 1" + (f" to {maximum}" if maximum is not None else "")
        raise SettingsError(f"{name}={text!r}: expected one whole number {bounds}")
    return int(value)


def open_streams(name: str, text: str) -> int | None:
    if not text.strip():
        return None
    value = text.strip()
    if not WHOLE_NUMBER.fullmatch(value):
        raise SettingsError(f"{name}={text!r}: expected empty (the service's default) or one whole number from 1")
    return int(value)


def upstream(name: str, text: str) -> str:
    """services/nginx-cache/start.sh's host:port."""
    value = text.strip()
    host, colon, port = value.rpartition(":")
    if not (colon and UPSTREAM_HOST.fullmatch(host) and port.isdigit() and 1 <= int(port) <= 65535):
        raise SettingsError(f"{name}={text!r}: expected one host:port such as nginx-gridfs:8080 "
                            "(the path nginx-cache fronts: nginx-gridfs, flask or node)")
    return value


def cache_size(name: str, text: str) -> int:
    """Bytes of nginx-cache's tmpfs, as services/nginx-cache/start.sh reads it."""
    m = CACHE_TMPFS.fullmatch(text.strip())
    kib = None
    if m:
        number, unit = int(m.group(1)), m.group(2).lower()
        kib = number * {"k": 1, "m": 1024, "g": 1024 ** 2}[unit] if unit else number // 1024
    if kib is None or kib < CACHE_SIZE_MIN_KIB:
        raise SettingsError(f"{name}={text!r}: expected one size such as 256m (a whole number with k, m or g), "
                            "from 2m")
    return kib * 1024


def fuse_switch(name: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in FUSE_SWITCH:
        raise SettingsError(f"{name}={text!r}: expected 'on' or 'off'")
    return value in ("on", "1", "true", "yes")


def seconds(name: str, text: str, minimum: float = 0) -> float:
    value = text.strip()
    if not DECIMAL.fullmatch(value) or not minimum <= float(value) <= FUSE_TIMEOUT_MAX:
        raise SettingsError(f"{name}={text!r}: expected one number of seconds from {minimum:g} to {FUSE_TIMEOUT_MAX}")
    return float(value)


def cpuset(name: str, text: str, host_cores: int) -> set[int]:
    """The cpus of a Docker cpuset list such as 0, 1-3 or 0,2."""
    value = text.strip()
    cpus = set()
    if CPUSET.fullmatch(value):
        for item in value.split(","):
            first, _, last = item.partition("-")
            low, high = int(first), int(last or first)
            if low > high:
                cpus = set()
                break
            cpus.update(range(low, high + 1))
    if not cpus or max(cpus) >= host_cores:
        last = host_cores - 1
        examples = "0" if last == 0 else f"0, 0-{last} or 0,{last}"
        hint = "; cpus-2.env pins every service for 2 cores" if 2 <= host_cores < 4 else ""
        raise SettingsError(f"{name}={text!r}: expected one cpuset of this machine's {host_cores} "
                            f"core{'s' if host_cores > 1 else ''} (cpus 0 to {last}), such as {examples}{hint}")
    return cpus


def cpu_quota(name: str, text: str, cores: int, pinned_by: str) -> float:
    value = text.strip()
    quota = float(value) if DECIMAL.fullmatch(value) else -1.0
    if not (quota == 0 or CPU_QUOTA_MIN <= quota <= cores):
        raise SettingsError(f"{name}={text!r}: expected one number of cores: 0 (no quota) or from "
                            f"{CPU_QUOTA_MIN:g} to {cores}, the cores {pinned_by}")
    return quota


def memory(name: str, text: str) -> int:
    """Bytes of a Docker memory size (mem_limit)."""
    m = DOCKER_MEMORY.fullmatch(text.strip())
    if not m:
        raise SettingsError(f"{name}={text!r}: expected one memory size such as 512m or 2g "
                            "(a number with b, k, m or g)")
    return int(float(m.group(1)) * BINARY_UNITS[m.group(2).lower()])


# The rule for each kind of settings.REGISTRY `check` that is judged alone:
# parse(name, text, *bounds). The others: "bench" and "ab" (settings.from_env's
# rules), "cpuset" and "cpu-quota" (this machine's cores and the pins).
VALUE_CHECKS = {"image": partial(image, optional=False), "image-or-empty": partial(image, optional=True),
                "file-sizes": file_sizes, "file-set": file_set, "database": database_name,
                "results-dir": results_dir, "results-owner": results_owner, "whole": whole_number,
                "open-streams": open_streams, "upstream": upstream, "cache-size": cache_size, "switch": fuse_switch,
                "seconds": seconds, "memory": memory}
CHECK_KINDS = {*VALUE_CHECKS, "bench", "ab", "cpuset", "cpu-quota"}


def _in_mib(size: int) -> str:
    return f"{math.ceil(size / MIB)}m"


# --- the checks ----------------------------------------------------------------
def bench_knob_errors(env: dict) -> dict[str, str]:
    """settings.from_env's verdict on each bench knob, one at a time (it
    stops at the first bad one): the knob alone, every other at its
    default, and a target so that only BENCH_TARGETS can be the empty one."""
    errors = {}
    for name in (*BENCH_KNOBS, *(n for n in RETIRED if n in env)):
        alone = {"BENCH_TARGETS": "nginx-static", name: env.get(name, "")}
        try:
            from_env(alone)
        except SettingsError as e:
            errors[name] = str(e)
    return errors


def change_errors(env: dict) -> dict[str, str]:
    """The A/B knobs together, against the run's BENCH_TARGETS (the first
    one that is wrong: from_env stops there)."""
    targets = env.get("BENCH_TARGETS", "").split() or ["nginx-static"]
    try:
        change_from_env(env, targets)
    except SettingsError as e:
        name = re.match(r"[A-Z_]+", str(e)).group(0)
        return {name if name in AB_KNOBS else "AB_A": str(e)}  # every message starts with its variable
    return {}


def memory_errors(env: dict, limits: dict[str, int], errors: dict[str, str],
                  cache_bytes: int | None, largest_file: int | None) -> dict[str, str]:
    """Each memory limit against what its service needs at the least."""
    found = {}
    for name, limit in limits.items():
        text = env.get(name, "")
        needed, why = MEMORY_FLOORS[name]
        if name == "TARGET_MEM" and cache_bytes is not None and cache_bytes + CACHE_TMPFS_HEADROOM > needed:
            needed = cache_bytes + CACHE_TMPFS_HEADROOM
            why = (f"nginx-cache's CACHE_SIZE={env.get('CACHE_SIZE', '').strip()} tmpfs counts toward it, "
                   f"plus {CACHE_TMPFS_HEADROOM // MIB} MiB for nginx")
        if name == "SEED_MEM" and largest_file is not None:
            needed += SEED_FILE_COPIES * largest_file
            why += f", plus {SEED_FILE_COPIES} copies of FILE_SIZES's largest file"
        if name == "LOADGEN_MEM" and not errors.keys() & set(WRITE_KNOBS):
            # The store benchmark's writer threads, as bench itself will judge
            # them before writing (writes.memory_shortfall), said before anything starts.
            write = from_env({"BENCH_TARGETS": "nginx-static", **{k: env.get(k, "") for k in WRITE_KNOBS}})
            if write.write and (shortfall := memory_shortfall(write.write_threads, write.write_size, limit)):
                found[name] = f"{name}={text!r}: {shortfall}"
                continue
        if limit < needed:
            found[name] = f"{name}={text!r}: expected a memory size of at least {_in_mib(needed)}: {why}"
    return found


def check(env: dict, host_cores: int) -> list[str]:
    """One error line per bad variable of .env, in .env's order; empty: all
    good. A variable missing from env is checked as empty, as compose's
    ${VAR} would pass it."""
    errors = bench_knob_errors(env)
    errors.update(change_errors(env))

    def parsed(name, parse, *args):
        try:
            return parse(name, env.get(name, ""), *args)
        except SettingsError as e:
            errors[name] = str(e)
            return None

    values = {setting.name: parsed(setting.name, VALUE_CHECKS[kind], *bounds) for setting in REGISTRY
              for kind, *bounds in [setting.check or ("",)] if kind in VALUE_CHECKS}
    pins = {name: parsed(name, cpuset, host_cores) for name in CPUSETS}
    if loadgen_cpus := pins["LOADGEN_CPUS"]:
        pinned = f"LOADGEN_CPUS={env['LOADGEN_CPUS'].strip()!r} pins"
        parsed("LOADGEN_CPU_QUOTA", cpu_quota, len(loadgen_cpus), pinned)
    else:
        parsed("LOADGEN_CPU_QUOTA", cpu_quota, host_cores, "of this machine")
    limits = {name: values[name] for name in MEMORY_LIMITS if values[name] is not None}
    sizes = values["FILE_SIZES"]
    largest_file = max(size for _, size in sizes) if sizes else None
    errors.update(memory_errors(env, limits, errors, values["CACHE_SIZE"], largest_file))
    order = {name: i for i, name in enumerate((*VARIABLES, *RETIRED))}
    return [errors[name] for name in sorted(errors, key=order.__getitem__)]


def main() -> int:
    """`python -m bench check-settings`: exit 2 with every error, else 0."""
    errors = check(dict(os.environ), os.cpu_count() or 1)
    for line in errors:
        print(f"[settings] {line}", file=sys.stderr)
    if errors:
        return 2
    print(f"[settings] ok: {len(VARIABLES)} variables checked", flush=True)
    return 0
