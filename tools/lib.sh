# Shared helpers for the shell scripts of tools/install, tools/lab and tools/ci
# (each sources it as $(dirname "$0")/../lib.sh) and local-images/: sourced, not run.
set -euo pipefail
say() { printf '[%s] %s\n' "${0##*/}" "$*" >&2; }
die() { say "error: $*"; exit 1; }
LAB_CACHE=${LAB_CACHE:-/var/cache/gridfs-lab}
mkdir -p "$LAB_CACHE" 2>/dev/null ||
  die "cannot create $LAB_CACHE (the lab's build cache): run as root, or set LAB_CACHE to a folder of yours"
# The Go toolchain tools/install/install-go.sh chose, ahead of an older go on PATH.
if [ -x "$LAB_CACHE/go/bin/go" ]; then PATH="$LAB_CACHE/go/bin:$PATH"; fi
# NAME FILE...: NAME's value in the env files, later ones winning, as Compose
# reads them (bench/env_file.py's parser, the one every tool uses).
# The folder is found as this file is sourced: the script may cd later.
LAB_ENV_PARSER=$(cd "$(dirname "${BASH_SOURCE[0]}")/../loadgen/bench" && pwd)/env_file.py
env_file_value() {
  python3 "$LAB_ENV_PARSER" "$@"
}
