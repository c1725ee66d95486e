// Package galera_test runs idem on a three-node MariaDB Galera cluster
// (containers.Galera): the conformance suite with transactions spread over
// the nodes, a claim raced on two nodes (certification failure at COMMIT,
// then a retry and a replay), a claim behind its node's applier (a local
// win refused at COMMIT), causal lookups, and a node cut off from the
// others.
package galera_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

func TestMain(m *testing.M) { containers.Main(m) }

// open returns the shared pool of node with the given DSN parameters.
func open(t *testing.T, node *containers.GaleraNode, params string) *sql.DB {
	t.Helper()
	dsn := node.DSN + "?timeout=5s&readTimeout=30s&writeTimeout=30s"
	if params != "" {
		dsn += "&" + params
	}
	return containers.SharedDB(t, dsn)
}

// newDriver returns a driver on node's pool with the given DSN parameters.
func newDriver(t *testing.T, node *containers.GaleraNode, params string, opts mysql.Options) *mysql.Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := mysql.New(ctx, open(t, node, params), opts)
	if err != nil {
		t.Fatalf("mysql.New on node %s: %v", node.Name, err)
	}
	return d
}

// nodeDrivers returns a driver on every node of the cluster, n1 first.
func nodeDrivers(t *testing.T, params string, opts mysql.Options) []*mysql.Driver {
	t.Helper()
	var ds []*mysql.Driver
	for _, n := range containers.Galera(t).Nodes() {
		ds = append(ds, newDriver(t, n, params, opts))
	}
	return ds
}
