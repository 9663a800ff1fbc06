#!/usr/bin/env bash
# Makes a Debian bookworm machine ready to run the lab (make lab, lab-local,
# ab, matrix, resilience, overload, lab-hosts): a Docker engine (Debian's
# docker.io when none is installed; started when none answers), Compose v2,
# Go, and .venv with bench (and its packages) for tools/. With --tests (make test),
# also what only the tests need: the native servers and clients, FerretDB's
# binary, vegeta, actionlint and the test runner's packages. Says first what
# it will install and why, then installs it. Idempotent; safe to re-run.
# --no-engine leaves the Docker engine and Compose out (an engine elsewhere,
# DOCKER_HOST; or a container, as tests/test_setup_bare.py runs it).
#   tools/install/setup.sh [--tests] [--no-engine]
set -euo pipefail
# One line, before anything fails half-way for want of root.
if [ "$(id -u)" -ne 0 ]; then
  echo "[setup.sh] error: run as root (sudo make ...): it installs Debian packages, Compose into /usr/local/lib/docker and builds into /var/cache/gridfs-lab" >&2
  exit 1
fi
. "$(dirname "$0")/../lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
tests='' no_engine=''
for arg in "$@"; do
  case $arg in
    --tests) tests=1 ;;
    --no-engine) no_engine=1 ;;
    *) die "usage: tools/install/setup.sh [--tests] [--no-engine]" ;;
  esac
done

# What the lab itself needs, each with its reason (shown in the plan).
LAB_PACKAGES=(
  "debootstrap: the local Debian base image (make lab-local)"
  "curl: FerretDB's module, the local stand-in for mongo"
  "ca-certificates: HTTPS for curl and go"
  "python3: bench's tools (tools/lab/*.py, tools/ci/*.py) and unpacking FerretDB's module"
  "python3-venv: .venv for tools/ (make ab, matrix, resilience, overload, lab-hosts)"
)
# Only when no Docker engine is installed (docker.io conflicts with docker-ce's containerd).
ENGINE_PACKAGES=(
  "docker.io: the Docker engine (none is installed)"
  "iptables: the engine's networks"
)
# Only when no Go of at least 1.25 is here (tools/install/install-go.sh).
GO_PACKAGES=(
  "golang-1.19-go: fetches the pinned Go toolchain (itself too old to build the lab's Go programs)"
)
# What only the tests need (make test): never installed by make lab.
TEST_PACKAGES=(
  "nginx: nginx-gridfs's native tests (nginx on :80 under systemd)"
  "nginx-dev: building the GridFS module against Debian's nginx"
  "pkg-config: the module's build"
  "build-essential: the module's build"
  "libmongoc-dev: the module's MongoDB driver"
  "libbson-dev: the module's BSON"
  "clang: the module's fuzz test (libFuzzer)"
  "libclang-rt-14-dev: the module's fuzz test (libFuzzer)"
  "postgresql: FerretDB's backend in native tests (on :5432 under systemd)"
  "apache2-utils: ab, a load client in tests"
  "wrk: a load client in tests"
  "aria2: the resume client in tests"
  "iperf3: the link between two hosts (tests/test_link.py, the hosts e2e)"
  "apache2-bin: httpd-static's native tests (Debian's Apache)"
  "apache2-dev: httpd-static's native tests (its module, mod_lab_framing, built against Debian's headers)"
  "media-types: httpd-static's native tests (/etc/mime.types)"
  "fuse3: gridfs-fuse's native tests (fusermount3)"
  "shellcheck: actionlint checks the workflow's run: scripts with it"
  "chromium: tests/support/browser_check.py, each run's index.html in a browser, headless"
)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
owner() { dpkg -S "$1" 2>/dev/null | cut -d: -f1 || true; } # the package a file came from, if any

# The Docker engine as found: one line for the plan; sets engine_missing.
engine_missing=
if [ -n "$no_engine" ]; then
  engine="Docker engine and Compose: not set up (--no-engine)"
elif docker info >/dev/null 2>&1; then
  pkg=$(owner "$(command -v dockerd || command -v docker)")
  engine="Docker engine $(docker version -f '{{.Server.Version}}' 2>/dev/null) answers (package ${pkg:-unknown}): left alone"
elif dockerd=$(command -v dockerd); then
  pkg=$(owner "$dockerd")
  engine="Docker engine found ($dockerd, package ${pkg:-unknown}), not answering: started here, otherwise left alone"
elif client=$(command -v docker) && [ "$(owner "$client")" = docker-ce-cli ]; then
  die "docker-ce's client is installed ($client) but no engine answers and no dockerd is here: install docker-ce (Debian's docker.io conflicts with it), or set DOCKER_HOST"
elif client=$(command -v docker); then
  # A client alone (some images ship one): Debian's engine beside it; the
  # client negotiates the engine's API version down.
  engine="a Docker client only ($client): Debian's docker.io installed for its dockerd, and started"; engine_missing=1
else
  engine="no Docker engine: Debian's docker.io installed and dockerd started"; engine_missing=1
fi
go_plan=$("$root/tools/install/install-go.sh" --plan)

wanted=("${LAB_PACKAGES[@]}")
[ -n "$engine_missing" ] && wanted+=("${ENGINE_PACKAGES[@]}")
case $go_plan in *"used as it is"*) ;; *) wanted+=("${GO_PACKAGES[@]}") ;; esac
[ -n "$tests" ] && wanted+=("${TEST_PACKAGES[@]}")
missing=() reasons=()
for entry in "${wanted[@]}"; do
  installed "${entry%%:*}" || { missing+=("${entry%%:*}"); reasons+=("$entry"); }
done

say "set-up for the lab${tests:+ and its tests}; the plan:"
say "  $engine"
if [ ${#missing[@]} -eq 0 ]; then say "  Debian packages: all there"
else say "  Debian packages to install:"; for r in "${reasons[@]}"; do say "    $r"; done
fi
say "  $go_plan"
[ -n "$no_engine" ] || say "  $("$root/tools/install/install-compose.sh" --plan)"
if [ -n "$tests" ]; then say "  .venv: bench's Python packages for tools/, and the tests' (tests/requirements.txt)"
else say "  .venv: bench's Python packages for tools/ (loadgen/requirements.txt)"
fi
if [ -n "$tests" ]; then say "  FerretDB, vegeta and actionlint built with Go into $LAB_CACHE for the native tests"; fi

if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

start_docker() {
  docker info >/dev/null 2>&1 && return
  say "no Docker engine answers: starting dockerd (log: /var/log/dockerd.log)"
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 60); do
    docker info >/dev/null 2>&1 && return
    sleep 1
  done
  die "dockerd did not answer within 60 s; see /var/log/dockerd.log"
}

# With bench itself, editable (loadgen/pyproject.toml): tools/ import it and
# .venv/bin/bench (compare, index) runs from anywhere.
venv_install() { # FOR REQUIREMENTS [FILES IT INCLUDES...]: once per change of them or of bench's pyproject
  local stamp="$root/.venv/.$1.sha256" want
  want=$(cat "${@:2}" "$root/loadgen/pyproject.toml" | sha256sum)
  [ -x "$root/.venv/bin/pip" ] || python3 -m venv "$root/.venv"
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return
  say "installing $1's Python packages into .venv ($2, and bench from loadgen/)"
  "$root/.venv/bin/pip" install -q --disable-pip-version-check -r "$2" -e "$root/loadgen"
  echo "$want" >"$stamp"
}

[ -n "$no_engine" ] || start_docker
"$root/tools/install/install-go.sh" >/dev/null
PATH="$LAB_CACHE/go/bin:$PATH"  # the Go it chose, for the scripts below
[ -n "$no_engine" ] || "$root/tools/install/install-compose.sh" >/dev/null
venv_install lab "$root/loadgen/requirements.txt"
if [ -n "$tests" ]; then
  "$root/tools/install/build-ferretdb.sh" >/dev/null
  "$root/tools/install/install-vegeta.sh" >/dev/null
  "$root/tools/install/install-actionlint.sh" >/dev/null
  venv_install tests "$root/tests/requirements.txt" "$root/services/flask/requirements.txt" \
    "$root/services/flask-postgres/requirements.txt" "$root/loadgen/requirements.txt"
fi
if [ -n "$no_engine" ]; then say "ready${tests:+ for the tests} but for Docker: $(go env GOVERSION)"
else say "ready${tests:+ for the tests}: docker $(docker version -f '{{.Server.Version}}'), compose $(docker compose version --short), $(go env GOVERSION)"
fi
