#!/usr/bin/env bash
# docs/bench/claim-wait/run.sh [ROUNDS] [SECONDS] [CLIENTS] [SCRIPT...] — what
# the claim's bounded wait and the completion's guard cost on PostgreSQL:
# pgbench runs the SQL scripts in this directory, each a transaction, in
# alternating rounds, and prints transactions per second and the server's
# CPU time per transaction (the container's cgroup v2 or v1 cpu usage).
#
# The claim alone, in BEGIN ... COMMIT (the default SCRIPTs): seed.sql, the
# seed's plain INSERT ... ON CONFLICT DO NOTHING RETURNING, no bound;
# claim.sql, idem's claim, which saves, sets and restores lock_timeout in
# nested subqueries; claim-flat.sql, the same with the save and the set in
# one subquery; restore-only.sql, the seed's INSERT with one set_config in
# its RETURNING.
#
# A claim and its completion (SCRIPTs pair-seed pair-seed-complete
# pair-seed-guarded pair-idem): the seed's claim and UPDATE ... SET
# response, as cmd/idem-bench sends them (seed.go; seed.sql above keeps
# idem's clock expression, so the two seed claims differ in that); the seed's claim and idem's completion (fingerprint and pending
# checks, the expiry kept); the same completion with the guard that fails
# when it updated no row (complete_guarded.sql); idem's claim and guarded
# completion, what idem sends on pgx.
#
# It starts a PostgreSQL container on 127.0.0.1 (IDEM_POSTGRES_IMAGE, default
# idem-standin/postgres:17, synchronous_commit=off so that the statement's
# work, not the fsync, is measured), creates the idem table from
# migrationfiles/golang-migrate/postgres, and removes the container at the
# end. Needs docker, psql and pgbench.
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-3} secs=${2:-8} clients=${3:-2}
shift $(($# < 3 ? $# : 3))
scripts=("$@")
((${#scripts[@]})) || scripts=(seed claim claim-flat restore-only)
image=${IDEM_POSTGRES_IMAGE:-idem-standin/postgres:17}
name=idem-claim-wait-$$
port=${IDEM_CLAIM_WAIT_PORT:-55432}
export PGPASSWORD=pw
docker run -d --rm --name "$name" --label org.idemkit.idem.bench=1 -e POSTGRES_PASSWORD=pw \
	-p "127.0.0.1:$port:5432" "$image" -c synchronous_commit=off -c shared_buffers=512MB >/dev/null
trap 'docker rm -f "$name" >/dev/null' EXIT
for _ in $(seq 60); do
	psql -qAt -h 127.0.0.1 -p "$port" -U postgres -c 'SELECT 1' >/dev/null 2>&1 && break
	sleep 1
done
for f in ../../../migrationfiles/golang-migrate/postgres/*.up.sql; do
	psql -q -h 127.0.0.1 -p "$port" -U postgres -f "$f" >/dev/null 2>&1
done
id=$(docker inspect -f '{{.Id}}' "$name")
stat=$(ls /sys/fs/cgroup/system.slice/docker-"$id".scope/cpu.stat /sys/fs/cgroup/docker/"$id"/cpu.stat \
	/sys/fs/cgroup/unified/docker/"$id"/cpu.stat 2>/dev/null | head -1 || true)
for r in $(seq "$rounds"); do
	for v in "${scripts[@]}"; do
		c0=$(awk '/usage_usec/{print $2}' "$stat")
		if ! out=$(pgbench -n -M prepared -h 127.0.0.1 -p "$port" -U postgres -c "$clients" -j "$clients" -T "$secs" -f "$v.sql" postgres 2>&1); then
			echo "$v: pgbench failed:"; echo "$out"; exit 1
		fi
		c1=$(awk '/usage_usec/{print $2}' "$stat")
		n=$(awk '/number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
		tps=$(awk '/^tps/{printf "%.0f", $3}' <<<"$out")
		echo "round $r $v: $tps tps, server CPU $(((c1 - c0) / n)) µs per transaction"
	done
done
