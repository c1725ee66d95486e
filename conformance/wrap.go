package conformance

import (
	"context"

	"github.com/idemkit/idem/dialect"
)

// WrappedTx wraps a driver's transaction the way a tracer or a fault
// injector does, keeping every optional ability of the transaction it wraps
// (dialect.Pipeliner, dialect.Preparer, dialect.CommitDeferrer) through the
// functions of package dialect, so a suite that injects faults still runs
// the backend's production path. OnCommit, when set, replaces Commit: it
// gets the wrapped transaction, to commit or not.
type WrappedTx[TTx any] struct {
	dialect.Tx[TTx]
	OnCommit func(ctx context.Context, tx dialect.Tx[TTx]) error
}

var (
	_ dialect.Pipeliner      = (*WrappedTx[any])(nil)
	_ dialect.Preparer       = (*WrappedTx[any])(nil)
	_ dialect.CommitDeferrer = (*WrappedTx[any])(nil)
)

// Commit runs OnCommit, or commits.
func (w *WrappedTx[TTx]) Commit(ctx context.Context) error {
	if w.OnCommit != nil {
		return w.OnCommit(ctx, w.Tx)
	}
	return w.Tx.Commit(ctx)
}

// Pipeline keeps the wrapped transaction's pipelining.
func (w *WrappedTx[TTx]) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	return dialect.Pipeline(ctx, w.Tx, stmts...)
}

// ExecPrepared keeps the wrapped transaction's prepared statements.
func (w *WrappedTx[TTx]) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	return dialect.ExecPrepared(ctx, w.Tx, query, args...)
}

// QueryPrepared keeps the wrapped transaction's prepared statements.
func (w *WrappedTx[TTx]) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	return dialect.QueryPrepared(ctx, w.Tx, query, args...)
}

// DeferToCommit keeps the wrapped transaction's deferred completion.
func (w *WrappedTx[TTx]) DeferToCommit(stmt dialect.Statement) bool {
	return dialect.DeferToCommit(w.Tx, stmt)
}
