#!/bin/bash
# Entrypoint of idem-standin/mysql:9.7 (Oracle MySQL). It follows the
# contract of the official mysql image for the parts tests use:
#   MYSQL_ROOT_PASSWORD, or MYSQL_ALLOW_EMPTY_PASSWORD=yes, or
#   MYSQL_RANDOM_ROOT_PASSWORD=yes (printed as "GENERATED ROOT PASSWORD: ..."):
#     one of them is required on a fresh data directory,
#   MYSQL_ROOT_HOST (default %: root may log in over TCP with the password),
#   MYSQL_DATABASE, MYSQL_USER and MYSQL_PASSWORD (the user gets ALL on the
#     database; root is not a valid MYSQL_USER),
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz,
#   arguments starting with "-" are passed to mysqld (e.g. --max-connections=500);
#   any other command is run as is.
# Not supported: the *_FILE variants, MYSQL_ONETIME_PASSWORD, time zone
# tables (named time zones do not work; offsets and SYSTEM do).
# On a fresh data directory it runs mysqld --initialize-insecure, starts a
# temporary server without networking to set the passwords and create the
# database and user, stops it, then execs mysqld as PID 1, listening on 3306
# (and X protocol on 33060) on all addresses.
set -Eeuo pipefail

# The shared functions (log, die, server_command, run_init_scripts, the
# mysql_* and mariadb_* helpers): scripts/standin/lib.sh.
. /usr/local/lib/idem-standin/lib.sh

server_command mysql mysqld -- "$@"
set -- "${cmd[@]}"

mysql_defaults
root_password=${MYSQL_ROOT_PASSWORD:-}
root_host=${MYSQL_ROOT_HOST:-%}
database=${MYSQL_DATABASE:-}
user=${MYSQL_USER:-}
password=${MYSQL_PASSWORD:-}

if [[ ! -d $datadir/mysql ]]; then
	if [[ -z $root_password && -z ${MYSQL_ALLOW_EMPTY_PASSWORD:-} && -z ${MYSQL_RANDOM_ROOT_PASSWORD:-} ]]; then
		die "database is uninitialized and password option is not specified: set one of MYSQL_ROOT_PASSWORD, MYSQL_ALLOW_EMPTY_PASSWORD or MYSQL_RANDOM_ROOT_PASSWORD"
	fi
	if [[ $user == root ]]; then
		die "MYSQL_USER=root: root is created by the image; use the root password variables instead"
	fi
	if [[ -n $user && -z $password ]]; then
		die "MYSQL_USER is set but MYSQL_PASSWORD is empty"
	fi
	if [[ -z $root_password && -n ${MYSQL_RANDOM_ROOT_PASSWORD:-} ]]; then
		root_password=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
		log "GENERATED ROOT PASSWORD: $root_password"
	fi

	log "initializing database files in $datadir"
	if ! out=$("$@" --initialize-insecure --datadir="$datadir" --default-time-zone=SYSTEM 2>&1); then
		printf '%s\n' "$out" >&2
		die "mysqld --initialize-insecure failed"
	fi
	log "database files initialized"

	# Temporary server: no TCP (classic or X protocol), so nothing outside
	# sees it as ready.
	client=(mysql --no-defaults --protocol=socket --socket="$socket" -uroot)
	"$@" --skip-networking --mysqlx=OFF --socket="$socket" --default-time-zone=SYSTEM &
	pid=$!
	mysql_wait "$pid"
	mysql_accounts | "${client[@]}"
	log "users and database created"
	mysql_init_scripts
	mysql_stop "$pid"
	log "MySQL init process done. Ready for start up."
fi

exec "$@"
