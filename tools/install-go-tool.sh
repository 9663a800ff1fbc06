#!/usr/bin/env bash
# Builds a Go program from its pinned module on the Go module proxy (no
# release binary can be downloaded here) into the lab's cache, once; prints
# the binary's path.
#   tools/install-go-tool.sh NAME MODULE/PATH VERSION [go install flags...]
. "$(dirname "$0")/lib.sh"
[ $# -ge 3 ] || die "usage: install-go-tool.sh NAME MODULE/PATH VERSION [go install flags...]"
name=$1 package=$2 version=$3; shift 3
cached="$LAB_CACHE/$name-$version"
if [ ! -x "$cached" ]; then
  say "building $name $version from the Go module proxy"
  tmp=$(mktemp -d)
  CGO_ENABLED=0 GOBIN="$tmp" timeout 600 go install -trimpath "$@" "$package@$version"
  mv "$tmp/$(basename "$package")" "$cached"; rmdir "$tmp"
fi
echo "$cached"
