package dialect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// The database/sql adapters a backend on database/sql needs: a Queryer over
// a *sql.DB, *sql.Conn or *sql.Tx, and a Tx over a *sql.Tx.

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
	if isNilHandle(h) {
		return nil, fmt.Errorf("%w: nil database/sql handle", ErrBadTx)
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
}

var _ Tx[*sql.Tx] = (*SQLTx)(nil)

// NewSQLTx wraps tx, begun with ctx. commitError classifies an error from
// COMMIT (nil: every error is returned as it is); release, if not nil, runs
// once when the transaction ends.
func NewSQLTx(ctx context.Context, tx *sql.Tx, commitError func(error) error, release func()) *SQLTx {
	return &SQLTx{tx: tx, q: sqlQueryer{tx}, ctx: ctx, commitError: commitError, release: release}
}

// Native returns the *sql.Tx for the caller's own statements.
func (t *SQLTx) Native() *sql.Tx { return t.tx }

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
