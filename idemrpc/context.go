package idemrpc

import "context"

// txKey is the context key of the transaction a handler run works in.
type txKey struct{}

// run is what one run of a handler inside a transaction gets: the
// transaction, the store whose run it is, and the key it protects.
type run struct {
	tx    any
	store any
	key   string
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

func withTx(ctx context.Context, tx, store any, key string) context.Context {
	return context.WithValue(ctx, txKey{}, &run{tx: tx, store: store, key: key})
}

// runOf is the server run ctx is in; nil outside one.
func runOf(ctx context.Context) *run {
	r, _ := ctx.Value(txKey{}).(*run)
	return r
}
