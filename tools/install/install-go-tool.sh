#!/usr/bin/env bash
# Builds a Go program from its pinned module on the Go module proxy (no
# release binary can be downloaded here) into the lab's cache, once; prints
# the binary's path.
#   tools/install/install-go-tool.sh NAME MODULE/PATH VERSION [go install flags...]
. "$(dirname "$0")/../lib.sh"
[ $# -ge 3 ] || die "usage: install-go-tool.sh NAME MODULE/PATH VERSION [go install flags...]"
name=$1 package=$2 version=$3; shift 3
cached="$LAB_CACHE/$name-$version"
if [ ! -x "$cached" ]; then
  say "building $name $version from the Go module proxy"
  tmp=$(mktemp -d)
  CGO_ENABLED=0 GOBIN="$tmp" timeout 600 go install -trimpath "$@" "$package@$version"
  # go install names the binary after the package path's last element, or the
  # one before it when that is a major version (.../vegeta/v12 -> vegeta)
  built=("$tmp"/*)
  { [ ${#built[@]} -eq 1 ] && [ -x "${built[0]}" ]; } || die "go install of $package left ${built[*]} in $tmp, expected one program"
  mv "${built[0]}" "$cached"; rmdir "$tmp"
fi
echo "$cached"
