package vitess_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/commitcut"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// notBehindVtgate names the conformance cases that do not hold behind
// vtgate even on a keyspace of one shard, each with the reason.
var notBehindVtgate = map[string]string{
	"ClaimInReadOnlyTransaction": "vtgate ignores a session's transaction_read_only (a claim on such a session won: seen here), and a claim in the caller's transaction behind vtgate needs one the Driver's Begin started (guard.go), which begins no READ ONLY transaction; a claim in a READ ONLY transaction of database/sql's is refused with ErrInvalidConfig before it writes",
}

// The conformance suite, the model and History through vtgate on its
// unsharded keyspace: vtgate's session handling, error numbers and schema
// tracking without the limits of shards, where a batch over two scopes is
// one transaction like any other.
func TestConformanceUnsharded(t *testing.T) {
	conformance.Run(t, conformance.Backend[*sql.Tx]{
		Name: "vitess/unsharded",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			skipIfNotBehindVtgate(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := mysql.New(ctx, containers.SharedDB(t, containers.VitessIn(t, containers.VitessUnsharded)+"?"+single), mysql.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() }) // nothing reserved on one shard
			return d
		},
		InsertLegacy: insertLegacy,
		BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] {
			return commitcut.MySQLBreaker(t, containers.VitessIn(t, containers.VitessUnsharded)+"?"+single, mysql.Options{})
		},
	})
}

// skipIfNotBehindVtgate skips t when its case is in notBehindVtgate.
func skipIfNotBehindVtgate(t *testing.T) {
	if reason, ok := notBehindVtgate[caseName(t)]; ok {
		t.Skipf("not behind vtgate yet: %s", reason)
	}
}
