#!/bin/bash
# Starts gridfs-fuse on /data/gridfs, waits until the mount answers, then
# nginx on it. If either process dies the container exits non-zero, so that
# compose shows a failed path rather than a half-working one. Only this
# script stays root: the daemon drops to FUSE_RUN_AS once mounted, and nginx
# starts as nobody with no capabilities (its workers need none).
set -uo pipefail
mountpoint=/data/gridfs
say() { printf 'entrypoint: %s\n' "$*" >&2; }

# The files open at once, the daemon's cap and nginx's limit_conn alike
# (openfiles.go); 128 is the daemon's own default too.
export FUSE_MAX_OPEN_FILES=${FUSE_MAX_OPEN_FILES:-128}
FUSE_RUN_AS=${FUSE_RUN_AS:-nobody} gridfs-fuse "$mountpoint" &
fuse_pid=$!
# The mount answers once the kernel sees it and a stat of its root returns
# (the root needs no MongoDB, so this works while the database is down).
for _ in $(seq 150); do
  if ! kill -0 "$fuse_pid" 2>/dev/null; then
    wait "$fuse_pid"; status=$?
    say "gridfs-fuse exited with status $status before mounting $mountpoint"
    exit $((status ? status : 1))
  fi
  mountpoint -q "$mountpoint" && timeout 2 stat "$mountpoint" >/dev/null 2>&1 && break
  sleep 0.1
done
if ! mountpoint -q "$mountpoint"; then
  say "gridfs-fuse did not mount $mountpoint within 15 s"
  kill -TERM "$fuse_pid"
  exit 1
fi

# The daemon has mounted, so it accepted FUSE_MAX_OPEN_FILES (digits only,
# 1 to 65535; else it exits at start naming the variable): nginx gets the
# same number.
printf 'limit_conn fuse_files %s;\n' "$FUSE_MAX_OPEN_FILES" > /tmp/fuse-limits.conf
# FUSE_KERNEL_CACHE=off (the daemon accepted it, in any case): every
# request must read GridFS, yet sendfile reads through the page cache, which
# concurrent requests of a file share, and each open's drop of it
# (fuse_open) waited for the pages other requests' reads held locked. So
# nginx reads files of 64 KiB and more with O_DIRECT (the daemon fetches
# smaller ones whole at each open anyway): nothing enters the page cache,
# and nginx reads into its own buffers, in the aio thread pool, instead of
# sendfile. FUSE needs no alignment: nginx's default, 512, costs a Range at
# most 511 bytes read before its start. Two buffers of 256 KiB: a 1 MB
# answer in four reads of one FUSE request each (MaxWrite, main.go), one
# read while the other buffer is sent; at most 64 MiB for
# FUSE_MAX_OPEN_FILES=128. With on: sendfile and the page cache, which the
# row then measures.
kernel_cache=${FUSE_KERNEL_CACHE:-off}
if [ "${kernel_cache,,}" = off ]; then
  printf 'directio 64k;\ndirectio_alignment 512;\noutput_buffers 2 256k;\n' >> /tmp/fuse-limits.conf
fi

# worker_processes from .env (FUSE_NGINX_WORKERS, four on the one core: a
# worker waits out every open of the mount, which may ask MongoDB); `auto`
# would count the host's cores, not the container's cpuset.
# setpriv: a uid change from root clears every capability, and
# no-new-privileges (compose.yaml) keeps them from coming back.
setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=-all \
  nginx -e stderr -g "daemon off; worker_processes ${FUSE_NGINX_WORKERS:-4};" &
nginx_pid=$!

# shellcheck disable=SC2317 # run by the trap below
stop() {
  kill -TERM "$nginx_pid" 2>/dev/null; wait "$nginx_pid"
  kill -TERM "$fuse_pid" 2>/dev/null; wait "$fuse_pid"
  exit 0
}
trap stop TERM INT

wait -n "$fuse_pid" "$nginx_pid"
status=$?
if kill -0 "$nginx_pid" 2>/dev/null; then died=gridfs-fuse; else died=nginx; fi
say "$died exited with status $status; stopping the container"
kill -TERM "$nginx_pid" "$fuse_pid" 2>/dev/null
wait
exit $((status ? status : 1))
