package dialect

import (
	"context"
	"database/sql"
	"time"
)

// Queryer runs statements: a transaction, or a pool for statements outside
// any transaction (lookups). It is the whole of what a Dialect needs to run
// its SQL. NewSQLQueryer adapts database/sql handles; package postgres
// adapts pgx.
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

// Tx is a transaction a Driver began for the core (for Do, Purge and
// Migrate). TTx is the native transaction type the caller's function gets
// (*sql.Tx, pgx.Tx).
type Tx[TTx any] interface {
	Queryer
	// Commit commits. When the outcome cannot be known (the connection
	// broke after COMMIT was sent, or a COMMIT in flight was interrupted),
	// the error wraps ErrCommitUnknown; only the transaction can tell, as
	// only it knows whether COMMIT left. When the transaction's context
	// ended before COMMIT was sent, the error is a known failure and
	// nothing was committed.
	Commit(ctx context.Context) error
	// Rollback ends the transaction without keeping anything. After Commit
	// or Rollback it does nothing and returns nil.
	Rollback(ctx context.Context) error
	// Native returns the driver's own transaction, for the caller's
	// statements. After the transaction ends, its statements fail.
	Native() TTx
}

// BeginOptions say how the core wants a transaction begun.
type BeginOptions struct {
	// Isolation is the isolation level; sql.LevelDefault means the level
	// the driver was configured with. A driver refuses (with an error
	// wrapping ErrInvalidConfig) a level it cannot give; a database whose
	// transactions are always stronger (SQLite: serializable) accepts
	// every weaker level.
	Isolation sql.IsolationLevel
	// WaitBound bounds a wait at BEGIN, on a database whose writers wait
	// for each other there (SQLite's BEGIN IMMEDIATE): past it, Begin fails
	// with an error Classify maps to ErrLockTimeout. It is not a bound on
	// the transaction's statements: a claim's own wait is bounded by
	// ClaimArgs.WaitBound, and the caller's statements must wait as they
	// would without idem.
	WaitBound time.Duration
	// Schema: the transaction runs Schema's statements (Migrate). On
	// MySQL and MariaDB DDL commits on its own, ending the transaction
	// BEGIN started; a driver that checks at COMMIT that the transaction
	// is still that one (MySQL's on a Galera node) skips the check.
	Schema bool
}

// IsolationOr is the level to begin with: o.Isolation, or configured when
// the call asked for none (sql.LevelDefault).
func (o BeginOptions) IsolationOr(configured sql.IsolationLevel) sql.IsolationLevel {
	if o.Isolation == sql.LevelDefault {
		return configured
	}
	return o.Isolation
}

// Driver binds a Dialect to one connection pool and one native transaction
// type. It is passed to idem.New; nothing is registered globally.
type Driver[TTx any] interface {
	// Dialect returns the SQL rules of this backend.
	Dialect() Dialect
	// Begin starts a transaction the way this backend needs it (BEGIN
	// IMMEDIATE on SQLite, an isolation level elsewhere).
	Begin(ctx context.Context, opts BeginOptions) (Tx[TTx], error)
	// Wrap adapts a transaction the caller began, for Store.Claim. It
	// returns an error wrapping ErrBadTx for a nil transaction or one this
	// driver cannot use.
	Wrap(tx TTx) (Queryer, error)
	// Pool runs statements outside any transaction: lookups.
	Pool() Queryer
}

// Dialect is the contract a database backend implements: the statements of
// the lifecycle, written for that database's conflict and visibility rules,
// its versioned schema, and the mapping of its typed driver errors to the
// meanings in this package. A Dialect holds no connection; every method gets
// the Queryer it runs on, and the core begins and ends every transaction.
type Dialect interface {
	// Name names the database family for messages ("sqlite", "postgres").
	Name() string

	// Capabilities describes what the conformance suite may expect.
	Capabilities() Capabilities

	// Schema returns the table's versioned DDL and the statements that
	// keep its version. Store.Migrate runs it.
	Schema(t Table) Schema

	// Claim tries to insert the pending record for a.Scope and a.Key as ONE
	// statement that tells the winner from the loser, taking over a record
	// whose retention has passed. It waits at most a.WaitBound for a
	// transaction that holds the key, returning an error classified as
	// ErrLockTimeout when the bound passes; the caller's later statements
	// must not inherit that bound. A loser gets the record as the latest
	// committed state holds it, whatever snapshot the transaction had
	// before the claim (or an error classified ErrSerialization, and the
	// core retries). Claim must not fold the follow-up into the same
	// statement.
	Claim(ctx context.Context, q Queryer, t Table, a ClaimArgs) (ClaimResult, error)

	// Complete stores the response on the pending record the transaction
	// claimed, as a separate statement from the claim, and moves its expiry
	// to the completion time plus a.Retention when that is later than the
	// expiry the claim set (which the core sets a grace beyond the
	// retention, see idem.ExpiryGrace). On the fast path, when the expiry
	// does not move, it must change no indexed column, so that the update
	// stays cheap (HOT on PostgreSQL). It returns an error wrapping
	// ErrNotClaimed when no pending record with that scope, key and
	// fingerprint exists.
	Complete(ctx context.Context, q Queryer, t Table, a CompleteArgs) error

	// Lookup reads the live (not expired) record for a.Scope and a.Key. It
	// reports found=false when there is none.
	Lookup(ctx context.Context, q Queryer, t Table, a LookupArgs) (rec Record, found bool, err error)

	// Purge deletes at most a.Limit expired records, in the transaction q
	// the core began (at READ COMMITTED where the database has levels),
	// skipping rows other transactions hold so that it never waits on
	// claims. It returns how many rows it deleted. A Dialect that is a
	// Leaser raises the table's token floor to the largest token it
	// deleted, in the same transaction (see Leaser).
	Purge(ctx context.Context, q Queryer, t Table, a PurgeArgs) (int64, error)

	// Classify maps a driver error to the meanings in this package by its
	// typed code (SQLSTATE, error number, extended result code), never by
	// message text. The returned error wraps both the meaning and err, so
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
	// ConflictsAtCommit is true when a claim is decided against what its
	// node has applied, and the database checks the transaction against
	// what others committed only at COMMIT (Galera's certification). A
	// claim made before its node applied another node's committed record
	// of the key can win; the database then refuses that transaction, at a
	// later statement or at COMMIT, with an error Classify maps to
	// ErrDeadlock or ErrSerialization, and a retry replays. A won claim is
	// final only once its COMMIT succeeds.
	ConflictsAtCommit bool
	// FailedStatementAborts is true when a statement that fails (a unique
	// violation the caller's function catches, say) aborts the whole
	// transaction: every later statement fails, COMMIT rolls back, and
	// Classify maps that failure to ErrTxAborted (PostgreSQL). Where it is
	// false, such a statement is undone alone and the transaction goes on
	// (MySQL, MariaDB, SQLite), so the function's answer after it is
	// stored with the rest of its work.
	FailedStatementAborts bool
	// PartialPurgeBatches is true when a purge batch may hold fewer than
	// its limit while other expired records remain: on a sharded database
	// whose transactions may write on one shard only (Vitess under
	// transaction_mode SINGLE), a batch deletes the records of one
	// shard's routing value. Store.Purge then goes on until a batch
	// deletes nothing, instead of stopping at the first short one.
	PartialPurgeBatches bool
}

// State is where a record is in the lifecycle.
type State int

const (
	// Pending: claimed, no response stored yet (its transaction may still be
	// open). A loser that meets it answers InFlight.
	Pending State = iota + 1
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
	// Retention is added to the claim time to give the expiry; the core
	// passes the store's retention plus idem.ExpiryGrace of it.
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
	// Status is the response's status (an HTTP status, or 0 for work that
	// has none).
	Status int
	// Header is the encoded response header (idem's record encoding).
	Header []byte
	// Body is the response body, never nil.
	Body []byte
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Retention is added to the completion time to give the new expiry
	// when that is later than the claim's: a completed record lives at
	// least the whole retention after its completion.
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
	// CreatedAt is the claim time; ExpiresAt is when the record may be
	// claimed afresh. Both are UTC.
	CreatedAt, ExpiresAt time.Time
	// Token is the fencing token of lease mode: 0 for a record claimed in a
	// single transaction, 1 for a fresh lease, one more on every takeover.
	Token int64
	// LeaseUntil is when a pending record's lease expires (UTC); zero when
	// the record holds no lease. LeaseExpired says, by the clock the read
	// used (LookupArgs.Now or the database's), that it has expired.
	LeaseUntil   time.Time
	LeaseExpired bool
	// Step and StepData are the last recovery point a lease holder
	// recorded ("" when none).
	Step     string
	StepData []byte
}
