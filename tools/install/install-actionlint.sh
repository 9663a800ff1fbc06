#!/usr/bin/env bash
# Builds actionlint (the linter of GitHub Actions workflows, which checks
# .github/workflows/lab.yml in the tests) from its pinned Go module. Prints
# the binary's path.
exec "$(dirname "$0")/install-go-tool.sh" actionlint github.com/rhysd/actionlint/cmd/actionlint \
  "${ACTIONLINT_VERSION:-v1.7.12}"
