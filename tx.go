package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/idemkit/idem/dialect"
)

// Tx is the transaction interface the lifecycle runs against: the caller's
// open transaction seen as two methods, Exec and Query. The caller begins,
// commits and rolls back; idem only runs its statements inside. Drivers adapt
// their native transactions to it (SQL below for database/sql; package
// postgres for pgx), and the same interface serves reads on a pool.
type Tx = dialect.Queryer

// SQLQueryer is what database/sql's *sql.Tx, *sql.Conn and *sql.DB have in
// common.
type SQLQueryer interface {
	// ExecContext runs a statement without rows.
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	// QueryContext runs a query.
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// SQL adapts a database/sql handle to Tx. Pass a *sql.Tx for claims and
// completions; a *sql.DB or *sql.Conn serves where only a read is needed.
// It returns an error wrapping ErrBadTx for a nil handle (including a typed
// nil pointer), and maps sql.ErrTxDone to ErrTxDone on every call.
func SQL(q SQLQueryer) (Tx, error) {
	if isNil(q) {
		return nil, fmt.Errorf("%w: nil database/sql handle", ErrBadTx)
	}
	return sqlQueryer{q}, nil
}

func isNil(q SQLQueryer) bool {
	switch v := q.(type) {
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

type sqlQueryer struct{ q SQLQueryer }

func (s sqlQueryer) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := s.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, txDone(err)
	}
	return res.RowsAffected()
}

func (s sqlQueryer) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	rows, err := s.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, txDone(err)
	}
	return rows, nil
}

// txDone marks database/sql's "transaction has already been committed or
// rolled back" with the dialect meaning, keeping the original in the chain.
func txDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}

// SQLTxn is a dialect.Txn over a database/sql transaction. Drivers built on
// database/sql return it from Begin.
type SQLTxn struct {
	tx *sql.Tx
	// release runs once after the transaction ends (to give back a dedicated
	// connection, for example). It may be nil.
	release func()
}

// NewSQLTxn wraps tx; release, if not nil, runs once when the transaction
// ends by Commit or Rollback.
func NewSQLTxn(tx *sql.Tx, release func()) *SQLTxn {
	return &SQLTxn{tx: tx, release: release}
}

// Native returns the *sql.Tx for the caller's own statements.
func (t *SQLTxn) Native() *sql.Tx { return t.tx }

// Exec runs a statement in the transaction.
func (t *SQLTxn) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return sqlQueryer{t.tx}.Exec(ctx, query, args...)
}

// Query runs a query in the transaction.
func (t *SQLTxn) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	return sqlQueryer{t.tx}.Query(ctx, query, args...)
}

// Commit commits. database/sql binds the transaction to the context given to
// BeginTx, so ctx is not used.
func (t *SQLTxn) Commit(context.Context) error {
	defer t.done()
	return txDone(t.tx.Commit())
}

// Rollback rolls back; after Commit or Rollback it does nothing.
func (t *SQLTxn) Rollback(context.Context) error {
	defer t.done()
	err := t.tx.Rollback()
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

func (t *SQLTxn) done() {
	if t.release != nil {
		t.release()
		t.release = nil
	}
}

var _ dialect.Txn[*sql.Tx] = (*SQLTxn)(nil)
