#!/bin/sh
# Entrypoint of idem-standin/nats:2.10. With no arguments, or arguments that
# start with "-", it runs
#   nats-server -js -sd /data -m 8222 [ARGUMENTS...]
# as PID 1: JetStream on, stored in /data, clients on port 4222 and HTTP
# monitoring (/varz, /jsz, /healthz...) on 8222, on all addresses. The
# arguments come last, so they add to or override these (e.g. --user/--pass,
# -m 0, -p 4223, -c FILE). Any other command is run as is.
set -eu

case "${1:-}" in
'' | -*) set -- nats-server -js -sd /data -m 8222 "$@" ;;
esac
exec "$@"
