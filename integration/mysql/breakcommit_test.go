package mysql_test

import (
	"database/sql"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/integration/commitcut"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// commitBreaker is a conformance.CommitBreaker on a pool of its own, with
// the DSN parameters params: its connections dial through a cutter.
func commitBreaker(t *testing.T, params string, opts mysql.Options) conformance.CommitBreaker[*sql.Tx] {
	t.Helper()
	return commitcut.MySQLBreaker(t, containers.MySQL(t)+"?"+params, opts)
}

// beginReadOnly begins a read-only transaction on the pool with params.
func beginReadOnly(t *testing.T, params string) *sql.Tx {
	return conformance.BeginReadOnlySQL(t, open(t, params), "")
}
