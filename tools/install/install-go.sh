#!/usr/bin/env bash
# Makes a Go toolchain new enough for what the lab builds with Go (Compose,
# FerretDB, cAdvisor, vegeta, actionlint, the golang stand-in image) the one
# at $LAB_CACHE/go, which lib.sh puts first on PATH. A Go of at least GO_MIN
# already here is used as it is; else the pinned GO_VERSION is fetched from
# the Go module proxy as the module golang.org/toolchain (what `go` itself
# fetches for GOTOOLCHAIN) by Debian's golang-1.19-go: too old to build any
# of them, but its `go mod download` checks the toolchain against the
# checksum database. Prints the toolchain's GOROOT.
#   tools/install/install-go.sh         use or install
#   tools/install/install-go.sh --plan  say which it would do, change nothing
. "$(dirname "$0")/../lib.sh"
# actionlint v1.7.12 needs 1.25, FerretDB v1.24.2 1.24, Compose v2.29.7 1.21.
GO_MIN=1.25
# Pinned: the version this lab's builds were checked with.
GO_VERSION=${GO_VERSION:-go1.26.8}
BOOTSTRAP_GO=/usr/lib/go-1.19/bin/go

new_enough() { # GOVERSION such as go1.26.8
  local v=${1#go}
  [[ $v =~ ^[0-9]+\.[0-9]+ ]] && [ "$(printf '%s\n' "$GO_MIN" "$v" | sort -V | head -n 1)" = "$GO_MIN" ]
}

found() { # the first usable Go's "GOVERSION GOROOT"
  local bin version
  for bin in "$LAB_CACHE/go/bin/go" "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then continue; fi
    version=$(GOTOOLCHAIN=local "$bin" env GOVERSION 2>/dev/null) || continue
    new_enough "$version" && { echo "$version $(GOTOOLCHAIN=local "$bin" env GOROOT)"; return; }
  done
  return 0
}

read -r version goroot <<<"$(found)"
if [ "${1:-}" = --plan ]; then
  if [ -n "${version:-}" ]; then echo "Go: $version found at $goroot (at least $GO_MIN): used as it is"
  else echo "Go: $GO_VERSION from the Go module proxy into $LAB_CACHE, fetched with Debian's golang-1.19-go (too old itself): Compose, FerretDB, cAdvisor and the golang stand-in image build with it"
  fi
  exit 0
fi
if [ -z "${version:-}" ]; then
  [ -x "$BOOTSTRAP_GO" ] || die "no Go $GO_MIN or newer here, and no $BOOTSTRAP_GO to fetch $GO_VERSION with (tools/install/setup.sh installs golang-1.19-go)"
  goroot="$LAB_CACHE/$GO_VERSION"
  if [ ! -x "$goroot/bin/go" ]; then
    module="golang.org/toolchain@v0.0.1-$GO_VERSION.linux-$("$BOOTSTRAP_GO" env GOARCH)"
    say "fetching $module (about 70 MB) from the Go module proxy"
    tmp=$(mktemp -d)
    # -modcacherw: the module cache is writable, so that rm can remove it
    GOPATH="$tmp/gopath" GOMODCACHE="$tmp/mod" GOFLAGS=-modcacherw "$BOOTSTRAP_GO" mod download -json "$module" \
      >"$tmp/download.json" || die "fetching $module failed: $(grep -o '"Error": ".*"' "$tmp/download.json" || true)"
    dir=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' "$tmp/download.json")
    [ -x "$dir/bin/go" ] || [ -f "$dir/bin/go" ] || die "$module has no bin/go in $dir"
    rm -rf "$goroot.tmp" && cp -a "$dir" "$goroot.tmp" && chmod -R u+w "$goroot.tmp"
    # A module zip keeps no execute bits: set them as `go` does for its toolchains.
    chmod +x "$goroot.tmp"/bin/* "$goroot.tmp"/pkg/tool/*/*
    mv "$goroot.tmp" "$goroot"; rm -rf "$tmp"
  fi
  version=$("$goroot/bin/go" env GOVERSION)
  say "installed $version in $goroot"
else
  say "using $version at $goroot (at least Go $GO_MIN)"
fi
[ "$(readlink "$LAB_CACHE/go" 2>/dev/null)" = "$goroot" ] || ln -sfn "$goroot" "$LAB_CACHE/go"
echo "$goroot"
