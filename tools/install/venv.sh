#!/usr/bin/env bash
# .venv with the tests' Python packages (tests/requirements.txt) and bench
# itself, editable (loadgen/pyproject.toml), and nothing else of the
# machine's: no root, no Debian packages, no Docker. make check needs only
# this; tools/install/setup.sh --tests installs the same packages, under the same
# stamp, so either one's install serves the other. Reinstalls only when a
# requirements file or loadgen's pyproject.toml changed.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=$root/.venv
stamp=$venv/.tests.sha256
want=$(cat "$root/tests/requirements.txt" "$root/services/flask/requirements.txt" \
  "$root/services/flask-postgres/requirements.txt" "$root/loadgen/requirements.txt" \
  "$root/loadgen/pyproject.toml" | sha256sum)
[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && exit 0
if [ ! -x "$venv/bin/pip" ] && ! python3 -m venv "$venv"; then
  echo "[venv.sh] error: python3 -m venv failed: on Debian, apt-get install python3-venv (tools/install/setup.sh does)" >&2
  exit 1
fi
echo "[venv.sh] installing the tests' Python packages into .venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check -r "$root/tests/requirements.txt" -e "$root/loadgen"
echo "$want" >"$stamp"
