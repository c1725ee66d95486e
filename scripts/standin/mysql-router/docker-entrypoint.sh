#!/bin/sh
# Entrypoint of idem-standin/mysql-router:9.7. It writes a static
# configuration and runs mysqlrouter as PID 1, logging to stderr:
#   ROUTER_DESTINATIONS  host:port,... (required): the servers, in order;
#                        classic protocol on port 6446, every connection to
#                        the first that accepts one (first-available), so a
#                        Group Replication primary must come first, and the
#                        member that takes over after it next (the members'
#                        group_replication_member_weight decide that).
# With arguments, they are run instead, as a command.
set -eu

if [ $# -gt 0 ]; then
	exec "$@"
fi
: "${ROUTER_DESTINATIONS:?set ROUTER_DESTINATIONS}"
cat >/etc/idem/router.conf <<CONF
[DEFAULT]
runtime_folder=/tmp/router
data_folder=/tmp/router
logging_folder=

[logger]
level=INFO

[routing:primary]
bind_address=0.0.0.0
bind_port=6446
destinations=${ROUTER_DESTINATIONS}
routing_strategy=first-available
protocol=classic
CONF
exec mysqlrouter --config /etc/idem/router.conf
