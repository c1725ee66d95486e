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

# The shared functions (log, die, server_command, run_init_scripts, the
# mysql_* and mariadb_* helpers): scripts/standin/lib.sh.
. /usr/local/lib/idem-standin/lib.sh

server_command mysql mariadbd mysqld -- "$@"
set -- "${cmd[@]}"

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

mariadb_env
# The temporary server of a bootstrap node's initialisation runs without
# Galera.
temp_args=(--wsrep-on=OFF)

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
	mariadb_initialize "$@"
	log "MariaDB init process done."
	galera+=(--wsrep-new-cluster)
	log "bootstrapping a new cluster as $node_name ($cluster_address)"
else
	log "empty data directory: joining $cluster_address as $node_name, the state comes from a member"
fi

exec "$1" "${galera[@]}" "${@:2}"
