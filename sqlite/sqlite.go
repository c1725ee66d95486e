// Package sqlite is idem's SQLite backend, on modernc.org/sqlite (pure Go, no
// cgo).
//
// Open a database with Open, which adds the settings the backend relies on
// to the DSN, and give it to New(ctx, db, Options); the Driver's
// transactions are *sql.Tx, and it is what idem.New takes:
//
//	db, err := sqlite.Open("orders.db") // or ":memory:"
//	if err != nil { ... }
//	driver, err := sqlite.New(ctx, db, sqlite.Options{})
//	if err != nil { ... }
//	store, err := idem.New(driver, idem.Config{})
//
// New refuses a nil *sql.DB and one of another driver (idem.ErrInvalidConfig),
// and an in-memory database whose pooled connections would each see a
// different one (ErrPrivateMemory).
//
// SQLite has one writer at a time. Write transactions begin IMMEDIATE, so a
// claim takes the write lock before it reads anything: a deferred
// transaction that read first would fail on its first write once another
// writer committed, and busy_timeout could not help it. Writers therefore
// wait for each other on the whole database, up to the store's wait bound
// (PRAGMA busy_timeout); past it a claim reports InFlight. Open turns on WAL
// so readers (Lookup) never wait for the writer. Every transaction is
// serializable, which satisfies any isolation level a call asks for.
//
// The records are a WITHOUT ROWID table clustered on (scope, idem_key): one
// B-tree holds the rows and their key, so a claim writes two B-trees (with
// the expiry index), not three, and a commit writes fewer pages to the WAL.
// The schema is versioned (migrations/*.sql, applied by Store.Migrate). The
// dialect's statements are prepared once per connection and reused;
// modernc.org/sqlite would otherwise compile each one on every request.
//
// Times are stored as INTEGER Unix microseconds (UTC), so sorting and
// comparison are exact; the database's clock is unixepoch('subsec')
// (millisecond resolution). Keys and scopes are TEXT compared with the
// BINARY collation: byte for byte.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strconv"
	"time"

	"modernc.org/sqlite"

	"github.com/idemkit/idem/dialect"
)

// Options configure a SQLite driver. There are none yet: the parameter
// keeps every backend's constructor the same shape, New(ctx, handle,
// Options).
type Options struct{}

// Driver runs idem on a *sql.DB opened with the modernc.org/sqlite driver.
// Its transactions are *sql.Tx.
type Driver struct {
	db      *sql.DB
	dialect *sqliteDialect
	pool    poolPreparer
	stmts   *stmtCache
	// busy is the pool's busy_timeout in milliseconds, read once by New:
	// the DSN sets it for every connection the pool opens.
	busy int64
}

var _ dialect.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a Driver on db, which should come from Open. It checks that db
// uses the modernc.org/sqlite driver, and refuses an in-memory database whose
// pooled connections would each see a different database; ctx bounds that
// check. It reads the pool's busy_timeout once, from one connection: every
// connection is taken to have the busy_timeout the DSN gives it (Open sets
// DefaultBusyTimeout). Set it there, not with a PRAGMA on one pooled
// connection, which a transaction of idem's would undo.
func New(ctx context.Context, db *sql.DB, _ Options) (*Driver, error) {
	if err := dialect.CheckSQLDB[*sqlite.Driver]("sqlite", db, "modernc.org/sqlite"); err != nil {
		return nil, err
	}
	if err := checkSharedMemory(ctx, db); err != nil {
		return nil, err
	}
	pool, err := dialect.NewSQLQueryer(db)
	if err != nil {
		return nil, err
	}
	var busy int64
	if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil {
		return nil, fmt.Errorf("sqlite: read busy_timeout: %w", err)
	}
	stmts := newStmtCache(db)
	return &Driver{db: db, dialect: newDialect(), pool: poolPreparer{Queryer: pool, cache: stmts}, stmts: stmts, busy: busy}, nil
}

// DB returns the *sql.DB the driver runs on, as New was given it.
func (d *Driver) DB() *sql.DB { return d.db }

// Dialect returns the SQLite dialect: the statements idem runs.
func (d *Driver) Dialect() dialect.Dialect { return d.dialect }

// Pool runs idem's statements outside any caller's transaction, on the
// *sql.DB; they run prepared.
func (d *Driver) Pool() dialect.Queryer { return d.pool }

// Wrap adapts a *sql.Tx the caller began on this database, for
// Store.Claim. It returns an error wrapping ErrBadTx for a nil transaction;
// statements on a finished one fail with ErrTxDone. idem's statements in it
// run prepared.
func (d *Driver) Wrap(tx *sql.Tx) (dialect.Queryer, error) {
	q, err := dialect.NewSQLQueryer(tx)
	if err != nil {
		return nil, err
	}
	return txPreparer{Queryer: q, tx: tx, cache: d.stmts}, nil
}

// Begin starts a write transaction on a dedicated connection whose
// busy_timeout is the wait bound, so BEGIN IMMEDIATE waits at most that long
// for another writer. The pool's busy_timeout is put back when the
// transaction ends, so other users of the pool keep theirs; when it already
// is the wait bound (Open's default and the default WaitBound), Begin sends
// no statement for it. Any isolation level is accepted: SQLite's
// transactions are serializable.
func (d *Driver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	// Statements first seen in earlier transactions are prepared here,
	// while this goroutine holds no connection.
	d.stmts.prepareWanted(ctx)
	wait := opts.WaitBound
	if wait <= 0 {
		wait = DefaultBusyTimeout
	}
	// No isolation level: the DSN's _txlock=immediate makes BEGIN
	// IMMEDIATE, and every SQLite transaction is serializable.
	tx, err := dialect.BeginSQL(ctx, d.db, dialect.SQLBegin{OwnConn: true, Setup: d.waitBound(wait)})
	if err != nil {
		return nil, err
	}
	return newTx(tx, d.stmts), nil
}

// waitBound sets a transaction's connection's busy_timeout to wait, and
// puts the pool's back afterwards. When they are equal (Open's default and
// the default WaitBound), neither statement is needed.
func (d *Driver) waitBound(wait time.Duration) func(context.Context, *sql.Conn) (func(), error) {
	return func(ctx context.Context, conn *sql.Conn) (func(), error) {
		previous, want := d.busy, max(wait.Milliseconds(), 1)
		if want == previous {
			return nil, nil
		}
		if _, err := conn.ExecContext(ctx, busyTimeout(want)); err != nil {
			return nil, err
		}
		return func() {
			// Bounded, and on a context of its own: the caller's may have ended.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := conn.ExecContext(rctx, busyTimeout(previous)); err != nil {
				// The connection would keep the wait bound: drop it instead.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}, nil
	}
}

func busyTimeout(ms int64) string { return "PRAGMA busy_timeout = " + strconv.FormatInt(ms, 10) }
