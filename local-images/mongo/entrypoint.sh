#!/bin/sh
# Starts PostgreSQL (data inside the container: the lab reseeds each run),
# then FerretDB in the foreground; stops PostgreSQL when FerretDB exits.
set -eu
PGBIN=/usr/lib/postgresql/15/bin
PGDATA=/var/lib/postgresql/lab
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  install -d -o postgres -g postgres "$PGDATA"
  su postgres -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync" >/dev/null
fi
install -d -o postgres -g postgres /run/postgresql
su postgres -c "$PGBIN/pg_ctl -D $PGDATA -w -l /var/lib/postgresql/pg.log \
  -o '-c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=300 -c shared_buffers=128MB' start" >/dev/null
trap 'su postgres -c "$PGBIN/pg_ctl -D $PGDATA -m fast stop" >/dev/null' EXIT TERM INT
/usr/local/bin/ferretdb --listen-addr=0.0.0.0:27017 --handler=postgresql \
  --postgresql-url=postgres://postgres@127.0.0.1:5432/postgres --telemetry=disable \
  --state-dir=/tmp --log-level=warn &
wait $!
