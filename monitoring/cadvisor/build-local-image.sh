#!/usr/bin/env bash
# Builds gridfs-lab-local/cadvisor:v0.49.1: a static Go binary compiled on the
# host (reusing the host's Go module cache) copied into the local Debian base.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
image="${CADVISOR_LOCAL_IMAGE:-gridfs-lab-local/cadvisor:v0.49.1}"
base_image="${BASE_IMAGE:-gridfs-lab-local/debian:bookworm}"

# The binary stays out of the repository: the build context is a temp dir.
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT

(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$context/cadvisor" .)
docker build --build-arg BASE_IMAGE="$base_image" -f "$here/Dockerfile" -t "$image" "$context"
echo "built $image"
