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

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*"; }
die() { log "error: $*" >&2; exit 1; }

if [[ $# -eq 0 || ${1:0:1} == '-' ]]; then
	set -- mysqld "$@"
fi
if [[ $1 != mysqld ]]; then
	exec "$@"
fi

[[ $(id -u) -ne 0 ]] || die "run as the mysql user (the image's default USER), not root"

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock

root_password=${MYSQL_ROOT_PASSWORD:-}
root_host=${MYSQL_ROOT_HOST:-%}
database=${MYSQL_DATABASE:-}
user=${MYSQL_USER:-}
password=${MYSQL_PASSWORD:-}

# sql_str quotes a string literal, sql_id an identifier.
sql_str() { local s=${1//\\/\\\\}; s=${s//\'/\\\'}; printf "'%s'" "$s"; }
sql_id() { printf '`%s`' "${1//\`/\`\`}"; }

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
	"$@" --skip-networking --mysqlx=OFF --socket="$socket" --default-time-zone=SYSTEM &
	pid=$!
	client=(mysql --no-defaults --protocol=socket --socket="$socket" -uroot)
	for i in $(seq 1 120); do
		"${client[@]}" -e 'SELECT 1' >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || die "temporary server exited during startup"
		[[ $i -lt 120 ]] || die "temporary server did not start in 60 s"
		sleep 0.5
	done
	log "temporary server started"

	{
		echo "SET @@SESSION.SQL_LOG_BIN = 0;"
		echo "SET @@SESSION.SQL_MODE = REPLACE(@@SESSION.SQL_MODE, 'NO_BACKSLASH_ESCAPES', '');"
		echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sql_str "$root_password");"
		if [[ $root_host != localhost ]]; then
			echo "CREATE USER 'root'@$(sql_str "$root_host") IDENTIFIED BY $(sql_str "$root_password");"
			echo "GRANT ALL ON *.* TO 'root'@$(sql_str "$root_host") WITH GRANT OPTION;"
		fi
		if [[ -n $database ]]; then
			echo "CREATE DATABASE IF NOT EXISTS $(sql_id "$database");"
		fi
		if [[ -n $user ]]; then
			echo "CREATE USER $(sql_str "$user")@'%' IDENTIFIED BY $(sql_str "$password");"
			if [[ -n $database ]]; then
				echo "GRANT ALL ON $(sql_id "$database").* TO $(sql_str "$user")@'%';"
			fi
		fi
	} | "${client[@]}"
	log "users and database created"

	dbarg=()
	[[ -z $database ]] || dbarg=("$database")
	shopt -s nullglob
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			log "running $f"
			if [[ -x $f ]]; then "$f"; else . "$f"; fi
			;;
		*.sql) log "running $f"; MYSQL_PWD=$root_password "${client[@]}" "${dbarg[@]}" <"$f" ;;
		*.sql.gz) log "running $f"; gunzip -c "$f" | MYSQL_PWD=$root_password "${client[@]}" "${dbarg[@]}" ;;
		*) log "ignoring $f" ;;
		esac
	done
	shopt -u nullglob

	kill -TERM "$pid"
	wait "$pid" || die "temporary server did not stop cleanly"
	log "MySQL init process done. Ready for start up."
fi

exec "$@"
