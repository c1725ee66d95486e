// Package integration holds idem's tests against real database servers in
// containers (github.com/testcontainers/testcontainers-go), in a module of
// their own so that a service importing idem never gets testcontainers,
// moby or containerd in its module graph. Package containers starts the
// servers and clusters; the directories beside it run the conformance and
// HTTP suites, and the backend-specific tests, on PostgreSQL and
// MySQL/MariaDB (postgres, mysql), on a three-node MariaDB Galera cluster
// (galera), and through a PostgreSQL failover (pgfailover).
package integration
