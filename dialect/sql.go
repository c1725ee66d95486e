package dialect

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
)

// The database/sql parts every backend on database/sql needs: the checks of
// its constructor (CheckSQLDB, CheckIsolation), a Queryer over a *sql.DB,
// *sql.Conn or *sql.Tx (NewSQLQueryer, for Pool and Wrap), and the Tx its
// Begin returns (BeginSQL, NewSQLTx). What differs between backends stays
// with them: the levels their database has, whether a transaction needs a
// connection of its own, how a failed COMMIT is classified.

// CheckSQLDB checks the *sql.DB a backend's constructor was given: it must
// not be nil and must have been opened with the database/sql driver D,
// whose errors the backend knows how to classify (driverPath names D's
// package in the message). Otherwise it returns an error wrapping
// ErrInvalidConfig, prefixed with backend ("mysql").
func CheckSQLDB[D driver.Driver](backend string, db *sql.DB, driverPath string) error {
	if db == nil {
		return fmt.Errorf("%s: %w: nil *sql.DB", backend, ErrInvalidConfig)
	}
	if _, ok := db.Driver().(D); !ok {
		return fmt.Errorf("%s: %w: *sql.DB uses driver %T, not %s", backend, ErrInvalidConfig, db.Driver(), driverPath)
	}
	return nil
}

// CheckIsolation refuses, with an error wrapping ErrInvalidConfig and
// prefixed with backend, an isolation level other than sql.LevelDefault (the
// server's own) and the levels given: those the backend's database has. A
// backend calls it in its constructor, for Options, and in Begin, for the
// level a call asks for.
func CheckIsolation(backend string, l sql.IsolationLevel, levels ...sql.IsolationLevel) error {
	if l == sql.LevelDefault || slices.Contains(levels, l) {
		return nil
	}
	return fmt.Errorf("%s: %w: isolation level %v is not supported", backend, ErrInvalidConfig, l)
}

// SQLHandle is what database/sql's *sql.Tx, *sql.Conn and *sql.DB have in
// common.
type SQLHandle interface {
	// ExecContext runs a statement without rows.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryContext runs a query.
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// NewSQLQueryer adapts a database/sql handle to Queryer: a *sql.Tx for a
// caller's transaction (Driver.Wrap), a *sql.DB for the pool. It returns an
// error wrapping ErrBadTx for a nil handle (a typed nil pointer included).
// Statements on a finished transaction fail with ErrTxDone.
func NewSQLQueryer(h SQLHandle) (Queryer, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil database/sql handle", ErrBadTx)
	}
	if isNilHandle(h) {
		return nil, fmt.Errorf("%w: nil %T", ErrBadTx, h)
	}
	return sqlQueryer{h}, nil
}

func isNilHandle(h SQLHandle) bool {
	switch v := h.(type) {
	case nil:
		return true
	case *sql.Tx:
		return v == nil
	case *sql.DB:
		return v == nil
	case *sql.Conn:
		return v == nil
	}
	return false
}

type sqlQueryer struct{ h SQLHandle }

func (s sqlQueryer) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.h.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, SQLTxDone(err)
	}
	return res.RowsAffected()
}

func (s sqlQueryer) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	rows, err := s.h.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, SQLTxDone(err)
	}
	return rows, nil
}

// SQLTxDone marks database/sql's "transaction has already been committed or
// rolled back" with ErrTxDone, keeping the original in the chain.
func SQLTxDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return Classified(ErrTxDone, err)
	}
	return err
}

// SQLTx is a Tx over a database/sql transaction, for drivers built on
// database/sql.
//
// Its Commit tells a known failure from an unknown outcome the way every
// database/sql driver needs: when the transaction's context (the one given
// to BeginTx) ended before COMMIT, database/sql sends no COMMIT and rolls
// back, so the failure is known; otherwise the error goes through the
// driver's commitError, which wraps ErrCommitUnknown when the COMMIT may
// have happened.
type SQLTx struct {
	tx          *sql.Tx
	q           Queryer
	ctx         context.Context
	commitError func(error) error
	// release runs once after the transaction ends (to give back a
	// dedicated connection, say). It may be nil.
	release func()
	// conn is the connection of its own the transaction runs on
	// (SQLBegin.OwnConn), or nil.
	conn *sql.Conn
}

var _ Tx[*sql.Tx] = (*SQLTx)(nil)

// NewSQLTx wraps tx, begun with ctx. commitError classifies an error from
// COMMIT (nil: every error is returned as it is); release, if not nil, runs
// once when the transaction ends.
func NewSQLTx(ctx context.Context, tx *sql.Tx, commitError func(error) error, release func()) *SQLTx {
	return &SQLTx{tx: tx, q: sqlQueryer{tx}, ctx: ctx, commitError: commitError, release: release}
}

// SQLBegin says how BeginSQL begins a backend's transaction.
type SQLBegin struct {
	// Options are BeginTx's (the isolation level; nil: the DSN's
	// defaults, SQLite's BEGIN IMMEDIATE for instance).
	Options *sql.TxOptions
	// CommitError classifies an error from COMMIT, as NewSQLTx's
	// commitError does.
	CommitError func(error) error
	// OwnConn runs the transaction on a connection of its own, taken from
	// the pool before BEGIN and given back when the transaction ends: for a
	// backend that sends statements on it outside database/sql
	// (sql.Conn.Raw) or changes one of its session settings.
	OwnConn bool
	// Setup, when not nil (and OwnConn is set), runs on that connection
	// before BEGIN. The reset it returns, when not nil, runs once after the
	// transaction ends (also when BEGIN fails), before the connection goes
	// back: it undoes what Setup changed, or discards the connection
	// (sql.Conn.Raw returning driver.ErrBadConn) when it cannot.
	Setup func(ctx context.Context, conn *sql.Conn) (reset func(), err error)
}

// BeginSQL begins a transaction on db as b says and returns it as a Tx
// whose Commit tells a known failure from an unknown outcome (see SQLTx).
func BeginSQL(ctx context.Context, db *sql.DB, b SQLBegin) (*SQLTx, error) {
	if !b.OwnConn {
		tx, err := db.BeginTx(ctx, b.Options)
		if err != nil {
			return nil, err
		}
		return NewSQLTx(ctx, tx, b.CommitError, nil), nil
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	release := func() { conn.Close() }
	if b.Setup != nil {
		reset, err := b.Setup(ctx, conn)
		if err != nil {
			conn.Close()
			return nil, err
		}
		if reset != nil {
			release = func() {
				reset()
				conn.Close()
			}
		}
	}
	tx, err := conn.BeginTx(ctx, b.Options)
	if err != nil {
		release()
		return nil, err
	}
	t := NewSQLTx(ctx, tx, b.CommitError, release)
	t.conn = conn
	return t, nil
}

// Native returns the *sql.Tx for the caller's own statements.
func (t *SQLTx) Native() *sql.Tx { return t.tx }

// Conn returns the connection of its own the transaction runs on (BeginSQL
// with SQLBegin.OwnConn), or nil.
func (t *SQLTx) Conn() *sql.Conn { return t.conn }

// Exec runs a statement in the transaction.
func (t *SQLTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return t.q.Exec(ctx, query, args...)
}

// Query runs a query in the transaction.
func (t *SQLTx) Query(ctx context.Context, query string, args ...any) (Rows, error) {
	return t.q.Query(ctx, query, args...)
}

// Commit commits. database/sql commits on the context given to BeginTx, so
// ctx is used only for the rollback after a failure.
func (t *SQLTx) Commit(ctx context.Context) error {
	defer t.done()
	if err := t.ctx.Err(); err != nil {
		_ = t.tx.Rollback()
		return fmt.Errorf("COMMIT not sent, the transaction's context ended: %w", err)
	}
	err := SQLTxDone(t.tx.Commit())
	if err == nil || errors.Is(err, ErrTxDone) || t.commitError == nil {
		return err
	}
	return t.commitError(err)
}

// Rollback rolls back; after Commit or Rollback it does nothing.
func (t *SQLTx) Rollback(context.Context) error {
	defer t.done()
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

func (t *SQLTx) done() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}
