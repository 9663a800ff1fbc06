# Shared helpers for the tools/ scripts: sourced, not run.
set -euo pipefail
LAB_CACHE=${LAB_CACHE:-/var/cache/gridfs-lab}
mkdir -p "$LAB_CACHE"
say() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }
die() { say "error: $*"; exit 1; }
