#!/usr/bin/env bash
# Installs Docker Compose v2 as a CLI plugin, built from the Go module proxy
# (no release binary can be downloaded here). Debian's docker-compose 1.29
# rejects the top-level `name:` that compose.yaml uses. A plugin of
# COMPOSE_VERSION or newer already installed is left alone, and never
# shadowed: ours goes in /usr/local/lib/docker/cli-plugins, which docker
# searches before the packages' /usr/lib and /usr/libexec.
#   tools/install/install-compose.sh         install unless a new enough one is there
#   tools/install/install-compose.sh --plan  say which it would do, change nothing
. "$(dirname "$0")/../lib.sh"
COMPOSE_VERSION=${COMPOSE_VERSION:-v2.29.7}
want=${COMPOSE_VERSION#v}
plugin_dir=/usr/local/lib/docker/cli-plugins
ours=$plugin_dir/docker-compose
cached="$LAB_CACHE/docker-compose-$COMPOSE_VERSION"

version_of() { "$1" version --short 2>/dev/null | sed 's/^v//'; }
at_least() { [ "$(printf '%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; } # VERSION MINIMUM

# A new enough plugin where docker looks besides ours: it is used.
for dir in "${HOME:-/root}/.docker/cli-plugins" /usr/local/libexec/docker/cli-plugins /usr/lib/docker/cli-plugins \
  /usr/libexec/docker/cli-plugins; do
  [ -x "$dir/docker-compose" ] || continue
  found=$(version_of "$dir/docker-compose" || true)
  if [ -z "$found" ] || ! at_least "$found" "$want"; then continue; fi
  if [ "${1:-}" = --plan ]; then echo "Compose: $found found at $dir: left alone"; exit 0; fi
  # Ours, from an earlier set-up, would hide it (a plugin of anyone else stays).
  if [ -x "$ours" ] && [ "$dir" != "${HOME:-/root}/.docker/cli-plugins" ] && [ "$(version_of "$ours")" = "$want" ] &&
    [ "$found" != "$want" ]; then
    say "removing the lab's Compose $want at $ours: it would hide Compose $found at $dir"
    rm -f "$ours"
  fi
  say "Compose $found found at $dir (at least $want): left alone"; exit 0
done
if [ -x "$ours" ] && found=$(version_of "$ours") && [ -n "$found" ] && at_least "$found" "$want"; then
  if [ "${1:-}" = --plan ]; then echo "Compose: $found found at $ours: left alone"; exit 0; fi
  say "Compose $found found at $ours: left alone"; exit 0
fi
if [ "${1:-}" = --plan ]; then
  echo "Compose: $COMPOSE_VERSION built from source with Go (about 5 minutes cold) into $plugin_dir; Debian's docker-compose 1.29 cannot read compose.yaml"
  exit 0
fi

if [ ! -x "$cached" ]; then
  say "building docker compose $COMPOSE_VERSION from source (about 5 minutes cold)"
  tmp=$(mktemp -d)
  GOBIN="$tmp" go install \
    -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
    "github.com/docker/compose/v2/cmd@$COMPOSE_VERSION"
  mv "$tmp/cmd" "$cached"; rmdir "$tmp"
fi
mkdir -p "$plugin_dir"
install -m 0755 "$cached" "$ours"
docker compose version
