#!/bin/sh
# Starts PostgreSQL (data inside the container: the lab reseeds each run),
# then FerretDB in the foreground; stops PostgreSQL when FerretDB exits.
# fsync and synchronous_commit stay on (PostgreSQL's defaults): FerretDB's
# writes are durable as MongoDB's journaled ones, so the store benchmark
# compares like with like.
set -eu
PGBIN=/usr/lib/postgresql/15/bin
PGDATA=/var/lib/postgresql/lab
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  install -d -o postgres -g postgres "$PGDATA"
  su postgres -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync" >/dev/null
fi
install -d -o postgres -g postgres /run/postgresql
su postgres -c "$PGBIN/pg_ctl -D $PGDATA -w -l /var/lib/postgresql/pg.log \
  -o '-c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_buffers=128MB' start" >/dev/null
trap 'su postgres -c "$PGBIN/pg_ctl -D $PGDATA -m fast stop" >/dev/null' EXIT TERM INT
# GIN indexes for GridFS lookups, which FerretDB's own indexes cannot serve
su postgres -c "$PGBIN/psql -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -d postgres -f /usr/local/share/gridfs-indexes.sql" >/dev/null
/usr/local/bin/ferretdb --listen-addr=0.0.0.0:27017 --handler=postgresql \
  --postgresql-url=postgres://postgres@127.0.0.1:5432/postgres --telemetry=disable \
  --state-dir=/tmp --log-level=warn &
wait $!
