# scripts/standin/lib.sh — the shell the stand-in entrypoints share, sourced
# by them from /usr/local/lib/idem-standin/lib.sh (each Dockerfile copies it
# there). It defines functions only; what runs is the entrypoint's.
#
# The MySQL-family helpers (mysql_*) read these globals, which the entrypoint
# sets (mariadb_env and mysql_defaults set some): datadir, socket, root_password, root_host, database, user, password,
# and client (the command line of the client on the temporary server).

log() { printf '%s [entrypoint] %s\n' "$(date -u '+%Y-%m-%d %H:%M:%S UTC')" "$*"; }
die() { log "error: $*" >&2; exit 1; }

# server_command USER SERVER [NAME...] -- ARG...: what the container runs,
# as the official images decide it: with no ARGs, or ARGs that start with
# "-", SERVER with those ARGs; a command named SERVER or one of the NAMEs as
# it is; any other command is exec'ed at once. The result is in the global
# array cmd (set -- "${cmd[@]}" makes it the entrypoint's arguments). The
# server refuses to run as root; the image runs as USER.
server_command() {
	local user=$1 server=$2 names=() name
	shift 2
	while [[ $1 != -- ]]; do names+=("$1"); shift; done
	shift
	if [[ $# -eq 0 || ${1:0:1} == '-' ]]; then
		set -- "$server" "$@"
	fi
	for name in "$server" "${names[@]}"; do
		if [[ $1 == "$name" ]]; then
			[[ $(id -u) -ne 0 ]] || die "run as the $user user (the image's default USER), not root"
			cmd=("$@")
			return
		fi
	done
	exec "$@"
}

# run_init_scripts CMD...: run /docker-entrypoint-initdb.d/* in name order,
# as the official images do: *.sh executed (or sourced when not executable),
# *.sql and *.sql.gz fed to CMD on its standard input, anything else ignored.
run_init_scripts() {
	local f
	shopt -s nullglob
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh)
			log "running $f"
			if [[ -x $f ]]; then "$f"; else . "$f"; fi
			;;
		*.sql) log "running $f"; "$@" <"$f" ;;
		*.sql.gz) log "running $f"; gunzip -c "$f" | "$@" ;;
		*) log "ignoring $f" ;;
		esac
	done
	shopt -u nullglob
}

# sql_str quotes a string literal, sql_id an identifier (MySQL and MariaDB).
sql_str() { local s=${1//\\/\\\\}; s=${s//\'/\\\'}; printf "'%s'" "$s"; }
sql_id() { printf '`%s`' "${1//\`/\`\`}"; }

# mysql_defaults sets the data directory and the socket of the MySQL-family
# images.
mysql_defaults() {
	datadir=/var/lib/mysql
	socket=/run/mysqld/mysqld.sock
}

# mariadb_env reads the mariadb contract into the globals (MARIADB_* wins
# over MYSQL_*), datadir and socket included.
mariadb_env() {
	mysql_defaults
	root_password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
	allow_empty=${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-${MYSQL_ALLOW_EMPTY_PASSWORD:-}}
	root_host=${MARIADB_ROOT_HOST:-${MYSQL_ROOT_HOST:-%}}
	database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
	user=${MARIADB_USER:-${MYSQL_USER:-}}
	password=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}
}

# mariadb_initialize SERVER [ARG...]: make a fresh data directory as the
# official mariadb image does: mariadb-install-db, then a temporary server
# (SERVER with ARGs and the global array temp_args) without networking to
# set up the accounts and the database and run the init scripts.
mariadb_initialize() {
	if [[ -z $root_password && -z $allow_empty ]]; then
		die "database is uninitialized and password option is not specified: set one of MARIADB_ROOT_PASSWORD, MYSQL_ROOT_PASSWORD, MARIADB_ALLOW_EMPTY_ROOT_PASSWORD or MYSQL_ALLOW_EMPTY_PASSWORD"
	fi
	if [[ $user == root ]]; then
		die "MYSQL_USER/MARIADB_USER=root: root is created by the image; use the root password variables instead"
	fi
	if [[ -n $user && -z $password ]]; then
		die "MYSQL_USER/MARIADB_USER is set but MYSQL_PASSWORD/MARIADB_PASSWORD is empty"
	fi

	log "initializing database files in $datadir"
	local out
	if ! out=$(mariadb-install-db --datadir="$datadir" --skip-test-db \
		--auth-root-authentication-method=normal --skip-name-resolve \
		--default-time-zone=SYSTEM --skip-log-bin 2>&1); then
		printf '%s\n' "$out" >&2
		die "mariadb-install-db failed"
	fi
	log "database files initialized"

	client=(mariadb --no-defaults --protocol=socket --socket="$socket" -uroot)
	"$@" --skip-networking --socket="$socket" --skip-log-bin "${temp_args[@]}" \
		--loose-innodb-buffer-pool-load-at-startup=0 --loose-innodb-buffer-pool-dump-at-shutdown=0 &
	local pid=$!
	mysql_wait "$pid"
	mysql_accounts mariadb | "${client[@]}"
	log "users and database created"
	mysql_init_scripts
	mysql_stop "$pid"
}

# mysql_wait PID: wait up to 60 s for the temporary server PID to answer
# the client; fail if it exits first.
mysql_wait() {
	local i
	for i in $(seq 1 120); do
		"${client[@]}" -e 'SELECT 1' >/dev/null 2>&1 && break
		kill -0 "$1" 2>/dev/null || die "temporary server exited during startup"
		[[ $i -lt 120 ]] || die "temporary server did not start in 60 s"
		sleep 0.5
	done
	log "temporary server started"
}

# mysql_accounts [mariadb] prints the SQL that sets root's password, adds
# root at root_host, and creates the database and the user with ALL on it;
# with "mariadb" it first drops the accounts other than the local ones
# mariadb-install-db made. The session does not write the binary log and
# reads backslash escapes, as sql_str writes them.
mysql_accounts() {
	echo "SET @@SESSION.SQL_LOG_BIN = 0;"
	echo "SET @@SESSION.SQL_MODE = REPLACE(@@SESSION.SQL_MODE, 'NO_BACKSLASH_ESCAPES', '');"
	if [[ ${1:-} == mariadb ]]; then
		# Keep only the local accounts mariadb-install-db made; drop anonymous users.
		echo "DELETE FROM mysql.global_priv WHERE User = '' OR (User = 'root' AND Host <> 'localhost');"
		echo "DELETE FROM mysql.proxies_priv WHERE Host <> 'localhost';"
		echo "FLUSH PRIVILEGES;"
	fi
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
}

# mysql_init_scripts runs the init scripts as root, in the database if one
# was named.
mysql_init_scripts() {
	local dbarg=()
	[[ -z $database ]] || dbarg=("$database")
	run_init_scripts env MYSQL_PWD="$root_password" "${client[@]}" "${dbarg[@]}"
}

# mysql_stop PID: stop the temporary server and wait for it.
mysql_stop() {
	kill -TERM "$1"
	wait "$1" || die "temporary server did not stop cleanly"
}
