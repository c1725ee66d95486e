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
	"WaitBound":                  "behind vtgate a claim waits the server's innodb_lock_wait_timeout (20 s), not Config.WaitBound: vtgate cannot set the session variable back to its default (VT12001), so idem does not set it",
	"SubMillisecondWaitBound":    "the wait bound, as WaitBound",
	"WaitBoundOnlyForClaim":      "the wait bound, as WaitBound",
	"BatchWaitBound":             "the wait bound, as WaitBound",
	"BatchWaitBoundOnlyForClaim": "the wait bound, as WaitBound",
	"ClaimInReadOnlyTransaction": "no read-only transaction that Begin starts behind vtgate was tried yet",
}

// The conformance suite, the model and History through vtgate on its
// unsharded keyspace: vtgate's session handling, error numbers and schema
// tracking without the limits of shards. The sharded run (TestConformance)
// skips the cases that write across shards themselves, the model among
// them; here they run.
func TestConformanceUnsharded(t *testing.T) {
	conformance.Run(t, conformance.Backend[*sql.Tx]{
		Name: "vitess/unsharded",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			if reason, ok := notBehindVtgate[caseName(t)]; ok {
				t.Skipf("not behind vtgate yet: %s", reason)
			}
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
