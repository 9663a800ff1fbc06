#!/bin/sh
# Writes the nginx directives that depend on the environment, which nginx
# cannot read itself, then runs nginx in the foreground (worker_processes
# from NGINX_WORKERS, as nginx-static):
#   CACHE_UPSTREAM  host:port of the GridFS path in front of which the cache
#                   sits (default nginx-gridfs:8080)
#   CACHE_SIZE      the cache tmpfs size (e.g. 256m); nginx's max_size is
#                   9/10 of it, leaving room for files being written
# NGINX_CACHE_CONF and NGINX_CACHE_DIR move the written file and the cache
# (tests); NGINX_CACHE_WRITE_ONLY=1 stops after writing.
set -eu
fail() { echo "nginx-cache: $*" >&2; exit 2; }

upstream=${CACHE_UPSTREAM:-nginx-gridfs:8080}
host=${upstream%:*}
port=${upstream##*:}
case $upstream in
  *:*) ;;
  *) fail "CACHE_UPSTREAM=$upstream is not host:port (e.g. nginx-gridfs:8080)" ;;
esac
case $host in
  '' | *[!A-Za-z0-9._-]* | -* | .*) fail "CACHE_UPSTREAM=$upstream: '$host' is not a host name" ;;
esac
case $port in
  '' | *[!0-9]*) fail "CACHE_UPSTREAM=$upstream: '$port' is not a port number" ;;
esac
{ [ "$port" -ge 1 ] && [ "$port" -le 65535 ]; } || fail "CACHE_UPSTREAM=$upstream: port $port is out of range"

size=${CACHE_SIZE:-256m}
number=${size%[kKmMgG]}
case $number in
  '' | *[!0-9]*) fail "CACHE_SIZE=$size is not a size such as 256m (k, m or g)" ;;
esac
case $size in
  *[kK]) kib=$number ;;
  *[mM]) kib=$((number * 1024)) ;;
  *[gG]) kib=$((number * 1024 * 1024)) ;;
  *) kib=$((number / 1024)) ;;
esac
[ "$kib" -ge 2048 ] || fail "CACHE_SIZE=$size is below the 2m minimum"
max_kib=$((kib * 9 / 10))

conf=${NGINX_CACHE_CONF:-/tmp/cache-env.conf}
cache_dir=${NGINX_CACHE_DIR:-/var/cache/nginx-cache}
cat >"$conf" <<CONF
proxy_cache_path $cache_dir levels=1:2 keys_zone=files:8m max_size=${max_kib}k inactive=1d use_temp_path=off;
upstream cache_upstream {
    server $host:$port max_fails=0;
    keepalive 16;
}
CONF
[ -n "${NGINX_CACHE_WRITE_ONLY:-}" ] && exit 0
# nginx resolves the upstream once, at start, and refuses to start if it
# cannot: wait for the name (compose may start this container first).
if command -v getent >/dev/null; then
  waited=0
  until getent hosts "$host" >/dev/null; do
    [ "$waited" -lt 60 ] || fail "CACHE_UPSTREAM=$upstream: host '$host' did not resolve within 60 s"
    sleep 1
    waited=$((waited + 1))
  done
fi
exec nginx -e stderr -g "daemon off; worker_processes ${NGINX_WORKERS:-1};"
