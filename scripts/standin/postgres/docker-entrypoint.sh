#!/bin/bash
# Entrypoint of idem-standin/postgres:15. It follows the contract of the
# official postgres image for the parts tests use:
#   POSTGRES_PASSWORD (required unless POSTGRES_HOST_AUTH_METHOD=trust),
#   POSTGRES_USER (default postgres), POSTGRES_DB (default $POSTGRES_USER),
#   POSTGRES_INITDB_ARGS, POSTGRES_HOST_AUTH_METHOD (default scram-sha-256),
#   PGDATA, /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz,
#   arguments starting with "-" are passed to postgres.
# On a fresh data directory it runs initdb (UTF8), starts a socket-only
# temporary server to create the database and run init scripts, stops it,
# then execs postgres as PID 1 listening on all addresses.
set -Eeuo pipefail

# The shared functions (log, die, server_command, run_init_scripts, the
# mysql_* and mariadb_* helpers): scripts/standin/lib.sh.
. /usr/local/lib/idem-standin/lib.sh

server_command postgres postgres -- "$@"
set -- "${cmd[@]}"

export PGDATA=${PGDATA:-/var/lib/postgresql/data}
POSTGRES_USER=${POSTGRES_USER:-postgres}
POSTGRES_DB=${POSTGRES_DB:-$POSTGRES_USER}
POSTGRES_PASSWORD=${POSTGRES_PASSWORD:-}
auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}

mkdir -p "$PGDATA"
chmod 700 "$PGDATA" 2>/dev/null || true

if [[ ! -s $PGDATA/PG_VERSION ]]; then
	if [[ -z $POSTGRES_PASSWORD && $auth != trust ]]; then
		die "database is uninitialized and superuser password is not specified: set POSTGRES_PASSWORD (or POSTGRES_HOST_AUTH_METHOD=trust)"
	fi

	pwfile=$(mktemp)
	trap 'rm -f "$pwfile"' EXIT
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	pwargs=()
	[[ -z $POSTGRES_PASSWORD ]] || pwargs=(--pwfile="$pwfile")
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a word list, as in the official image
	initdb --username="$POSTGRES_USER" "${pwargs[@]}" --encoding=UTF8 --locale=C.UTF-8 \
		${POSTGRES_INITDB_ARGS:-}
	rm -f "$pwfile"

	{
		echo
		echo "# added by the idem stand-in entrypoint"
		echo "listen_addresses = '*'"
	} >>"$PGDATA/postgresql.conf"
	{
		echo
		echo "# added by the idem stand-in entrypoint"
		echo "host all all all $auth"
	} >>"$PGDATA/pg_hba.conf"

	# Temporary server: Unix socket only, so nothing outside sees it as ready.
	pg_ctl -D "$PGDATA" -w -t 60 -o "-c listen_addresses='' -p ${PGPORT:-5432}" start

	psql_cmd=(psql -X -v ON_ERROR_STOP=1 --no-password --username "$POSTGRES_USER")
	if [[ $POSTGRES_DB != postgres ]]; then
		exists=$("${psql_cmd[@]}" --dbname postgres -tA --set db="$POSTGRES_DB" \
			<<<"SELECT 1 FROM pg_database WHERE datname = :'db';")
		if [[ -z $exists ]]; then
			"${psql_cmd[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db";'
			log "created database $POSTGRES_DB"
		fi
	fi

	run_init_scripts "${psql_cmd[@]}" --dbname "$POSTGRES_DB"

	pg_ctl -D "$PGDATA" -m fast -w stop
	log "PostgreSQL init process complete; ready for start up."
fi

exec "$@"
