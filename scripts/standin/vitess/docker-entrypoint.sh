#!/bin/bash
# Entrypoint of idem-standin/vitess:0.24, after the official
# vitess/vttestserver image's run.sh: the same environment, the same ports.
#   PORT               vtcombo's base port (default 33574): vtcombo's web
#                      port; +1 its gRPC port, +2 mysqld's, +3 vtgate's
#                      MySQL protocol port, the one clients use
#   KEYSPACES          keyspaces, comma-separated (default idem)
#   NUM_SHARDS         shards of each keyspace, comma-separated (default 2)
#   MYSQL_BIND_HOST    where vtgate's MySQL port listens (default 127.0.0.1;
#                      0.0.0.0 to reach it from outside the container)
#   VTCOMBO_BIND_HOST  where vtcombo's ports listen (default 127.0.0.1)
#   MYSQL_MAX_CONNECTIONS  mysqld's max_connections (default 1000)
#   MYSQL_SERVER_VERSION   the version vtgate reports (default 8.4.6-Vitess)
#   CHARSET, FOREIGN_KEY_MODE, ENABLE_ONLINE_DDL, ENABLE_DIRECT_DDL,
#   PLANNER_VERSION, TABLET_REFRESH_INTERVAL  as run.sh passes them
# A keyspace of more than one shard gets a VSchema of {"sharded": true} and
# nothing else, as run.sh makes it: clients add tables and vindexes with
# ALTER VSCHEMA (every user may). Arguments that start with "-" are added to
# vttestserver's (the official image takes none); any other command is run
# instead.
set -euo pipefail

if [[ $# -gt 0 && ${1:0:1} != - ]]; then
	exec "$@"
fi
: "${PORT:=33574}" "${KEYSPACES:=idem}" "${NUM_SHARDS:=2}"

IFS=, read -ra keyspaces <<<"$KEYSPACES"
IFS=, read -ra shards <<<"$NUM_SHARDS"
if [[ ${#keyspaces[@]} -ne ${#shards[@]} ]]; then
	echo "KEYSPACES ($KEYSPACES) and NUM_SHARDS ($NUM_SHARDS) differ in length" >&2
	exit 1
fi
for i in "${!keyspaces[@]}"; do
	mkdir -p "/vt/schema/${keyspaces[$i]}"
	if [[ ${shards[$i]} -gt 1 ]]; then
		printf '{\n\t"sharded": true\n}\n' >"/vt/schema/${keyspaces[$i]}/vschema.json"
	fi
done
echo "max_connections = ${MYSQL_MAX_CONNECTIONS:-1000}" >>/vt/config/mycnf/test-suite.cnf

exec vttestserver \
	--port "$PORT" \
	--keyspaces "$KEYSPACES" \
	--num_shards "$NUM_SHARDS" \
	--mysql_bind_host "${MYSQL_BIND_HOST:-127.0.0.1}" \
	--vtcombo-bind-host "${VTCOMBO_BIND_HOST:-127.0.0.1}" \
	--mysql-server-version "${MYSQL_SERVER_VERSION:-8.4.6-Vitess}" \
	--charset "${CHARSET:-utf8mb4}" \
	--foreign_key_mode "${FOREIGN_KEY_MODE:-allow}" \
	--enable_online_ddl="${ENABLE_ONLINE_DDL:-true}" \
	--enable_direct_ddl="${ENABLE_DIRECT_DDL:-true}" \
	--planner-version="${PLANNER_VERSION:-gen4}" \
	--vschema_ddl_authorized_users=% \
	--tablet_refresh_interval "${TABLET_REFRESH_INTERVAL:-10s}" \
	--schema_dir=/vt/schema/ \
	"$@"
