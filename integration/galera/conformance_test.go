package galera_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// onOneNode names the conformance cases whose premise holds on one node
// only, each with the reason; they run on a single node (a different one
// from case to case) instead of spread. On Galera a transaction's rows and
// locks are local to its node until COMMIT, where the write set is
// certified against what the cluster ordered before it:
//
//   - a claim does not make a loser on another node wait: the loser
//     inserts the key locally, and whichever commits first wins; the other
//     fails with 1213 (at COMMIT, or earlier when the applier aborts it),
//     and Do retries and replays. The cases that check "the loser waits
//     while the winner holds the key" or "the loser answers InFlight after
//     the wait bound" test a lock no other node sees;
//   - innodb_lock_wait_timeout bounds waits for local locks only;
//   - SKIP LOCKED skips rows locked on the purging node only, so a purge on
//     one node and a takeover on another race at COMMIT (one of them gets
//     1213: Do retries a takeover, and a skipped purge batch is retried);
//   - GET_LOCK, which serializes Migrate, is local to a node: two nodes
//     migrating the same table at once both record version 1, and the
//     second fails with a duplicate key (run Migrate from one place).
//
// TestCertification and TestPartition check what the cluster does instead.
var onOneNode = map[string]string{
	"LoserWaitsThenReplays":        "a loser waits on the winner's row lock",
	"WinnerRollsBackLoserWins":     "a loser waits on the winner's row lock",
	"WaitBound":                    "a loser waits on the winner's row lock, bounded",
	"ContextCancelledWhileWaiting": "a loser waits on the winner's row lock",
	"SlowWinnerNotOvertaken":       "a loser waits on the winner's row lock",
	"SubMillisecondWaitBound":      "a loser waits on the winner's row lock, bounded",
	"ReadFirstOpenKeys":            "a loser waits on the winner's row lock",
	"WaitBoundOnlyForClaim":        "the function's statement waits on a row lock held elsewhere",
	"PurgeBesideTakeover":          "purge skips rows a takeover locked (SKIP LOCKED)",
	"PurgersRace":                  "purge schedules on two nodes delete the same rows and fail certification (1213) at every overlap, so a batch can run out of attempts; the README says to purge from one node",
	"ThirtyTwoClaimsOneEffect":     "the suite proves the race by losers waiting on the winner's row lock; TestCertification races keys across nodes",
	"ConcurrentTakeoverOneWinner":  "the suite proves the race by losers waiting on the winner's row lock; TestCertification races keys across nodes",
	"PerCallIsolation":             "the suite proves the race by losers waiting on the winner's row lock; TestCertification races keys across nodes",
	"DeadlockRetried":              "a deadlock needs both transactions' row locks on one node; across nodes the same conflict is a certification failure (TestCertification)",
	"DeadlockSwallowedInFunction":  "a deadlock needs both transactions' row locks on one node; across nodes the same conflict is a certification failure (TestCertification)",
	"MigrateConcurrently":          "GET_LOCK serializes concurrent migrations",
	"BatchLoserWaitsThenReplays":   "a batch waits on the holder's row lock",
	"BatchWaitBound":               "a batch waits on the holder's row lock, bounded",
	"BatchWaitBoundOnlyForClaim":   "the function's statement waits on a row lock held elsewhere",
}

// claimBehindCase claims in a transaction that read before another
// transaction committed the key. Spread over the nodes, its claim meets a
// node that has not yet applied that commit only now and then; on a
// behindSpread it always does, so the case proves every time that such a
// claim replays or, won on its node, is refused with a retryable error
// (Capabilities.ConflictsAtCommit) and then replays.
const claimBehindCase = "ClaimAfterEarlierRead"

// The conformance suite with every case's transactions and pool statements
// spread over the three nodes, but for the cases in onOneNode. The pools
// read causally (wsrep_sync_wait=1): the suite counts effects and records
// right after a commit on another node, as a service reading its own writes
// back would.
func TestConformance(t *testing.T) {
	var pinned atomic.Uint64
	conformance.Run(t, conformance.Backend[*sql.Tx]{
		Name: "galera",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			nodes := nodeDrivers(t, "wsrep_sync_wait=1", mysql.Options{})
			if caseName(t) == claimBehindCase {
				return newBehindSpread(t, nodes)
			}
			if reason, ok := onOneNode[caseName(t)]; ok {
				i := pinned.Add(1) % uint64(len(nodes))
				t.Logf("on node n%d only: %s", i+1, reason)
				return nodes[i]
			}
			return newSpread(nodes)
		},
		InsertLegacy: insertLegacy,
		BeginReadOnly: func(t *testing.T, _ dialect.Driver[*sql.Tx]) *sql.Tx {
			// A claim in a caller's transaction on Galera needs one the
			// driver's Begin started (mysql/guard.go): a driver on
			// read-only sessions begins it.
			d := newDriver(t, containers.Galera(t).Nodes()[0], "wsrep_sync_wait=1&transaction_read_only=1", mysql.Options{})
			tx, err := d.Begin(t.Context(), dialect.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			return tx.Native()
		},
	})
}

// insertLegacy writes the first schema version's rows. Each INSERT waits
// until its node has applied what the cluster committed before it
// (wsrep_sync_wait bit 4: INSERT; the server waits at PREPARE, before it
// opens the table): the suite creates the table through the pool, maybe on
// another node, and a node still behind that CREATE TABLE answers 1146 (no
// such table). The pools' wsrep_sync_wait=1 makes only reads and BEGIN
// wait.
var insertLegacy = conformance.LegacyInserter("SET STATEMENT wsrep_sync_wait=4 FOR INSERT INTO `%s` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
	func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") })

// caseName is the conformance case t runs: TestConformance/<case>/...
func caseName(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}
