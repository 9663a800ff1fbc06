#!/usr/bin/env bash
# Builds vegeta (the open-loop, fixed-rate load generator bench uses for
# latency) from its pinned Go module, for native tests; the bench image
# builds the same version in its own Go stage. Prints the binary's path.
. "$(dirname "$0")/lib.sh"
VEGETA_VERSION=${VEGETA_VERSION:-v12.13.0}
cached="$LAB_CACHE/vegeta-$VEGETA_VERSION"
if [ ! -x "$cached" ]; then
  say "building vegeta $VEGETA_VERSION from the Go module proxy"
  tmp=$(mktemp -d)
  CGO_ENABLED=0 GOBIN="$tmp" timeout 600 go install -trimpath \
    -ldflags "-s -w -X main.Version=$VEGETA_VERSION" "github.com/tsenart/vegeta/v12@$VEGETA_VERSION"
  mv "$tmp/vegeta" "$cached"; rmdir "$tmp"
fi
echo "$cached"
