// Package postgres is idem's PostgreSQL backend, on github.com/jackc/pgx/v5.
// It has two ways in, both running the full conformance suite:
//
//   - native pgx: New(pool) gives a driver whose transactions are pgx.Tx;
//   - database/sql: NewSQL(db) for a *sql.DB opened with pgx's stdlib driver
//     ("pgx"), whose transactions are *sql.Tx.
//
// What PostgreSQL needs, and this package does:
//
//   - The claim is one INSERT ... ON CONFLICT (scope, idem_key) DO NOTHING
//     RETURNING: a row back means this transaction inserted the record; no
//     row means another transaction holds or held the key. The conflict
//     target is named, so other constraint violations still raise, and it is
//     never a plain INSERT that catches 23505 (the error would abort the
//     caller's whole transaction). DO NOTHING takes no row lock, so a replay
//     writes nothing. A loser whose record has expired takes it over with an
//     UPDATE guarded by the expiry; of two such losers one wins, the other
//     waits for it and then loses.
//   - Complete is a separate UPDATE: a data-modifying CTE shares one snapshot
//     with its main query, so a follow-up in the same statement could not see
//     the claimed row.
//   - At READ COMMITTED a loser blocks on the winner's uncommitted row, then
//     sees it. At REPEATABLE READ and SERIALIZABLE a conflict with a row the
//     snapshot cannot see raises 40001, which is classified as retryable, so
//     Do retries the whole transaction and then replays.
//   - The claim waits at most the store's wait bound: the claim statement
//     sets lock_timeout for the transaction before it inserts (55P03 becomes
//     InFlight), and the statement after it restores the caller's value.
//   - Errors are classified by SQLSTATE from *pgconn.PgError, never by text.
//     A COMMIT whose connection broke after it was sent is reported as
//     ErrCommitUnknown.
//   - Purge deletes expired rows in batches locked with FOR UPDATE SKIP
//     LOCKED, so it never waits on a claim and never deletes a row a claim
//     is taking over.
//
// Round trips are what a request costs most, so statements that need no
// answer in between are pipelined (sent together, read together; a pipeline
// stops at its first error, like a sequence):
//
//   - the claim restores lock_timeout in its own RETURNING clause, so a
//     winner sends nothing after it; only a loser sends a second statement,
//     which restores lock_timeout and reads the record. That favours first
//     requests (about 15% less CPU each) over replays (one more round trip);
//     retry-heavy callers can set idem.Config.ReadFirst;
//   - in the transactions Do begins on the native pgx driver, BEGIN goes with
//     the claim (pgx's Batch.BeginTx), and the completing UPDATE with COMMIT.
//     That UPDATE is then guarded to fail when it updates nothing, so COMMIT
//     is never reached without the record. A request that wins costs as many
//     round trips as the bare write: BEGIN+claim, the caller's statements,
//     UPDATE+COMMIT;
//   - through database/sql, Do's transactions run on a connection of their
//     own, so statements that go together (a takeover's) are pipelined on it
//     (sql.Conn.Raw); BEGIN and COMMIT go alone, as database/sql sends them.
//
// The completing UPDATE changes no indexed column, so when the claimed row's
// page has room it is a HOT update (no new index entries). At the default
// fillfactor the benchmark (cmd/idem-bench) measured 96-98% of them HOT, so the
// table keeps it: a lower fillfactor made all of them HOT but the table a
// quarter larger.
//
// Keys and scopes are text COLLATE "C" (byte order, byte equality); times
// are timestamptz; the database's clock is statement_timestamp().
package postgres

import (
	"database/sql"
	"fmt"

	"github.com/idemkit/idem"
)

// Options configure a PostgreSQL driver.
type Options struct {
	// Isolation is the level Do's transactions begin with:
	// sql.LevelDefault or sql.LevelReadCommitted (PostgreSQL's default),
	// sql.LevelRepeatableRead or sql.LevelSerializable.
	Isolation sql.IsolationLevel
}

func (o Options) check() error {
	switch o.Isolation {
	case sql.LevelDefault, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable:
		return nil
	}
	return fmt.Errorf("postgres: %w: isolation level %v is not supported", idem.ErrInvalidConfig, o.Isolation)
}
