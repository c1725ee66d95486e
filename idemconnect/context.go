package idemconnect

import "context"

// txKey is the context key of the current handler run.
type txKey struct{}

// run is what one run of a handler inside a transaction gets.
type run struct{ tx any }

// Tx returns the transaction the interceptor runs the handler in, from the
// handler's context. TTx is the store's transaction type: *sql.Tx for
// database/sql backends, pgx.Tx for native pgx. It reports false outside
// the interceptor (a procedure not protected) or for another TTx.
//
// Write the handler's effect in this transaction: it commits together with
// the stored answer, or not at all. Do not commit or roll it back; the
// interceptor does. A retryable database error (a serialization failure)
// runs the handler again in a new transaction, so it must be re-runnable.
func Tx[TTx any](ctx context.Context) (TTx, bool) {
	r, ok := ctx.Value(txKey{}).(*run)
	if !ok {
		var zero TTx
		return zero, false
	}
	tx, ok := r.tx.(TTx)
	return tx, ok
}
