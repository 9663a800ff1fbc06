"""Bench settings from the environment (compose passes .env through), with an
error naming the variable when one is wrong; and the registry of every
setting of the lab (REGISTRY), where each is declared once: its default,
bench's reading of it, check_settings' rule, whether results.json records
it and which compose services get it."""
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Count-based knobs of earlier versions: a run is timed in seconds now.
RETIRED = {
    "BENCH_REQUESTS": "BENCH_DURATION (seconds per repetition)",
    "BENCH_WARMUP_REQUESTS": "BENCH_WARMUP (seconds)",
    "BENCH_SWEEP_REQUESTS": "BENCH_SWEEP_DURATION (seconds per level)",
}

# BENCH_PROFILE=quick: a first look in about three minutes, whatever the
# other knobs say (their effective values are what results.json records):
# no write phase and no working set either (the seed loads no set then).
QUICK = {"duration": 1, "warmup": 0, "repetitions": 1, "tools": ("ab",), "sweep": (), "open_loop_max_s": 1,
         "open_loop_curve": (), "min_requests": 0, "write": False, "working_set": False, "target_width": None}
# BENCH_PROFILE=standard, the default: the headline in BENCH_BUDGET (30
# minutes on 2 cores). Rounds at the highest concurrency only, until every
# headline interval is within BENCH_TARGET_WIDTH; ab -k against wrk on one
# file per path; open-loop points of at most STANDARD_OPEN_LOOP_S. The
# lower concurrencies, the sweep, the working set, the store benchmark and
# the full tool check are BENCH_PROFILE=full's (make lab-full).
STANDARD_OPEN_LOOP_S = 6
EVERY_CASE, ONE_FILE_PER_PATH = "every case", "one file per path"
# Each profile and what it is, as a bad BENCH_PROFILE's error says it.
PROFILES = {"standard": "the headline with its intervals in BENCH_BUDGET", "full": "every phase, the knobs as set",
            "quick": "1 s repetitions, one each, ab only, no sweep: a first look in minutes"}
# BENCH_CPU_DESIGN: where the headline's CPU ratio comes from. rounds: each
# round's closed-loop windows, the path's and the baseline's seconds apart;
# same-moment: one window per size and round in which every path takes the
# same fixed rate at once (bench.benchmark.same_moment), so the machine's
# swing over seconds befalls the path and its baseline alike.
CPU_DESIGNS = {"rounds": "CPU per request from each round's closed-loop windows",
               "same-moment": "every path at one fixed rate in the same window"}

# Seed 002's write benchmark: 1000 files of 10,000,000 bytes; the default
# writes a tenth of them, so a run stays short (set WRITE_FILES=1000 to
# re-run the study as published).
SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
SIZE = re.compile(r"(\d+)\s*(B|KB|MB|GB)?", re.IGNORECASE)
WRITE_SIZE_MIN, WRITE_SIZE_MAX = 1024, 1024 ** 3


class SettingsError(ValueError):
    pass


# An A/B run (tools/lab/change.py, make ab): B, a twin of service A, timed against A
# in interleaved blocks. Below 6 blocks no 95% interval exists
# (bench.measure.paired). Its windows are its own (AB_WINDOW, AB_WARMUP),
# not the timed cases': a window's rate here swings by 10-15% from one block
# to the next whether it lasts 2 s or 4 s, so the bench time goes further
# as more, shorter blocks (docs/ab.md). 3 s holds two of cAdvisor's 1 s
# readings with a second to spare (at 2 s, blocks were flagged
# short-window: their CPU per request rough).
# The words of AB_KIND, AB_DESIGN (bench.benchmark.change's DESIGNS) and
# AB_RESTART_TWINS, each with what it means ("": the word says it). off:
# plain compose, where nobody with a Docker socket answers bench.
AB_KINDS = {"A/B": "", "A/A": "B unchanged, to calibrate"}
AB_DESIGNS = {"duet": "A and B loaded at the same moments", "blocks": "one window of A, then one of B"}
RESTART_TWINS = {"every-block": "make ab's default: tools/lab/change.py restarts both twins before each block",
                 "off": ""}
# AB_ADMITTED: on, a case whose sizing shed more than a few percent of a
# twin's answers is timed at the concurrency both admitted
# (bench.benchmark.change.whole_in_flight, next_level); off, at the level as set.
ADMITTED = {"on": "a case past what its paths admit is timed at what they admitted", "off": ""}
AB_BLOCKS_MIN = 6


@dataclass(frozen=True)
class ChangeSettings:
    a: str                 # the service measured as it is
    b: str                 # its twin, with one thing changed (or nothing: A/A)
    kind: str = "A/B"      # "A/A": B is A unchanged, to measure the verdicts' false alarms
    change: str = ""       # what differs in B, in words (tools/lab/change.py writes it)
    blocks: int = 12       # paired blocks per case (each: one window of A, one of B)
    window: int = 3        # seconds per window (longer for a slow case): two of cAdvisor's 1 s readings inside
    warmup: int = 2        # seconds of warm-up before each window, at most
    threshold: float = 0.05  # changes within +-this are "no change"; the gate's margin
    files: tuple[str, ...] = ("1KB", "1MB")  # sizes from FILE_SIZES
    concurrency: tuple[int, ...] = (100,)
    restart_twins: bool = False  # both restarted before each block (tools/lab/change.py does it: bench has no socket)
    design: str = "duet"   # duet: A and B loaded at once in each window; blocks: one after the other
    admitted: bool = True  # a case whose sizing shed is timed at the concurrency both twins admitted


@dataclass(frozen=True)
class Settings:
    targets: list[str]
    concurrency: list[int]
    startup_timeout: float
    mongo_uri: str
    files_dir: str
    results_dir: str
    target_port: int
    cadvisor_url: str  # empty: CPU and memory are not measured
    duration: int = 4             # seconds of each counted repetition
    warmup: int = 6               # at most this long warming a target before a case (bench.benchmark.schedule)
    # A case whose warm-up rate would give fewer requests than this in
    # `duration` runs longer, up to SLOW_CASE_STRETCH x duration.
    min_requests: int = 200
    # Rounds of each case: every path once, in a fresh order each round
    # (bench.measure.rounds). At least `repetitions`; while a headline
    # interval is wider than x/÷target_width (None: exactly `repetitions`),
    # more, until the run's budget (budget_s of bench, None: none) ends.
    repetitions: int = 6
    target_width: float | None = 1.10
    budget_s: float | None = 1800.0
    cpu_design: str = "rounds"    # CPU_DESIGNS: the headline's CPU ratio from the rounds' windows or same-moment ones
    tool_check: str = "every case"  # ab -k against wrk: EVERY_CASE at the top level, or ONE_FILE_PER_PATH
    tools: tuple[str, ...] = ("ab",)  # "wrk" adds ab -k against wrk at the highest concurrency
    loadgens: int = 1             # ab processes sharing each case's concurrency, merged (BENCH_LOADGENS)
    sweep: tuple[int, ...] = ()   # concurrency levels of the sweep; empty: no sweep
    sweep_duration: int = 1       # seconds per level and tool
    open_loop: float = 0.5        # fixed rate as a share of the case's capacity; 0: none
    # BENCH_OPEN_LOOP with several shares: every one of them, a latency curve
    # (open_loop is then the headline's: 0.5 when listed, else the first)
    open_loop_curve: tuple[float, ...] = ()
    open_loop_max_s: float = 20.0  # an open-loop point's longest run (BENCH_OPEN_LOOP_SECONDS)
    profile: str = "standard"
    postgres_url: str = ""        # flask-postgres's store, watched by cAdvisor like mongo; empty: none
    reference: str = "nginx-static"  # every target's HTTP answers are judged against it
    allow_nonconforming: bool = False  # time a target that fails conformance, marked
    gridfs_db: str = "lab"
    cache_upstream: str = ""      # what nginx-cache fronts (CACHE_UPSTREAM): an A/B run's twin of it fronts the same
    # BENCH_TARGET_URLS, set by tools/lab/hosts.py when the paths run on another
    # engine: each path's URL on the link (default: its compose name, port 8080)
    target_urls: dict = field(default_factory=dict)
    # BENCH_LINK, set by tools/lab/hosts.py likewise: the paths host's one-shot
    # iperf3 server (ADDRESS:PORT), the link measured once before timing
    link: tuple[str, int] | None = None
    link_shaping: str = ""   # LINK_RATE, LINK_DELAY, LINK_LOSS as tools/lab/hosts.py applied them, recorded
    # The store benchmark (seed 002): WRITE_FILES files of WRITE_SIZE bytes
    # written into every store with 1 thread and WRITE_THREADS, then read back.
    write: bool = True
    write_files: int = 100
    write_size: int = 10_000_000
    write_threads: int = 20
    write_dir: str = "/data/writes"  # the filesystem store: a scratch volume of bench's own
    # the host's /sys/fs/cgroup, mounted read-only: an A/B's twins' CPU read
    # at each window's edges (bench.measure.cgroup_cpu); empty: cAdvisor's only
    cgroup_dir: str = "/host/sys/fs/cgroup"
    working_set: bool = True      # time the seed's FILE_SET on every path, when it loaded one
    ab: ChangeSettings | None = None  # set: this run is an A/B of ab.a against ab.b, nothing else is timed

    def url_of(self, target: str) -> str:
        return self.target_urls.get(target) or f"http://{target}:{self.target_port}"


SLOW_CASE_STRETCH = 4  # a slow case's repetitions last at most this many BENCH_DURATIONs
# An open-loop run lasts until it has sent OPEN_LOOP_REQUESTS at its rate
# (p99.9 from 10 answers above it), or OPEN_LOOP_MAX_S, whichever comes first.
OPEN_LOOP_REQUESTS = 10_000
OPEN_LOOP_MAX_S = 20.0


Reader = Callable[[Mapping[str, str], str, str], Any]  # (env, name, default) -> the value, or a SettingsError


def _words(env, name: str, default: str) -> list[str]:
    return env.get(name, default).replace(",", " ").split()


def _ints(env, name: str, default: str) -> list[int]:
    text = env.get(name, default)
    try:
        values = [int(word) for word in _words(env, name, default)]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values):
        raise SettingsError(f"{name}={text!r}: expected positive whole numbers, e.g. {default!r}")
    return values


def _number(kind=float, minimum: float = 0.0, maximum: float | None = None) -> Reader:
    """A reader of exactly one number (of `kind`: float or int), within bounds."""
    expected = (f"one {'whole ' if kind is int else ''}number from {minimum:g}"
                + (f" to {maximum:g}" if maximum is not None else ""))

    def read(env, name: str, default: str):
        try:
            (value,) = [kind(w) for w in _words(env, name, default)]
        except ValueError:  # not a number, or not exactly one
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise SettingsError(f"{name}={env.get(name, default)!r}: expected {expected}, e.g. {default!r}")
        return value
    return read


TOOLS = ("ab", "wrk")


def _tools(env, name: str, default: str) -> tuple[str, ...]:
    text = env.get(name, default)
    tools = text.split() or ["ab"]
    if "ab" not in tools or not set(tools) <= set(TOOLS):
        raise SettingsError(f"{name}={text!r}: expected 'ab' (seed 000's tool, always run) or 'ab wrk' "
                            "(adds ab -k against wrk)")
    return tuple(t for t in TOOLS if t in tools)


def _sweep(env, name: str, default: str) -> tuple[int, ...]:
    text = env.get(name, default)
    if text.strip().lower() in ("", "0", "off", "no"):
        return ()
    return tuple(sorted(set(_ints(env, name, "1 5 25 100 250"))))  # the error's example: a sweep, not "off"


def _target_urls(env, targets: list[str]) -> dict[str, str]:
    """BENCH_TARGET_URLS="name=http://address:port ...": where bench finds a
    path that runs on another host (tools/lab/hosts.py sets it)."""
    urls = {}
    for word in env.get("BENCH_TARGET_URLS", "").split():
        name, _, url = word.partition("=")
        if name not in targets or not re.fullmatch(r"http://[0-9A-Za-z.:\[\]-]+:\d+", url):
            raise SettingsError(f"BENCH_TARGET_URLS: {word!r}: expected NAME=http://ADDRESS:PORT, NAME one of "
                                f"BENCH_TARGETS ({' '.join(targets)})")
        urls[name] = url
    return urls


def _link(env, name: str, default: str) -> tuple[str, int] | None:
    """BENCH_LINK="ADDRESS:PORT": the iperf3 server across the link."""
    text = env.get(name, default).strip()
    if not text:
        return None
    m = re.fullmatch(r"([0-9A-Za-z.-]+):(\d{1,5})", text)
    if m is None or not 0 < int(m.group(2)) < 65536:
        raise SettingsError(f"{name}={text!r}: expected ADDRESS:PORT of the paths host's iperf3 server")
    return m.group(1), int(m.group(2))


def _open_loop(env, name: str, default: str) -> tuple[float, tuple[float, ...]]:
    """BENCH_OPEN_LOOP: one share of capacity (0: no open-loop point), or
    several (a latency curve, e.g. '0.25 0.5 0.75 0.9'): (the headline's
    share, every share of the curve or ())."""
    text = env.get(name, default)
    try:
        shares = sorted({float(w) for w in _words(env, name, default)})
    except ValueError:
        shares = []
    if shares == [0.0]:
        return 0.0, ()
    if not shares or any(not 0 < v <= 0.95 for v in shares):
        raise SettingsError(f"BENCH_OPEN_LOOP={text!r}: expected one share of capacity above 0 up to 0.95 "
                            "(0: none), e.g. '0.5', or several for a latency curve, e.g. '0.25 0.5 0.75 0.9'")
    if len(shares) == 1:
        return shares[0], ()
    return (0.5 if 0.5 in shares else shares[0]), tuple(shares)


def _size(env, name: str, default: str) -> int:
    """One size in bytes: a whole number (bytes) or with a unit (10MB; KB = 1024 bytes)."""
    text = env.get(name, default)
    m = SIZE.fullmatch(text.strip())
    value = int(m.group(1)) * SIZE_UNITS[(m.group(2) or "B").upper()] if m else None
    if value is None or not WRITE_SIZE_MIN <= value <= WRITE_SIZE_MAX:
        raise SettingsError(f"{name}={text!r}: expected one size from 1KB to 1GB, in bytes (10000000, seed 002's) "
                            "or with a unit (10MB; KB = 1024 bytes)")
    return value


def _choice(words: Mapping[str, str], values: Mapping[str, Any] | None = None, *, any_case: bool = False) -> Reader:
    """A reader of one of `words` (each with what it means, "" where the
    word says it): the word, or values[word] (one for each word) where a
    word stands for something else, a bool. Empty: the default. any_case:
    the word in capitals too (BENCH_WRITE took ON and Off)."""
    listed = [f"{word!r}" + (f" ({meaning})" if meaning else "") for word, meaning in words.items()]
    expected = f"{', '.join(listed[:-1])} or {listed[-1]}"

    def read(env, name: str, default: str):
        word = _text_or_default(env, name, default)
        word = word.lower() if any_case else word
        if word not in words:
            raise SettingsError(f"{name}={env.get(name, default)!r}: expected {expected}")
        return word if values is None else values[word]
    return read


def _off_or(parse):
    """A reader of 'off' (None), or the value parse(name, text) makes of it."""
    def read(env, name: str, default: str):
        text = env.get(name, default).strip() or default
        return None if text.lower() == "off" else parse(name, text)
    return read


def _width(name: str, text: str) -> float:
    """A ratio's interval as x/÷ its centre: 1.10 is within 10% either way."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 1.005 <= value <= 3:
        raise SettingsError(f"{name}={text!r}: expected 'off' or a width from 1.005 to 3 (x/÷ the ratio: "
                            "1.10 is within 10% either way)")
    return value


def _seconds(name: str, text: str) -> float:
    """A time: seconds, or minutes with m (30m)."""
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|m)?", text.strip(), re.IGNORECASE)
    if not found or float(found[1]) <= 0:
        raise SettingsError(f"{name}={text!r}: expected 'off' or a time such as 30m or 1800 (seconds)")
    return float(found[1]) * (60 if (found[2] or "s").lower() == "m" else 1)


def _flag(env, name: str, default: str) -> bool:
    text = env.get(name, default).strip().lower()
    if text not in ("0", "1", "true", "false", "yes", "no", ""):
        raise SettingsError(f"{name}={env.get(name)!r}: expected 0 or 1")
    return text in ("1", "true", "yes")


def _threshold(env, name: str, default: str) -> float:
    text = env.get(name, default).strip()
    try:
        value = float(text.removesuffix("%"))
    except ValueError:
        value = -1.0
    if not 0 < value <= 50:
        raise SettingsError(f"{name}={text!r}: expected a percentage above 0 and at most 50, e.g. '5' "
                            "(changes within +-5% are called no change)")
    return value / 100


AB_SIZE = re.compile(r"\d+(B|KB|MB|GB)")  # a FILE_SIZES word, as the seed names files


def _text(env, name: str, default: str) -> str:
    return env.get(name, default)


def _text_or_default(env, name: str, default: str) -> str:
    return env.get(name, default).strip() or default


def _port(env, name: str, default: str) -> int:
    return int(env.get(name, default))


def _targets(env, name: str, default: str) -> list[str]:
    targets = env.get(name, default).split()
    if not targets:
        raise SettingsError(f"{name} is empty: name the serving paths to time, e.g. 'nginx-static flask node'")
    return targets


def _ab_files(env, name: str, default: str) -> tuple[str, ...]:
    files = tuple(_words(env, name, default)) or tuple(default.split())
    if not all(AB_SIZE.fullmatch(size) for size in files):
        raise SettingsError(f"{name}={env.get(name)!r}: expected sizes of FILE_SIZES, e.g. '1KB 1MB'")
    return files


# --- the registry: every setting of the lab, declared once ------------------
# Compose services (compose.yaml) whose environment lists a setting, besides
# the two derived from a setting itself: `settings` gets every .env variable
# (one that check_settings judges) and `bench` every recorded one (it records
# what its environment holds). SERVING_PATH: the x-serving-path map every path
# shares (tests/test_settings_registry.py holds compose.yaml to these).
SETTINGS, BENCH, SEED, SERVING_PATH = "settings", "bench", "seed", "x-serving-path"
# Bounds that tools share (tools/lab/overload.py's deadlines): flask, flask-postgres
# and node's one deadline per request, in ms; past it a 503 (lab_http/app.py, node/settings.js).
REQUEST_DEADLINE_MAX_MS = 600_000
# gridfs-fuse's files open at once: nginx's largest limit_conn (openfiles.go).
FUSE_MAX_OPEN_FILES_MAX = 65535
# gridfs-fuse's deadline per MongoDB call, in seconds: config.go's floor.
MONGO_TIMEOUT_MIN = 0.1


@dataclass(frozen=True)
class Setting:
    name: str
    default: str = ""            # what bench takes when the variable is unset
    read: Reader | None = None   # bench's reading of it (None: bench does not read it alone)
    field: str | None = None     # the Settings field from_env fills with read's value
    # How check_settings judges it before anything starts: (kind, *bounds) of
    # its parsers ("bench", "ab": settings.from_env's own rules); () for a
    # variable not in .env (set by compose or a tool), so not checked.
    check: tuple = ()
    recorded: bool = True        # in results.json's `parameters`
    services: frozenset[str] = frozenset()  # compose services listing it, besides the derived ones above

    @property
    def in_env_file(self) -> bool:
        return bool(self.check)

    @property
    def compose_services(self) -> set[str]:
        derived = {SETTINGS} if self.in_env_file else set()
        return derived | ({BENCH} if self.recorded else set()) | self.services


def _images(names: str, check: str) -> list[Setting]:
    return [Setting(name, check=(check,)) for name in names.split()]


# Each service's own image variable, and the shared base it builds FROM when
# that is empty (compose.yaml: ${FLASK_IMAGE:-${PYTHON_IMAGE}}).
SERVICE_IMAGE_BASES = {
    **dict.fromkeys(("SEED_IMAGE", "BENCH_IMAGE", "FLASK_IMAGE", "FLASK_POSTGRES_IMAGE"), "PYTHON_IMAGE"),
    **dict.fromkeys(("NGINX_STATIC_IMAGE", "NGINX_GRIDFS_IMAGE", "NGINX_CACHE_IMAGE", "GRIDFS_FUSE_IMAGE"),
                    "NGINX_BASE_IMAGE")}


# bench gets every recorded setting anyway; ONLY_BENCH: one it gets without recording it
PATHS, FOR_SEED, ONLY_BENCH = frozenset({SERVING_PATH}), frozenset({SEED}), frozenset({BENCH})
# .env's order: check_settings names bad variables in it and results.json records them in it.
REGISTRY: tuple[Setting, ...] = (
    *_images("MONGO_IMAGE POSTGRES_IMAGE NGINX_BASE_IMAGE PYTHON_IMAGE NODE_IMAGE HTTPD_IMAGE GO_IMAGE "
             "CADVISOR_IMAGE", "image"),
    *(Setting(name, check=("image-or-empty",)) for name in SERVICE_IMAGE_BASES),
    Setting("FILE_SIZES", check=("file-sizes",), services=FOR_SEED),
    Setting("FILE_SET", check=("file-set",), services=FOR_SEED),
    Setting("GRIDFS_DB", "lab", _text_or_default, "gridfs_db", ("database",), services=FOR_SEED | PATHS),
    Setting("BENCH_TARGETS", "", _targets, "targets", ("bench",)),
    Setting("BENCH_CONCURRENCY", "5 100", _ints, "concurrency", ("bench",)),
    # whole seconds: ab's -t (and wrk's -d) take no fraction
    Setting("BENCH_DURATION", "4", _number(int, 1, 3600), "duration", ("bench",)),
    Setting("BENCH_WARMUP", "3", _number(int, 0, 600), "warmup", ("bench",)),
    Setting("BENCH_MIN_REQUESTS", "200", _number(int, 0), "min_requests", ("bench",)),
    Setting("BENCH_REPETITIONS", "6", _number(int, 1, 100), "repetitions", ("bench",)),
    Setting("BENCH_TARGET_WIDTH", "1.10", _off_or(_width), "target_width", ("bench",)),
    Setting("BENCH_BUDGET", "30m", _off_or(_seconds), "budget_s", ("bench",)),
    Setting("BENCH_CPU_DESIGN", "same-moment", _choice(CPU_DESIGNS), "cpu_design", ("bench",)),
    Setting("BENCH_PROFILE", "standard", _choice(PROFILES), "profile", ("bench",), services=FOR_SEED),
    Setting("BENCH_TOOLS", "ab", _tools, "tools", ("bench",)),
    Setting("BENCH_LOADGENS", "1", _number(int, 1, 16), "loadgens", ("bench",)),
    Setting("BENCH_OPEN_LOOP", "0.5", _open_loop, None, ("bench",)),  # two fields: from_env
    Setting("BENCH_OPEN_LOOP_SECONDS", "20", _number(int, 1, 600), "open_loop_max_s", ("bench",)),
    Setting("BENCH_SWEEP", "off", _sweep, "sweep", ("bench",)),
    Setting("BENCH_SWEEP_DURATION", "1", _number(int, 1, 600), "sweep_duration", ("bench",)),
    Setting("BENCH_WRITE", "on", _choice({"on": "", "off": ""}, {"on": True, "off": False}, any_case=True), "write",
            ("bench",)),
    Setting("WRITE_FILES", "100", _number(int, 1, 100_000), "write_files", ("bench",)),
    Setting("WRITE_SIZE", "10000000", _size, "write_size", ("bench",)),
    Setting("WRITE_THREADS", "20", _number(int, 1, 256), "write_threads", ("bench",)),
    # an A/B run's (make ab sets them), read together by change_from_env
    Setting("AB_A", check=("ab",)),
    Setting("AB_B", check=("ab",)),
    Setting("AB_KIND", "A/B", _choice(AB_KINDS), check=("ab",)),
    Setting("AB_CHANGE"),  # what differs in B, in words: tools/lab/change.py sets it
    Setting("AB_BLOCKS", "12", _number(int, AB_BLOCKS_MIN, 100), check=("ab",)),
    Setting("AB_WINDOW", "3", _number(int, 1, 600), check=("ab",)),
    Setting("AB_WARMUP", "2", _number(int, 0, 600), check=("ab",)),
    Setting("AB_THRESHOLD", "5", _threshold, check=("ab",)),
    Setting("AB_FILES", "1KB 1MB", _ab_files, check=("ab",)),
    Setting("AB_CONCURRENCY", "100", _ints, check=("ab",)),
    Setting("AB_RESTART_TWINS", "off", _choice(RESTART_TWINS, {"every-block": True, "off": False}), check=("ab",)),
    Setting("AB_DESIGN", "duet", _choice(AB_DESIGNS), check=("ab",)),
    Setting("AB_ADMITTED", "on", _choice(ADMITTED, {"on": True, "off": False}), check=("ab",)),
    # where, as whom and how long: not recorded
    Setting("BENCH_STARTUP_TIMEOUT", "180", _number(int, 1), "startup_timeout", ("bench",), recorded=False,
            services=ONLY_BENCH),
    Setting("BENCH_ALLOW_NONCONFORMING", "0", _flag, "allow_nonconforming", ("bench",)),
    # .env's is the host's directory (compose mounts it at /results, bench's default: it is not passed)
    Setting("RESULTS_DIR", "/results", _text, "results_dir", ("results-dir",), recorded=False),
    Setting("RESULTS_OWNER", check=("results-owner",), recorded=False),
    # read by the serving paths (services/*/start.sh, gunicorn.conf.py, gridfs-fuse/entrypoint.sh...)
    Setting("NGINX_WORKERS", check=("whole", None), services=PATHS),
    Setting("GUNICORN_WORKERS", check=("whole", None), services=PATHS),
    # httpd-static's start.sh refuses more than one pinned core can use
    Setting("HTTPD_SERVERS", check=("whole", 64), services=PATHS),
    Setting("HTTPD_THREADS", check=("whole", 2000), services=PATHS),
    Setting("REQUEST_DEADLINE_MS", check=("whole", REQUEST_DEADLINE_MAX_MS), services=PATHS),
    # flask (per gunicorn worker) and node: the responses under way at once
    # (lab_http/app.py, node/settings.js); empty: the service's own default.
    Setting("FLASK_MAX_OPEN_STREAMS", check=("open-streams",), services=PATHS),
    Setting("NODE_MAX_OPEN_STREAMS", check=("open-streams",), services=PATHS),
    # bench's A/B run reads it too: the upstream a twin of nginx-cache fronts
    Setting("CACHE_UPSTREAM", "", _text, "cache_upstream", ("upstream",), services=PATHS),
    Setting("CACHE_SIZE", check=("cache-size",), services=PATHS),
    Setting("FUSE_KERNEL_CACHE", check=("switch",), services=PATHS),
    Setting("FUSE_ATTR_TIMEOUT", check=("seconds", 0), services=PATHS),
    Setting("FUSE_ENTRY_TIMEOUT", check=("seconds", 0), services=PATHS),
    Setting("FUSE_MAX_OPEN_FILES", check=("whole", FUSE_MAX_OPEN_FILES_MAX), services=PATHS),
    Setting("MONGO_TIMEOUT", check=("seconds", MONGO_TIMEOUT_MIN), services=PATHS),
    Setting("FUSE_NGINX_WORKERS", check=("whole", None), services=PATHS),
    *(Setting(f"{service}_CPUS", check=("cpuset",)) for service in ("MONGO", "POSTGRES", "TARGET", "LOADGEN",
                                                                    "SEED", "CADVISOR")),
    Setting("LOADGEN_CPU_QUOTA", check=("cpu-quota",)),
    *(Setting(f"{service}_MEM", check=("memory",)) for service in ("MONGO", "POSTGRES", "TARGET", "LOADGEN",
                                                                   "SEED", "CADVISOR")),
    # Not in .env and passed to no service: the Python paths' test-only known
    # change (lab_http/extra_work.py), which only make ab's twin gets, through
    # B_ENV. Not recorded: no run but an A/B has it, and ab.json names it (AB_CHANGE).
    Setting("LAB_TEST_EXTRA_WORK", recorded=False),
    # Not in .env: compose.yaml's addresses, the same for every run
    Setting("MONGO_URI", "mongodb://mongo:27017", _text, "mongo_uri", recorded=False,
            services=ONLY_BENCH | FOR_SEED | PATHS),
    Setting("POSTGRES_URL", "", _text, "postgres_url", recorded=False, services=ONLY_BENCH | FOR_SEED | PATHS),
    # ... set by tools/lab/hosts.py when the paths run on another engine (unset: bench's defaults);
    # BENCH_TARGET_URLS is read against BENCH_TARGETS, the LINK_ ones together (from_env)
    Setting("BENCH_TARGET_URLS", recorded=False, services=ONLY_BENCH),
    Setting("BENCH_LINK", "", _link, "link", recorded=False, services=ONLY_BENCH),
    Setting("CADVISOR_URL", "http://cadvisor:8080", _text, "cadvisor_url", recorded=False, services=ONLY_BENCH),
    *(Setting(name, recorded=False, services=ONLY_BENCH) for name in ("LINK_RATE", "LINK_DELAY", "LINK_LOSS")),
    # ... and bench's own places, never passed: the tests point them elsewhere
    Setting("FILES_DIR", "/data/files", _text, "files_dir", recorded=False),
    Setting("TARGET_PORT", "8080", _port, "target_port", recorded=False),
    Setting("WRITE_DIR", "/data/writes", _text, "write_dir", recorded=False),
    Setting("CGROUP_DIR", "/host/sys/fs/cgroup", _text, "cgroup_dir", recorded=False),
)
SETTINGS_BY_NAME = {setting.name: setting for setting in REGISTRY}
# Knobs recorded in results.json as `parameters`: every one that shapes a run.
RECORDED = [setting.name for setting in REGISTRY if setting.recorded]


def read(name: str, env=os.environ):
    """One setting's value as bench reads it (its default when unset), or a SettingsError naming it."""
    setting = SETTINGS_BY_NAME[name]
    return setting.read(env, setting.name, setting.default)


def change_from_env(env, targets: list[str]) -> ChangeSettings | None:
    """The A/B settings, or None when AB_A and AB_B are empty (an ordinary
    run); the knobs are checked either way."""
    settings = dict(kind=read("AB_KIND", env), change=env.get("AB_CHANGE", "").strip(),
                    blocks=read("AB_BLOCKS", env), window=read("AB_WINDOW", env), warmup=read("AB_WARMUP", env),
                    files=read("AB_FILES", env), restart_twins=read("AB_RESTART_TWINS", env),
                    design=read("AB_DESIGN", env), threshold=read("AB_THRESHOLD", env),
                    admitted=read("AB_ADMITTED", env),
                    concurrency=tuple(read("AB_CONCURRENCY", env)))
    a, b = env.get("AB_A", "").strip(), env.get("AB_B", "").strip()
    if not b and not a:
        return None
    if not b:
        raise SettingsError(f"AB_A={a!r}: an A/B run needs AB_B too, A's twin (make ab SERVICE={a} sets both)")
    if not a:
        raise SettingsError(f"AB_B={b!r}: an A/B run needs AB_A too, the path B is a twin of (make ab sets both)")
    if a == b:
        raise SettingsError(f"AB_B={b!r}: the same service as AB_A; B is A's twin (make ab names it {a}-b)")
    for name, service in (("AB_A", a), ("AB_B", b)):
        if service not in targets:
            raise SettingsError(f"{name}={service!r}: not in BENCH_TARGETS={' '.join(targets)!r}: A and B are "
                                "verified like any path (make ab sets BENCH_TARGETS)")
    return ChangeSettings(a=a, b=b, **settings)


def from_env(env=os.environ) -> Settings:
    for name, instead in RETIRED.items():
        if env.get(name):
            raise SettingsError(f"{name} is no longer read: runs are timed in seconds; set {instead} instead")
    fields = {setting.field: read(setting.name, env) for setting in REGISTRY if setting.field}
    targets, profile = fields["targets"], fields["profile"]
    open_loop, open_loop_curve = read("BENCH_OPEN_LOOP", env)
    settings = Settings(
        **fields, open_loop=open_loop, open_loop_curve=open_loop_curve,
        ab=change_from_env(env, targets), target_urls=_target_urls(env, targets),
        link_shaping=" ".join(f"{n.removeprefix('LINK_').lower()}={env[n]}" for n in ("LINK_RATE", "LINK_DELAY",
                                                                                       "LINK_LOSS") if env.get(n)),
    )
    if profile == "quick":
        return replace(settings, **QUICK)
    if profile == "standard":
        return replace(settings, concurrency=[max(settings.concurrency)], sweep=(), working_set=False, write=False,
                       open_loop_max_s=min(settings.open_loop_max_s, STANDARD_OPEN_LOOP_S),
                       tool_check=ONE_FILE_PER_PATH)
    return settings


def effective(cfg: Settings) -> dict:
    """The timing knobs as this run applied them (a profile overrides .env)."""
    return {"profile": cfg.profile, "duration_s": cfg.duration, "warmup_s": cfg.warmup,
            "min_requests": cfg.min_requests, "max_duration_s": cfg.duration * SLOW_CASE_STRETCH,
            "repetitions": cfg.repetitions, "target_width": cfg.target_width, "budget_s": cfg.budget_s,
            "tool_check": cfg.tool_check, "tools": list(cfg.tools), "loadgens": cfg.loadgens,
            "sweep": list(cfg.sweep),
            "sweep_duration_s": cfg.sweep_duration, "open_loop_share": cfg.open_loop,
            "open_loop_curve": list(cfg.open_loop_curve),
            "open_loop_max_s": cfg.open_loop_max_s,
            "write": cfg.write, "write_files": cfg.write_files, "write_size_bytes": cfg.write_size,
            "write_threads": cfg.write_threads, "working_set": cfg.working_set,
            "ab": asdict(cfg.ab) if cfg.ab else None}


def recorded_parameters(env=os.environ) -> dict:
    return {name: env.get(name) for name in RECORDED}
