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

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*"; }
die() { log "error: $*" >&2; exit 1; }

if [[ $# -eq 0 || ${1:0:1} == '-' ]]; then
	set -- mariadbd "$@"
fi
case "$1" in
mariadbd | mysqld) ;;
*) exec "$@" ;;
esac

[[ $(id -u) -ne 0 ]] || die "run as the mysql user (the image's default USER), not root"

datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock

root_password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
allow_empty=${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-${MYSQL_ALLOW_EMPTY_PASSWORD:-}}
root_host=${MARIADB_ROOT_HOST:-${MYSQL_ROOT_HOST:-%}}
database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
user=${MARIADB_USER:-${MYSQL_USER:-}}
password=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}

# sql_str quotes a string literal, sql_id an identifier.
sql_str() { local s=${1//\\/\\\\}; s=${s//\'/\\\'}; printf "'%s'" "$s"; }
sql_id() { printf '`%s`' "${1//\`/\`\`}"; }

if [[ ! -d $datadir/mysql ]]; then
	if [[ -z $root_password && -z $allow_empty ]]; then
		die "database is uninitialized and password option is not specified: set one of MARIADB_ROOT_PASSWORD, MYSQL_ROOT_PASSWORD, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD or MYSQL_ALLOW_EMPTY_PASSWORD"
	fi
	if [[ $user == root ]]; then
		die "MYSQL_USER/MARIADB_USER=root: root is created by the image; use the root password variables instead"
	fi

	log "initializing database files in $datadir"
	if ! out=$(mariadb-install-db --datadir="$datadir" --skip-test-db \
		--auth-root-authentication-method=normal --skip-name-resolve \
		--default-time-zone=SYSTEM --skip-log-bin 2>&1); then
		printf '%s\n' "$out" >&2
		die "mariadb-install-db failed"
	fi
	log "database files initialized"

	# Temporary server: no TCP, so nothing outside sees it as ready.
	"$@" --skip-networking --socket="$socket" --skip-log-bin \
		--loose-innodb-buffer-pool-load-at-startup=0 --loose-innodb-buffer-pool-dump-at-shutdown=0 &
	pid=$!
	client=(mariadb --no-defaults --protocol=socket --socket="$socket" -uroot)
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
		# Keep only the local accounts mariadb-install-db made; drop anonymous users.
		echo "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host <> 'localhost');"
		echo "DELETE FROM mysql.proxies_priv WHERE Host <> 'localhost';"
		echo "FLUSH PRIVILEGES;"
		echo "ALTER USER 'root'@'localhost' IDENTIFIED BY $(sql_str "$root_password");"
		if [[ $root_host != localhost ]]; then
			echo "CREATE USER 'root'@$(sql_str "$root_host") IDENTIFIED BY $(sql_str "$root_password");"
			echo "GRANT ALL ON *.* TO 'root'@$(sql_str "$root_host") WITH GRANT OPTION;"
		fi
		if [[ -n $database ]]; then
			echo "CREATE DATABASE IF NOT EXISTS $(sql_id "$database");"
		fi
		if [[ -n $user ]]; then
			[[ -n $password ]] || die "MYSQL_USER/MARIADB_USER is set but MYSQL_PASSWORD/MARIADB_PASSWORD is empty"
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
	log "MariaDB init process done. Ready for start up."
fi

exec "$@"
