#!/usr/bin/env bash
# Installs Docker Compose v2 as a CLI plugin, built from the Go module proxy
# (no release binary can be downloaded here). Debian's docker-compose 1.29
# rejects the top-level `name:` that compose.yaml uses.
. "$(dirname "$0")/lib.sh"
COMPOSE_VERSION=${COMPOSE_VERSION:-v2.29.7}
plugin_dir=/usr/local/lib/docker/cli-plugins
cached="$LAB_CACHE/docker-compose-$COMPOSE_VERSION"

if docker compose version 2>/dev/null | grep -q "${COMPOSE_VERSION#v}"; then
  say "docker compose $COMPOSE_VERSION already installed"; exit 0
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
install -m 0755 "$cached" "$plugin_dir/docker-compose"
docker compose version
