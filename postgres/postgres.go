// Package postgres is idem's PostgreSQL backend, on github.com/jackc/pgx/v5.
// It has two ways in, both running the full conformance suite:
//
//   - native pgx: New(pool) gives a driver whose transactions are pgx.Tx;
//   - database/sql: NewSQL(db) for a *sql.DB opened with pgx's stdlib driver
//     ("pgx"), whose transactions are *sql.Tx.
//
// What PostgreSQL needs, and this package does:
//
//   - The claim is one INSERT ... ON CONFLICT (scope, idem_key) DO UPDATE ...
//     WHERE expired ... RETURNING: a row back means this transaction inserted
//     the record or took over an expired one; no row means it lost. The
//     conflict target is named, so other constraint violations still raise,
//     and it is never a plain INSERT that catches 23505 (the error would
//     abort the caller's whole transaction).
//   - Complete is a separate UPDATE: a data-modifying CTE shares one snapshot
//     with its main query, so a follow-up in the same statement could not see
//     the claimed row.
//   - At READ COMMITTED a loser blocks on the winner's uncommitted row, then
//     sees it. At REPEATABLE READ and SERIALIZABLE a conflict with a row the
//     snapshot cannot see raises 40001, which is classified as retryable, so
//     Do retries the whole transaction and then replays.
//   - The claim waits at most the store's wait bound: it runs with
//     lock_timeout set for the transaction (55P03 becomes InFlight), and the
//     caller's previous lock_timeout is restored right after it.
//   - Errors are classified by SQLSTATE from *pgconn.PgError, never by text.
//     A COMMIT whose connection broke after it was sent is reported as
//     ErrCommitUnknown.
//   - Purge deletes expired rows in batches locked with FOR UPDATE SKIP
//     LOCKED, so it never waits on a claim and never deletes a row a claim
//     is taking over.
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
