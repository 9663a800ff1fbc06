#!/bin/sh
# The official postgres image's entrypoint, reduced to what its documented
# interface needs: on first start, a cluster in $PGDATA owned by
# $POSTGRES_USER (password $POSTGRES_PASSWORD), database $POSTGRES_DB, remote
# logins by password, /docker-entrypoint-initdb.d run once; then postgres
# in the foreground as the postgres user.
set -eu
if [ "${1#-}" != "$1" ]; then
  set -- postgres "$@"
fi
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups env HOME=/var/lib/postgresql "$@"; }

if [ "$1" = postgres ] && [ "$(id -u)" = 0 ]; then
  install -d -o postgres -g postgres -m 700 "$PGDATA"
  install -d -o postgres -g postgres -m 3777 /var/run/postgresql
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
    auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
    if [ -z "${POSTGRES_PASSWORD:-}" ] && [ "$auth" != trust ]; then
      echo "postgres: error: database is uninitialized and POSTGRES_PASSWORD is not set;" \
           "set it (or POSTGRES_HOST_AUTH_METHOD=trust)" >&2
      exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "${POSTGRES_PASSWORD:-}" >"$pwfile"
    chown postgres "$pwfile"
    # shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of options
    as_postgres initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" \
      --encoding=UTF8 --locale=C.UTF-8 ${POSTGRES_INITDB_ARGS:-} >/dev/null
    rm -f "$pwfile"
    printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"
    # A server on the Unix socket only while the database and init scripts are made.
    as_postgres pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start >/dev/null
    psql() { as_postgres psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" "$@"; }
    if [ "$POSTGRES_DB" != postgres ]; then
      psql --dbname postgres --set db="$POSTGRES_DB" -q <<'SQL'
CREATE DATABASE :"db";
SQL
    fi
    for f in /docker-entrypoint-initdb.d/*; do
      # shellcheck source=/dev/null # whatever init scripts the image is given
      case "$f" in
        *.sql) echo "postgres: running $f"; psql --dbname "$POSTGRES_DB" -f "$f" ;;
        *.sh) echo "postgres: running $f"; . "$f" ;;
      esac
    done
    as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres: initialized $PGDATA (user $POSTGRES_USER, database $POSTGRES_DB)"
  fi
  exec setpriv --reuid=postgres --regid=postgres --init-groups env HOME=/var/lib/postgresql "$@"
fi
exec "$@"
