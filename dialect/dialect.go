package dialect

import (
	"context"
	"time"
)

// Queryer runs statements. It is the whole of what the lifecycle needs from a
// transaction (or, for reads and purge, from a pool): adapters exist for
// database/sql (idem.SQL) and pgx (postgres.PgxTx).
type Queryer interface {
	// Exec runs a statement that returns no rows and reports how many rows it
	// affected.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
	// Query runs a statement that returns rows.
	Query(ctx context.Context, query string, args ...any) (Rows, error)
}

// Rows is the cursor Query returns, the common part of *sql.Rows and pgx.Rows.
type Rows interface {
	// Next advances to the next row, reporting false at the end or on error.
	Next() bool
	// Scan copies the current row's columns into dest.
	Scan(dest ...any) error
	// Err returns the error that ended the iteration, if any.
	Err() error
	// Close releases the cursor; it is safe to call more than once.
	Close() error
}

// Tx is a write transaction begun by a Driver.
type Tx interface {
	Queryer
	// Commit commits the transaction. A failure whose outcome cannot be known
	// (the connection broke during COMMIT) must be classified as
	// ErrCommitUnknown by the dialect's Classify.
	Commit(ctx context.Context) error
	// Rollback ends the transaction without keeping anything. It is safe to
	// call after Commit or Rollback (it then does nothing).
	Rollback(ctx context.Context) error
}

// Txn is a Tx that also hands out the native transaction (*sql.Tx, pgx.Tx) to
// the caller's function, so user code runs its own statements in it.
type Txn[TTx any] interface {
	Tx
	// Native returns the driver's own transaction value.
	Native() TTx
}

// BeginOptions says how the lifecycle wants a transaction begun.
type BeginOptions struct {
	// WaitBound is how long a statement in this transaction may wait for a lock
	// another transaction holds before giving up with ErrLockTimeout. A backend
	// whose writers wait at BEGIN (SQLite) applies it there.
	WaitBound time.Duration
	// Purge marks a transaction that runs only a purge batch. Drivers with a
	// configurable isolation level begin it at READ COMMITTED: the batch
	// needs no more, and a stricter level would only make it, and the claims
	// it runs beside, fail with serialization errors.
	Purge bool
}

// Driver binds a Dialect to one connection pool and one native transaction
// type. It is passed to idem.New; nothing is registered globally.
type Driver[TTx any] interface {
	// Dialect returns the SQL rules of this backend.
	Dialect() Dialect
	// Begin starts a write transaction the way this backend needs it
	// (BEGIN IMMEDIATE on SQLite, the configured isolation level elsewhere).
	Begin(ctx context.Context, opts BeginOptions) (Txn[TTx], error)
	// Wrap adapts a transaction the caller began. It returns an error wrapping
	// ErrBadTx for a nil transaction or one this driver cannot use.
	Wrap(tx TTx) (Queryer, error)
	// Pool runs statements outside any caller's transaction: lookups, schema
	// migration and purge batches.
	Pool() Queryer
}

// Dialect is the contract a database backend implements: the statements of
// the lifecycle, written for that database's conflict and visibility rules,
// its schema, and the mapping of its typed driver errors to the sentinels in
// this package. A Dialect holds no connection; every method gets the Queryer
// it runs on.
type Dialect interface {
	// Name names the database family for messages ("sqlite", "postgres").
	Name() string

	// Capabilities describes what the conformance suite may expect.
	Capabilities() Capabilities

	// Schema returns the DDL statements that create the table and its
	// indexes if they do not exist, in order.
	Schema(t Table) []string

	// Claim tries to insert the in-flight record for a.Scope and a.Key as ONE
	// statement that tells the winner from the loser, taking over a record
	// whose retention has passed. It waits at most a.WaitBound for a
	// transaction that holds the key, returning an error classified as
	// ErrLockTimeout when the bound passes. A loser gets the record as the
	// latest committed state holds it, whatever snapshot the transaction
	// had before the claim. Claim must not fold the follow-up into the same
	// statement.
	Claim(ctx context.Context, q Queryer, t Table, a ClaimArgs) (ClaimResult, error)

	// Complete stores the response on the in-flight record the transaction
	// claimed, as a separate statement from the claim, and moves its expiry
	// to the completion time plus a.Retention. It returns ErrNotClaimed
	// when no in-flight record with that scope, key and fingerprint exists.
	Complete(ctx context.Context, q Queryer, t Table, a CompleteArgs) error

	// Lookup reads the live (not expired) record for a.Scope and a.Key. It
	// reports found=false when there is none.
	Lookup(ctx context.Context, q Queryer, t Table, a LookupArgs) (rec Record, found bool, err error)

	// PurgeBatch deletes at most a.Limit expired records in one short
	// transaction of its own, begun with begin, skipping rows other
	// transactions hold so that it never waits on claims. It returns how
	// many rows it deleted.
	PurgeBatch(ctx context.Context, begin func(context.Context) (Tx, error), t Table, a PurgeArgs) (int64, error)

	// Classify maps a driver error to the meanings in this package by its
	// typed code (SQLSTATE, error number, extended result code), never by
	// message text. The returned error wraps both the sentinel and err, so
	// errors.Is and errors.As work for either. Errors it does not know, and
	// errors already classified, are returned unchanged.
	Classify(err error) error
}

// Capabilities are the differences between backends that the conformance
// suite is allowed to see. They describe behaviour, never which backend runs.
type Capabilities struct {
	// DatabaseWriteLock is true when writers wait for each other on the whole
	// database rather than on the key (SQLite). A claim that times out there
	// says nothing about which key held the lock.
	DatabaseWriteLock bool
}

// State is where a record is in the lifecycle.
type State int

const (
	// InFlight: claimed, the winner has not completed (or its transaction is
	// still open).
	InFlight State = iota + 1
	// Completed: the response is stored and replays.
	Completed
)

// ClaimArgs are the values of one claim.
type ClaimArgs struct {
	// Scope and Key identify the record (validated by the core).
	Scope, Key string
	// Fingerprint is the request's 32-byte SHA-256.
	Fingerprint []byte
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Retention is added to the claim time to give the expiry.
	Retention time.Duration
	// WaitBound is how long the claim may wait for a transaction holding the
	// same key.
	WaitBound time.Duration
}

// ClaimResult tells the winner from the loser.
type ClaimResult struct {
	// Won is true when this statement inserted the record or took over an
	// expired one: the caller's transaction owns the work.
	Won bool
	// Record is the live record a loser found.
	Record Record
}

// CompleteArgs are the values the winner stores.
type CompleteArgs struct {
	// Scope, Key and Fingerprint name the claimed record.
	Scope, Key  string
	Fingerprint []byte
	// Status is the response's HTTP status code.
	Status int
	// Header is the encoded response header (idem's record encoding).
	Header []byte
	// Body is the response body, never nil.
	Body []byte
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Retention is added to the completion time to give the new expiry:
	// a completed record lives the whole retention after its completion.
	Retention time.Duration
}

// LookupArgs name one record.
type LookupArgs struct {
	// Scope and Key identify the record.
	Scope, Key string
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
}

// PurgeArgs bound one purge batch.
type PurgeArgs struct {
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Limit is the most rows one batch deletes.
	Limit int
}

// Record is one stored row.
type Record struct {
	// Scope and Key identify the record.
	Scope, Key string
	// Fingerprint is the stored request hash.
	Fingerprint []byte
	// State says whether the response is stored.
	State State
	// Status, Header and Body are the stored response when State is
	// Completed.
	Status int
	Header []byte
	Body   []byte
	// CreatedAt is the claim time; ExpiresAt is CreatedAt plus the
	// retention. Both are UTC.
	CreatedAt, ExpiresAt time.Time
}
