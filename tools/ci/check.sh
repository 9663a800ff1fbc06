#!/usr/bin/env bash
# make check: the one-minute tier (docs/ci.md). ruff, shellcheck, gofmt and
# go vet on the FUSE filesystem, node --check, and the unit tests, which need
# only .venv (tools/install/venv.sh). A checker that is not installed is skipped with
# a line saying so, never a failure; every step runs, then any finding fails.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
venv=$root/.venv/bin
failed=()

step() { # NAME COMMAND...: runs it, remembers a failure
  echo "== $1"
  "${@:2}" || failed+=("$1")
}
skipped() { echo "== $1: skipped, $2"; }

# Every shell script the repository has (tracked or new, not ignored): *.sh
# and files whose first line runs sh or bash. tools/lib.sh is sourced, not
# run: shellcheck reads it within each script that sources it (-x).
shell_scripts() {
  git ls-files -co --exclude-standard | while read -r file; do
    { [ -f "$file" ] && [ "$file" != tools/lib.sh ]; } || continue
    case $file in
      *.sh) echo "$file" ;;
      *) head -n 1 "$file" | grep -qE '^#!.*[/ ](ba|da)?sh$' && echo "$file" ;;
    esac
  done
}

go_checks() {
  local module=services/gridfs-fuse unformatted want have
  unformatted=$("$(go env GOROOT)/bin/gofmt" -l "$module") || return 1
  if [ -n "$unformatted" ]; then
    echo "gofmt would change: $unformatted (run gofmt -w $module)"
    return 1
  fi
  # An older Go than go.mod's would fail for that alone, not for the code.
  want=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$module/go.mod")
  have=$(go env GOVERSION | sed 's/^go//')
  if [ "$(printf '%s\n' "$want" "$have" | sort -V | head -n 1)" != "$want" ]; then
    echo "go vet: skipped, go $have is older than go.mod's $want (tools/install/install-go.sh installs one)"
    return 0
  fi
  # Unreachable modules are the network's fault, not the code's: said, not failed.
  if ! (cd "$module" && GOTOOLCHAIN=local timeout 300 go mod download); then
    echo "go vet: skipped, the module's dependencies could not be downloaded"
    return 0
  fi
  (cd "$module" && GOTOOLCHAIN=local go vet ./...)
}

node_checks() {
  local file status=0
  while read -r file; do
    node --check "$file" || status=1
  done < <(git ls-files -co --exclude-standard -- '*.js' '*.mjs' '*.cjs')
  return "$status"
}

step "ruff" "$venv/ruff" check .

mapfile -t scripts < <(shell_scripts)
if ! command -v shellcheck >/dev/null; then
  skipped shellcheck "not installed (apt-get install shellcheck; tools/install/setup.sh --tests installs it)"
elif [ ${#scripts[@]} -eq 0 ]; then
  skipped shellcheck "no scripts found (git ls-files lists them: not a git checkout?)"
else
  # -P SCRIPTDIR: a script's `. "$(dirname "$0")/../lib.sh"` is found from its own folder
  step "shellcheck (${#scripts[@]} scripts)" shellcheck -x -P SCRIPTDIR "${scripts[@]}"
fi

# The Go tools/install/install-go.sh chose, ahead of an older go on PATH (as make's PATH)
PATH=${LAB_CACHE:-/var/cache/gridfs-lab}/go/bin:$PATH
if command -v go >/dev/null; then
  step "gofmt, go vet (services/gridfs-fuse)" go_checks
else
  skipped "gofmt, go vet" "no go on PATH (tools/install/install-go.sh installs one)"
fi

if command -v node >/dev/null; then
  step "node --check" node_checks
else
  skipped "node --check" "no node on PATH"
fi

# The venv first on PATH: the tests' own `python3 -m bench` runs with its packages.
step "pytest -m unit" env PATH="$venv:$PATH" "$venv/pytest" -m unit -q "$@"

if [ ${#failed[@]} -gt 0 ]; then
  echo "make check failed: ${failed[*]}"
  exit 1
fi
echo "make check passed"
