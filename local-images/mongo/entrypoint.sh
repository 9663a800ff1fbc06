#!/bin/sh
# Starts PostgreSQL (data inside the container: the lab reseeds each run),
# then FerretDB in the foreground; stops PostgreSQL when FerretDB exits.
# fsync and synchronous_commit stay on (PostgreSQL's defaults): FerretDB's
# writes are durable as MongoDB's journaled ones, so the store benchmark
# compares like with like.
# MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD, as the official
# image takes them: clients must log in as that user (FerretDB 1.x hands a
# PLAIN login to PostgreSQL as that role's); unset, anyone may connect.
set -eu
PGBIN=/usr/lib/postgresql/15/bin
PGDATA=/var/lib/postgresql/lab
user=${MONGO_INITDB_ROOT_USERNAME:-} password=${MONGO_INITDB_ROOT_PASSWORD:-}
if { [ -n "$user" ] || [ -n "$password" ]; } && { [ -z "$user" ] || [ -z "$password" ]; }; then
  echo "mongo: error: set both MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD, or neither" >&2
  exit 1
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  install -d -o postgres -g postgres "$PGDATA"
  su postgres -c "$PGBIN/initdb -D $PGDATA -A trust -U postgres -E UTF8 --locale=C.UTF-8 --no-sync" >/dev/null
fi
# The Unix socket stays trusted (only this entrypoint uses it); FerretDB's TCP
# connections need the login's password when there is one.
tcp_auth=trust
[ -n "$user" ] && tcp_auth=scram-sha-256
printf 'local all all trust\nhost all all 127.0.0.1/32 %s\nhost all all ::1/128 %s\n' "$tcp_auth" "$tcp_auth" \
  >"$PGDATA/pg_hba.conf"
install -d -o postgres -g postgres /run/postgresql
su postgres -c "$PGBIN/pg_ctl -D $PGDATA -w -l /var/lib/postgresql/pg.log \
  -o '-c listen_addresses=127.0.0.1 -c max_connections=300 -c shared_buffers=128MB' start" >/dev/null
trap 'su postgres -c "$PGBIN/pg_ctl -D $PGDATA -m fast stop" >/dev/null' EXIT TERM INT
psql() { su postgres -c "$PGBIN/psql -q -v ON_ERROR_STOP=1 -h /run/postgresql -d postgres $*" >/dev/null; }
# GIN indexes for GridFS lookups, which FerretDB's own indexes cannot serve
psql -f /usr/local/share/gridfs-indexes.sql
if [ -n "$user" ]; then
  # the role FerretDB logs in as for the client: its own schemas in the postgres database
  export LAB_USER="$user" LAB_PASSWORD="$password"
  psql <<'SQL'
\getenv user LAB_USER
\getenv password LAB_PASSWORD
SELECT format('CREATE ROLE %I', :'user') WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'user')\gexec
ALTER ROLE :"user" LOGIN PASSWORD :'password';
GRANT CREATE ON DATABASE postgres TO :"user";
SQL
  # no user of its own: a client that does not log in is refused by PostgreSQL
  url=postgres://127.0.0.1:5432/postgres
else
  url=postgres://postgres@127.0.0.1:5432/postgres
fi
/usr/local/bin/ferretdb --listen-addr=0.0.0.0:27017 --handler=postgresql \
  --postgresql-url="$url" --telemetry=disable \
  --state-dir=/tmp --log-level=warn &
wait $!
