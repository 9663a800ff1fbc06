#!/usr/bin/env bash
# Prints the uid:gid bench should run as (compose.yaml: `user:
# ${RESULTS_OWNER}`) so that it can write RESULTS_DIR, and makes sure it can:
#   - not root: your own ids, so the results are yours;
#   - root: RESULTS_OWNER as set (shell, else the env files; bench never
#     runs as root), and RESULTS_DIR itself handed to it (root reads it all
#     the same; runs already in it keep their owner).
# Usage: RESULTS_OWNER=$(tools/lab/results-owner.sh ENV_FILE...) docker compose ...
# Later env files win, as with docker compose --env-file.
. "$(dirname "$0")/../lib.sh"
root=$(cd "$(dirname "$0")/../.." && pwd)
[ $# -ge 1 ] || die "usage: tools/lab/results-owner.sh ENV_FILE..."

env_files=("$@")
if [ "$(id -u)" != 0 ]; then
  echo "$(id -u):$(id -g)"
  exit 0
fi
owner=${RESULTS_OWNER:-$(env_file_value RESULTS_OWNER "${env_files[@]}")}
[[ $owner =~ ^[1-9][0-9]*:[1-9][0-9]*$ ]] ||
  die "RESULTS_OWNER=$owner: expected uid:gid, two numbers other than 0 (bench does not run as root)"
dir=${RESULTS_DIR:-$(env_file_value RESULTS_DIR "${env_files[@]}")}
dir=${dir:-./results}
case $dir in /*) ;; *) dir="$root/${dir#./}" ;; esac
mkdir -p "$dir"
chown "$owner" "$dir"
echo "$owner"
