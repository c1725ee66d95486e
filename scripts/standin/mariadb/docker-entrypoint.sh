#!/bin/bash
# Entrypoint of idem-standin/mariadb:10.11. It follows the contract of the
# official mysql and mariadb images for the parts tests use (MARIADB_* wins
# over MYSQL_*):
#   MARIADB_ROOT_PASSWORD / MYSQL_ROOT_PASSWORD,
#   MARIADB_ALLOW_EMPTY_ROOT_PASSWORD / MYSQL_ALLOW_EMPTY_PASSWORD,
#   MARIADB_ROOT_HOST / MYSQL_ROOT_HOST (default %),
#   MARIADB_DATABASE / MYSQL_DATABASE, MARIADB_USER / MYSQL_USER,
#   MARIADB_PASSWORD / MYSQL_PASSWORD (the user gets ALL on the database),
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz,
#   arguments starting with "-" are passed to mariadbd.
# On a fresh data directory it runs mariadb-install-db, starts a temporary
# server without networking to create users and the database, stops it, then
# execs mariadbd as PID 1 (bound to 0.0.0.0, --skip-name-resolve).
set -Eeuo pipefail

# The shared functions (log, die, server_command, run_init_scripts, the
# mysql_* and mariadb_* helpers): scripts/standin/lib.sh.
. /usr/local/lib/idem-standin/lib.sh

server_command mysql mariadbd mysqld -- "$@"
set -- "${cmd[@]}"

temp_args=()
mariadb_env

if [[ ! -d $datadir/mysql ]]; then
	mariadb_initialize "$@"
	log "MariaDB init process done. Ready for start up."
fi

exec "$@"
