package idemrpc

import "context"

// txKey is the context key of the transaction a handler run works in.
type txKey struct{}

// run is what one run of a handler inside a transaction gets: the
// transaction, and the store whose run it is.
type run struct {
	tx    any
	store any
}

// Tx returns the transaction the server runs the handler in, from the
// handler's context; the adapters' Tx is this. TTx is the store's
// transaction type: *sql.Tx for database/sql backends, pgx.Tx for native
// pgx. It reports false outside a run (a call not protected) or for
// another TTx.
func Tx[TTx any](ctx context.Context) (TTx, bool) {
	r, ok := ctx.Value(txKey{}).(*run)
	if !ok {
		var zero TTx
		return zero, false
	}
	tx, ok := r.tx.(TTx)
	return tx, ok
}

func withTx(ctx context.Context, tx, store any) context.Context {
	return context.WithValue(ctx, txKey{}, &run{tx: tx, store: store})
}

// runStore is the store of the server run ctx is in; nil outside one.
func runStore(ctx context.Context) any {
	if r, ok := ctx.Value(txKey{}).(*run); ok {
		return r.store
	}
	return nil
}
