#!/bin/sh
# Starts httpd in the foreground with the worker counts from .env, defined
# for httpd.conf: HTTPD_SERVERS processes of HTTPD_THREADS threads each, and
# their product as MaxRequestWorkers (httpd.conf cannot multiply).
# HTTPD_FOREGROUND names the command (`httpd -DFOREGROUND` by default: the
# official image's httpd-foreground first removes a pid file in the
# read-only ServerRoot, which fails; ours is in /tmp, a new tmpfs each start;
# tests run Debian's apache2 with -d/-f); HTTPD_CHECK_ONLY=1 only checks the
# configuration.
set -eu
servers=${HTTPD_SERVERS:-1}
threads=${HTTPD_THREADS:-1250}
for var in HTTPD_SERVERS HTTPD_THREADS; do
  eval "value=\${$var:-}"
  # shellcheck disable=SC2154 # value is set by the eval
  case $value in
    '') ;;
    *[!0-9]* | 0*) echo "httpd-static: $var=$value is not a whole number of at least 1" >&2; exit 2 ;;
  esac
done
if [ "$threads" -gt 2000 ] || [ "$servers" -gt 64 ]; then
  echo "httpd-static: HTTPD_SERVERS=$servers x HTTPD_THREADS=$threads is beyond what one pinned core can use (at most 64 x 2000)" >&2
  exit 2
fi
if [ -n "${HTTPD_FOREGROUND:-}" ]; then
  set -- "$HTTPD_FOREGROUND" "$@"
else
  set -- httpd -DFOREGROUND "$@"
fi
set -- "$@" -C "Define HTTPD_SERVERS $servers" -C "Define HTTPD_THREADS $threads" \
  -C "Define HTTPD_MAX_WORKERS $((servers * threads))"
if [ -n "${HTTPD_CHECK_ONLY:-}" ]; then
  exec "$@" -t
fi
exec "$@"
