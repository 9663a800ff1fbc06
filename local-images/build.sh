#!/usr/bin/env bash
# Builds, from Debian packages only, a local image for every image variable in
# .env, then writes local.env (= .env with the image variables pointed at
# them). For machines that cannot pull from a container registry:
#   local-images/build.sh && docker compose --env-file local.env up bench
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
. "$root/tools/lib.sh"
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CA_BUNDLE=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
PREFIX=gridfs-lab-local

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

build_base() {
  local tag=$PREFIX/debian:$SUITE
  if image_exists "$tag" && [ -z "${REBUILD:-}" ]; then say "$tag exists"; return; fi
  local tarball="$LAB_CACHE/debian-$SUITE-minbase-ca.tar"
  if [ ! -s "$tarball" ]; then
    say "debootstrap $SUITE (about 35 s)"
    local rootfs; rootfs=$(mktemp -d)
    debootstrap --variant=minbase --include=ca-certificates "$SUITE" "$rootfs" "$MIRROR" >"$LAB_CACHE/debootstrap.log" 2>&1 ||
      die "debootstrap failed, see $LAB_CACHE/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  # The host's CA bundle goes in so HTTPS to package registries works behind
  # a re-signing proxy, as it would behind a corporate one; also as a local
  # CA, so that update-ca-certificates (run by later apt installs) keeps it.
  local ctx; ctx=$(mktemp -d)
  cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
  say "importing $tag"
  docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["bash"]' - "$PREFIX/debian:rootfs" <"$tarball" >/dev/null
  printf 'FROM %s\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\nCOPY ca-certificates.crt /usr/local/share/ca-certificates/host-ca-bundle.crt\n' "$PREFIX/debian:rootfs" >"$ctx/Dockerfile"
  docker build -q -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
}

build_derived() { # name tag [extra context files...]
  local name=$1 tag=$2; shift 2
  if image_exists "$tag" && [ -z "${REBUILD:-}" ]; then say "$tag exists"; return; fi
  say "building $tag"
  local ctx; ctx=$(mktemp -d)
  cp -r "$here/$name/." "$ctx/"
  for f in "$@"; do cp "$f" "$ctx/"; done
  docker build -q --build-arg "BASE_IMAGE=$PREFIX/debian:$SUITE" -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
}

# cAdvisor from the library module on the Go proxy (the official cmd module
# is not there), compiled on the host and copied into the local base.
build_cadvisor() {
  local tag=$PREFIX/cadvisor:v0.49.1
  if image_exists "$tag" && [ -z "${REBUILD:-}" ]; then say "$tag exists"; return; fi
  say "building $tag (go build, about a minute the first time)"
  CADVISOR_LOCAL_IMAGE=$tag BASE_IMAGE=$PREFIX/debian:$SUITE \
    "$root/monitoring/cadvisor/build-local-image.sh" >"$LAB_CACHE/cadvisor-build.log" 2>&1 ||
    die "cAdvisor build failed, see $LAB_CACHE/cadvisor-build.log"
}

docker info >/dev/null 2>&1 || die "no Docker engine answers (run tools/install/setup.sh)"
build_base
build_cadvisor
build_derived python "$PREFIX/python:3.11"
build_derived node "$PREFIX/node:18"
"$here/golang/build-local-image.sh" "$PREFIX/debian:$SUITE" "$PREFIX/golang:bookworm"
build_derived postgres "$PREFIX/postgres:15"
build_derived httpd "$PREFIX/httpd:2.4"
ferretdb_bin=$("$root/tools/install/build-ferretdb.sh")
cp "$ferretdb_bin" "$LAB_CACHE/ferretdb"
# -lab2: the stand-in's second interface (logins, for make lab-hosts); an
# image whose tag exists is kept, so a changed interface takes a new tag
build_derived mongo "$PREFIX/mongo:ferretdb-1.24.2-lab2" "$LAB_CACHE/ferretdb"
# A machine with fewer than 4 cores gets the 2-core pins too, so that
# `docker compose --env-file local.env up bench` runs as it is.
pins=(); [ "$(nproc)" -lt 4 ] && pins=("$root/cpus-2.env")
# the host's python3 (run by hand, this may come before tools/install/setup.sh's .venv),
# bench's env-file reader from loadgen/ (standard library only)
PYTHONPATH="$root/loadgen" python3 "$root/tools/install/write-env.py" "$root/.env" "$here/images.env" "${pins[@]}" >"$root/local.env"
say "wrote local.env${pins:+ (with the 2-core pins)}; run: docker compose --env-file local.env up bench"
