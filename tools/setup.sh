#!/usr/bin/env bash
# Makes a fresh Debian bookworm machine ready to run the lab and its tests:
# Debian packages, a Docker engine (started here when none answers), Compose
# v2, FerretDB, and the test virtualenv. Idempotent; safe to re-run.
. "$(dirname "$0")/lib.sh"
root=$(cd "$(dirname "$0")/.." && pwd)

APT_PACKAGES=(
  docker.io iptables          # engine (the client alone cannot build or run)
  debootstrap                 # local base image
  nginx nginx-dev pkg-config build-essential libmongoc-dev libbson-dev  # native module tests
  clang libclang-rt-14-dev    # the module's fuzz test (libFuzzer)
  postgresql                  # FerretDB's backend in native tests
  apache2-utils wrk aria2 curl  # load and resume clients in tests
  iperf3                      # the link between two hosts (tests/test_link.py, the hosts e2e)
  apache2-bin media-types     # httpd-static's native tests (Debian's Apache, /etc/mime.types)
  fuse3                       # gridfs-fuse's native tests (fusermount3)
  shellcheck                  # actionlint checks the workflow's run: scripts with it
  chromium                    # tests/browser_check.py: each run's index.html in a real browser, headless
)

install_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  say "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

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

make_venv() {
  local venv="$root/.venv" stamp="$root/.venv/.requirements.sha256"
  local want; want=$(cat "$root"/tests/requirements.txt "$root"/services/flask/requirements.txt \
    "$root"/services/flask-postgres/requirements.txt "$root"/loadgen/requirements.txt | sha256sum)
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && return
  say "installing test dependencies into .venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/tests/requirements.txt"
  echo "$want" >"$stamp"
}

install_packages
start_docker
"$root/tools/install-compose.sh" >/dev/null
"$root/tools/build-ferretdb.sh" >/dev/null
"$root/tools/install-vegeta.sh" >/dev/null
"$root/tools/install-actionlint.sh" >/dev/null
make_venv
say "ready: docker $(docker version -f '{{.Server.Version}}'), $(docker compose version --short) compose"
