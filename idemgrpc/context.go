package idemgrpc

import (
	"context"

	"github.com/idemkit/idem/idemrpc"
)

// Tx returns the transaction the interceptor runs the handler in, from the
// handler's context. TTx is the store's transaction type: *sql.Tx for
// database/sql backends, pgx.Tx for native pgx. It reports false outside
// the interceptor (a method not protected) or for another TTx.
//
// Write the handler's effect in this transaction: it commits together with
// the stored answer, or not at all. Do not commit or roll it back; the
// interceptor does. A retryable database error (a serialization failure)
// runs the handler again in a new transaction, so it must be re-runnable.
func Tx[TTx any](ctx context.Context) (TTx, bool) { return idemrpc.Tx[TTx](ctx) }
