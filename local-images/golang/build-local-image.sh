#!/usr/bin/env bash
# Builds the local stand-in for GO_IMAGE (golang:1.22-bookworm): the host's Go
# toolchain (tools/install/install-go.sh's, at least 1.25) in the local Debian base. Usage: build-local-image.sh BASE TAG
# (skipped when TAG exists, unless REBUILD is set).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../../tools/lib.sh"
base=${1:?usage: build-local-image.sh BASE_IMAGE TAG}
tag=${2:?usage: build-local-image.sh BASE_IMAGE TAG}
# The toolchain itself, not the link to it that lib.sh's PATH goes through.
goroot=$(readlink -f "${GOROOT_HOST:-$LAB_CACHE/go}")

if docker image inspect "$tag" >/dev/null 2>&1 && [ -z "${REBUILD:-}" ]; then say "$tag exists"; exit 0; fi
[ -x "$goroot/bin/go" ] || die "GOROOT_HOST=$goroot has no bin/go: the golang stand-in copies the host's Go toolchain (tools/install/install-go.sh)"
version=$("$goroot/bin/go" env GOVERSION)
say "building $tag ($version from $goroot)"
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$here/Dockerfile" "$context/"
cp -a "$goroot" "$context/go"
docker build -q --build-arg "BASE_IMAGE=$base" --build-arg "GOLANG_VERSION=${version#go}" \
  -t "$tag" "$context" >/dev/null
