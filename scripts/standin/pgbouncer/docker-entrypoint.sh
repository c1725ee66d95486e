#!/bin/sh
# Entrypoint of idem-standin/pgbouncer:1.18 and :1.26. It writes
# /etc/pgbouncer/pgbouncer.ini from the environment and runs pgbouncer as
# PID 1 on port 6432, all addresses, logging to stderr:
#   PGBOUNCER_BACKEND            host[:port] of the PostgreSQL server
#                                (default postgres:5432)
#   PGBOUNCER_USER, PGBOUNCER_PASSWORD  the one user (required): clients log
#                                in with it (SCRAM), and PgBouncer logs in to
#                                the server with it; also the admin user of
#                                the console (database pgbouncer)
#   PGBOUNCER_POOL_MODE          session, transaction (default) or statement
#   PGBOUNCER_POOL_SIZE          server connections per database and user
#                                (default 20)
#   PGBOUNCER_MAX_CLIENT_CONN    (default 500)
#   PGBOUNCER_MAX_PREPARED_STATEMENTS  prepared statements PgBouncer tracks
#                                per server connection (1.21 and later; unset
#                                leaves PgBouncer's default: 0 before 1.24,
#                                200 since)
#   PGBOUNCER_DATABASES          more [databases] lines, newline-separated
#                                (every database name is also served as is)
# With arguments, they are run instead, as a command.
set -eu

if [ $# -gt 0 ]; then
	exec "$@"
fi

: "${PGBOUNCER_USER:?set PGBOUNCER_USER}"
: "${PGBOUNCER_PASSWORD:?set PGBOUNCER_PASSWORD}"
backend=${PGBOUNCER_BACKEND:-postgres:5432}
host=${backend%%:*}
port=5432
case "$backend" in *:*) port=${backend##*:} ;; esac

ini=/etc/pgbouncer/pgbouncer.ini
{
	echo "[databases]"
	echo "* = host=$host port=$port"
	if [ -n "${PGBOUNCER_DATABASES:-}" ]; then
		printf '%s\n' "$PGBOUNCER_DATABASES"
	fi
	echo
	echo "[pgbouncer]"
	echo "listen_addr = *"
	echo "listen_port = 6432"
	echo "unix_socket_dir ="
	echo "auth_type = scram-sha-256"
	echo "auth_file = /etc/pgbouncer/userlist.txt"
	echo "admin_users = $PGBOUNCER_USER"
	echo "pool_mode = ${PGBOUNCER_POOL_MODE:-transaction}"
	echo "default_pool_size = ${PGBOUNCER_POOL_SIZE:-20}"
	echo "max_client_conn = ${PGBOUNCER_MAX_CLIENT_CONN:-500}"
	echo "ignore_startup_parameters = extra_float_digits"
	echo "log_connections = 0"
	echo "log_disconnections = 0"
	if [ -n "${PGBOUNCER_MAX_PREPARED_STATEMENTS:-}" ]; then
		echo "max_prepared_statements = $PGBOUNCER_MAX_PREPARED_STATEMENTS"
	fi
} >"$ini"
# A plain password in the auth file serves both sides of SCRAM.
printf '"%s" "%s"\n' "$PGBOUNCER_USER" "$PGBOUNCER_PASSWORD" >/etc/pgbouncer/userlist.txt
chmod 600 /etc/pgbouncer/userlist.txt

exec pgbouncer "$ini"
