#!/bin/bash
# Entrypoint of idem-standin/galera:11.8: one node of a MariaDB 11.8 Galera
# cluster (Galera 4, state snapshot transfers with rsync). Environment:
#
#   GALERA_CLUSTER_ADDRESS  the members, e.g. gcomm://node1,node2,node3 (names
#                           or addresses the nodes reach each other at, this
#                           node may be among them); required, except on a
#                           bootstrap node, where it defaults to gcomm://
#   GALERA_BOOTSTRAP=1      on the one node started first: on a fresh data
#                           directory it initialises it (accounts, database,
#                           init scripts, below) and starts a new cluster
#                           (--wsrep-new-cluster). Start the other nodes once
#                           it accepts connections. With an existing data
#                           directory (a restarted container) the node joins
#                           GALERA_CLUSTER_ADDRESS like any other, so that it
#                           never splits a running cluster in two.
#   GALERA_NODE_NAME        wsrep_node_name (default: the host name)
#   GALERA_NODE_ADDRESS     wsrep_node_address, where the other nodes reach
#                           this one (default: the host name's IPv4 address)
#   GALERA_CLUSTER_NAME     wsrep_cluster_name, the same on every node
#                           (default idem)
#
# The bootstrap node also reads the contract of the mariadb stand-in
# (MARIADB_* wins over MYSQL_*):
#   MARIADB_ROOT_PASSWORD / MYSQL_ROOT_PASSWORD,
#   MARIADB_ALLOW_EMPTY_ROOT_PASSWORD / MYSQL_ALLOW_EMPTY_PASSWORD,
#   MARIADB_ROOT_HOST / MYSQL_ROOT_HOST (default %),
#   MARIADB_DATABASE / MYSQL_DATABASE, MARIADB_USER / MYSQL_USER,
#   MARIADB_PASSWORD / MYSQL_PASSWORD (the user gets ALL on the database),
#   /docker-entrypoint-initdb.d/*.sh|*.sql|*.sql.gz.
# The other nodes ignore them: they start with an empty data directory and
# receive the whole of it, accounts included, from a member (SST) when they
# join; pass every node the same variables.
#
# Settings given to mariadbd: wsrep_on=ON,
# wsrep_provider=/usr/lib/galera/libgalera_smm.so, wsrep_sst_method=rsync,
# binlog_format=ROW, default_storage_engine=InnoDB, innodb_autoinc_lock_mode=2
# and the ones above. Arguments starting with "-" are passed to mariadbd
# after them (so they can override them); any other command is run as is.
# Ports: 3306 SQL, 4567 group communication, 4568 incremental state
# transfer, 4444 state snapshot transfer.
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

bootstrap=0
case "${GALERA_BOOTSTRAP:-}" in
1 | yes | true | on) bootstrap=1 ;;
'' | 0 | no | false | off) ;;
*) die "GALERA_BOOTSTRAP=$GALERA_BOOTSTRAP: use 1 (bootstrap a new cluster) or leave it unset" ;;
esac
cluster_address=${GALERA_CLUSTER_ADDRESS:-}
if [[ -z $cluster_address ]]; then
	[[ $bootstrap -eq 1 ]] || die "set GALERA_CLUSTER_ADDRESS (gcomm://node1,node2,...), or GALERA_BOOTSTRAP=1 on the first node"
	cluster_address=gcomm://
fi
[[ $cluster_address == gcomm://* ]] || die "GALERA_CLUSTER_ADDRESS=$cluster_address does not start with gcomm://"
node_name=${GALERA_NODE_NAME:-$HOSTNAME}
node_address=${GALERA_NODE_ADDRESS:-$(getent ahostsv4 "$HOSTNAME" | awk '{ print $1; exit }')}

root_password=${MARIADB_ROOT_PASSWORD:-${MYSQL_ROOT_PASSWORD:-}}
allow_empty=${MARIADB_ALLOW_EMPTY_ROOT_PASSWORD:-${MYSQL_ALLOW_EMPTY_PASSWORD:-}}
root_host=${MARIADB_ROOT_HOST:-${MYSQL_ROOT_HOST:-%}}
database=${MARIADB_DATABASE:-${MYSQL_DATABASE:-}}
user=${MARIADB_USER:-${MYSQL_USER:-}}
password=${MARIADB_PASSWORD:-${MYSQL_PASSWORD:-}}

# sql_str quotes a string literal, sql_id an identifier.
sql_str() { local s=${1//\\/\\\\}; s=${s//\'/\\\'}; printf "'%s'" "$s"; }
sql_id() { printf '`%s`' "${1//\`/\`\`}"; }

# initialize makes a fresh data directory as the mariadb stand-in does:
# mariadb-install-db, then a temporary server without networking and without
# Galera to set up the accounts and the database.
initialize() {
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
	if ! out=$(mariadb-install-db --datadir="$datadir" --skip-test-db \
		--auth-root-authentication-method=normal --skip-name-resolve \
		--default-time-zone=SYSTEM --skip-log-bin 2>&1); then
		printf '%s\n' "$out" >&2
		die "mariadb-install-db failed"
	fi
	log "database files initialized"

	"$@" --skip-networking --socket="$socket" --skip-log-bin --wsrep-on=OFF \
		--loose-innodb-buffer-pool-load-at-startup=0 --loose-innodb-buffer-pool-dump-at-shutdown=0 &
	local pid=$! i f
	local client=(mariadb --no-defaults --protocol=socket --socket="$socket" -uroot)
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
			echo "CREATE USER $(sql_str "$user")@'%' IDENTIFIED BY $(sql_str "$password");"
			if [[ -n $database ]]; then
				echo "GRANT ALL ON $(sql_id "$database").* TO $(sql_str "$user")@'%';"
			fi
		fi
	} | "${client[@]}"
	log "users and database created"

	local dbarg=()
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
	log "MariaDB init process done."
}

galera=(
	--wsrep-on=ON
	--wsrep-provider=/usr/lib/galera/libgalera_smm.so
	--wsrep-cluster-name="${GALERA_CLUSTER_NAME:-idem}"
	--wsrep-cluster-address="$cluster_address"
	--wsrep-node-name="$node_name"
	--wsrep-sst-method=rsync
	--binlog-format=ROW
	--default-storage-engine=InnoDB
	--innodb-autoinc-lock-mode=2
)
[[ -z $node_address ]] || galera+=(--wsrep-node-address="$node_address")

if [[ -d $datadir/mysql ]]; then
	log "data directory exists: joining $cluster_address as $node_name"
elif [[ $bootstrap -eq 1 ]]; then
	initialize "$@"
	galera+=(--wsrep-new-cluster)
	log "bootstrapping a new cluster as $node_name ($cluster_address)"
else
	log "empty data directory: joining $cluster_address as $node_name, the state comes from a member"
fi

exec "$1" "${galera[@]}" "${@:2}"
