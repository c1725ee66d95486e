#!/bin/sh
# Entrypoint of idem-standin/patroni:4. The first argument is the role:
#
#   etcd      a one-member etcd on 2379 (clients) and 2380 (peers); the
#             cluster's DCS. ETCD_ADVERTISE: the name clients use (default
#             etcd).
#   patroni   a PostgreSQL 17 node managed by Patroni, its REST API on 8008:
#             PATRONI_NAME (required; also its address on the network),
#             PATRONI_ETCD (default etcd:2379), PATRONI_PASSWORD (required:
#             of the superuser postgres and the user replicator),
#             PATRONI_TTL (default 20), PATRONI_LOOP_WAIT (default 1),
#             PATRONI_SYNCHRONOUS (default true: synchronous_mode),
#             PATRONI_PRE_PROMOTE (default none: Patroni's pre_promote, a
#             command run once the node holds the leader key and before
#             it promotes its PostgreSQL; "sleep 3" widens the moment
#             when GET /primary answers 200 on a server still in recovery).
#             The first node to reach etcd runs initdb; the others clone it.
#   haproxy   HAProxy on 5000, sending connections to whichever of
#             HAPROXY_NODES (names, space-separated, required) Patroni's
#             REST API calls the primary (GET /primary answers 200), checked
#             every 500 ms; connections to a node marked down are shut.
#
# Any other command is run as is.
set -eu

role=${1:-patroni}
case "$role" in
etcd)
	exec etcd --name etcd --data-dir /tmp/etcd \
		--listen-client-urls http://0.0.0.0:2379 \
		--advertise-client-urls "http://${ETCD_ADVERTISE:-etcd}:2379" \
		--listen-peer-urls http://0.0.0.0:2380 \
		--initial-advertise-peer-urls "http://${ETCD_ADVERTISE:-etcd}:2380" \
		--initial-cluster "etcd=http://${ETCD_ADVERTISE:-etcd}:2380"
	;;
patroni)
	: "${PATRONI_NAME:?set PATRONI_NAME}"
	: "${PATRONI_PASSWORD:?set PATRONI_PASSWORD}"
	cat >/etc/idem/patroni.yml <<YAML
scope: idem
name: ${PATRONI_NAME}
restapi:
  listen: 0.0.0.0:8008
  connect_address: ${PATRONI_NAME}:8008
etcd3:
  hosts: ${PATRONI_ETCD:-etcd:2379}
bootstrap:
  dcs:
    ttl: ${PATRONI_TTL:-20}
    loop_wait: ${PATRONI_LOOP_WAIT:-1}
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    synchronous_mode: ${PATRONI_SYNCHRONOUS:-true}
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 200
        wal_level: replica
        hot_standby: "on"
        wal_keep_size: 256MB
        max_wal_senders: 10
        max_replication_slots: 10
        wal_log_hints: "on"
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
  pg_hba:
    - local all all trust
    - host replication replicator 0.0.0.0/0 scram-sha-256
    - host all all 0.0.0.0/0 scram-sha-256
postgresql:
  listen: 0.0.0.0:5432
  connect_address: ${PATRONI_NAME}:5432
  data_dir: /var/lib/postgresql/data
  bin_dir: /usr/lib/postgresql/17/bin
  pgpass: /tmp/pgpass
  authentication:
    superuser:
      username: postgres
      password: ${PATRONI_PASSWORD}
    replication:
      username: replicator
      password: ${PATRONI_PASSWORD}
  parameters:
    unix_socket_directories: /run/postgresql
YAML
	if [ -n "${PATRONI_PRE_PROMOTE:-}" ]; then
		printf '  pre_promote: %s\n' "$PATRONI_PRE_PROMOTE" >>/etc/idem/patroni.yml
	fi
	exec patroni /etc/idem/patroni.yml
	;;
haproxy)
	: "${HAPROXY_NODES:?set HAPROXY_NODES}"
	{
		echo "global"
		echo "  maxconn 1000"
		echo "defaults"
		echo "  mode tcp"
		echo "  timeout connect 2s"
		echo "  timeout client 30m"
		echo "  timeout server 30m"
		echo "  timeout check 2s"
		echo "listen primary"
		echo "  bind *:5000"
		echo "  option httpchk GET /primary"
		echo "  http-check expect status 200"
		echo "  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions init-addr last,libc,none"
		for n in $HAPROXY_NODES; do
			echo "  server $n $n:5432 maxconn 200 check port 8008"
		done
	} >/etc/idem/haproxy.cfg
	exec haproxy -W -db -f /etc/idem/haproxy.cfg
	;;
*)
	exec "$@"
	;;
esac
