// Package postgres is idem's PostgreSQL backend, on github.com/jackc/pgx/v5,
// for PostgreSQL 13 and later. It has two ways in, both running the full
// conformance suite:
//
//   - native pgx: New(ctx, pool, Options) on a *pgxpool.Pool gives a Driver
//     whose transactions are pgx.Tx;
//   - database/sql: NewSQL(ctx, db, Options) on a *sql.DB opened with pgx's
//     stdlib driver ("pgx") gives an SQLDriver whose transactions are
//     *sql.Tx.
//
// Either is what idem.New takes:
//
//	pool, err := pgxpool.New(ctx, "postgres://app@db/orders")
//	if err != nil { ... }
//	driver, err := postgres.New(ctx, pool, postgres.Options{})
//	if err != nil { ... }
//	store, err := idem.New(driver, idem.Config{})
//
// Options.Isolation is the level transactions begin with (PostgreSQL's
// default, READ COMMITTED, unless set). New and NewSQL check the server's
// version, bounded by ctx, and refuse (with idem.ErrInvalidConfig) a nil
// handle, a *sql.DB of another driver, a level PostgreSQL lacks and a server
// older than PostgreSQL 13.
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
//   - Migrations (migrations/*.sql) run in one transaction under an
//     advisory lock on the table's name, so several processes may run
//     Store.Migrate at once.
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
//     the claim (pgx's Batch.BeginTx), and the completing UPDATE with COMMIT
//     (the transaction is a dialect.CommitDeferrer). That UPDATE is then
//     guarded to fail when it updates nothing, so COMMIT is never reached
//     without the record. A request that wins costs as many round trips as
//     the bare write: BEGIN+claim, the caller's statements, UPDATE+COMMIT;
//   - through database/sql, Do's transactions run on a connection of their
//     own, so statements that go together (a takeover's) are pipelined on it
//     (sql.Conn.Raw); BEGIN and COMMIT go alone, as database/sql sends them,
//     unless the *sql.DB was opened through HoldBegin (opt-in: it changes
//     when BEGIN is sent for all code on the *sql.DB): then as on pgx.
//
// Both are dialect.Pipeliners; a wrapper around their transactions keeps
// the pipelining by forwarding dialect.Pipeline and dialect.DeferToCommit,
// or falls back to one statement per round trip.
//
// The completing UPDATE changes no indexed column, so when the claimed row's
// page has room it is a HOT update (no new index entries). At the default
// fillfactor the benchmark (cmd/idem-bench) measured 96-98% of them HOT, so the
// table keeps it: a lower fillfactor made all of them HOT but the table a
// quarter larger.
//
// Keys and scopes are text COLLATE "C" (byte order, byte equality); times
// are timestamptz, and the retention is added as a number of microseconds
// (an interval with a days part would depend on the session's time zone);
// the database's clock is statement_timestamp().
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/dialect"
)

// Options configure a PostgreSQL driver.
type Options struct {
	// Isolation is the level transactions begin with when a call asks for
	// none: sql.LevelDefault or sql.LevelReadCommitted (PostgreSQL's
	// default), sql.LevelRepeatableRead or sql.LevelSerializable.
	Isolation sql.IsolationLevel
}

// checkIsolation refuses a level PostgreSQL does not have.
func checkIsolation(l sql.IsolationLevel) error {
	return dialect.CheckIsolation("postgres", l, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable)
}

// minServerVersion is PostgreSQL 13, as server_version_num.
const minServerVersion = 130000

// checkServer refuses a server older than PostgreSQL 13.
func checkServer(ctx context.Context, q dialect.Queryer) error {
	var version int64
	err := dialect.Run(ctx, q, dialect.Statement{
		SQL: "SELECT current_setting('server_version_num')::int",
		Rows: func(r dialect.Rows) error {
			if !r.Next() {
				return r.Err()
			}
			return r.Scan(&version)
		},
	})
	if err != nil {
		// A pooler's prepared statement mismatch says what to set here
		// already.
		if c := (*postgresDialect)(nil).Classify(err); errors.Is(c, ErrPreparedStatements) {
			err = c
		}
		return fmt.Errorf("postgres: inspect server: %w", err)
	}
	if version < minServerVersion {
		return fmt.Errorf("postgres: %w: server version %d is older than PostgreSQL 13", dialect.ErrInvalidConfig, version)
	}
	return nil
}
