#!/usr/bin/env bash
# Builds FerretDB, the MongoDB-protocol stand-in used where no mongo image or
# server can be had. `go install` fails on its version list, so fetch the
# module zip from the Go proxy and build it. Prints the binary's path.
. "$(dirname "$0")/../lib.sh"
FERRETDB_VERSION=${FERRETDB_VERSION:-v1.24.2}
bin="$LAB_CACHE/ferretdb-$FERRETDB_VERSION"
if [ ! -x "$bin" ]; then
  proxy=${GOPROXY:-https://proxy.golang.org}; proxy=${proxy%%,*}
  tmp=$(mktemp -d)
  say "downloading FerretDB $FERRETDB_VERSION module"
  curl -fsSL -o "$tmp/src.zip" "$proxy/github.com/!ferret!d!b/!ferret!d!b/@v/$FERRETDB_VERSION.zip"
  (cd "$tmp" && python3 -m zipfile -e src.zip src)
  say "building FerretDB (about 90 s)"
  # The version is normally written by its own task runner from git.
  (cd "$tmp/src/github.com/FerretDB/FerretDB@$FERRETDB_VERSION" &&
     echo "$FERRETDB_VERSION" > build/version/version.txt &&
     CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" ./cmd/ferretdb)
  mv "$bin.tmp" "$bin"; rm -rf "$tmp"
fi
echo "$bin"
