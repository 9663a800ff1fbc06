#!/usr/bin/env bash
# Builds vegeta (the open-loop, fixed-rate load generator bench uses for
# latency) from its pinned Go module, for native tests; the bench image
# builds the same version in its own Go stage. Prints the binary's path.
VEGETA_VERSION=${VEGETA_VERSION:-v12.13.0}
exec "$(dirname "$0")/install-go-tool.sh" vegeta github.com/tsenart/vegeta/v12 "$VEGETA_VERSION" \
  -ldflags "-s -w -X main.Version=$VEGETA_VERSION"
