package idemhttp

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/idemkit/idem"
)

// runKey is the context key of the current handler run.
type runKey struct{}

// handlerRun is what one run of a handler inside a transaction shares with
// the middleware.
type handlerRun struct {
	store any    // the middleware's *idem.Store
	key   string // the idempotency key the run protects
	tx    any    // Wrap's transaction
	lease any    // WrapLease's *idem.Lease

	mu  sync.Mutex
	err error
	// notAnOutcome: the handler called NotAnOutcome.
	notAnOutcome bool
}

func (r *handlerRun) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func (r *handlerRun) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Tx returns the transaction the middleware runs the handler in, from the
// handler's request context. TTx is the store's transaction type: *sql.Tx
// for database/sql backends, pgx.Tx for native pgx. It reports false outside
// the middleware (a safe method, a handler not wrapped) or for another TTx.
//
// Write the handler's effect in this transaction: it commits together with
// the stored response, or not at all. Do not commit or roll it back; the
// middleware does.
func Tx[TTx any](ctx context.Context) (TTx, bool) {
	run, ok := ctx.Value(runKey{}).(*handlerRun)
	if !ok {
		var zero TTx
		return zero, false
	}
	tx, ok := run.tx.(TTx)
	return tx, ok
}

// Lease returns the lease the middleware's WrapLease runs the handler under,
// from the handler's request context. TTx is the store's transaction type.
// It reports false outside WrapLease (under Wrap, use Tx) or for another
// TTx.
//
// Record a step after each external call, with that step's own writes
// (Lease.RecordStep), send Lease.DownstreamKey(step) to the provider as its
// idempotency key, and check Lease.Step first: a lease that Resumed work
// must not redo a recorded step. Do not Complete or Release the lease; the
// middleware does, with the handler's answer.
func Lease[TTx any](ctx context.Context) (*idem.Lease[TTx], bool) {
	run, ok := ctx.Value(runKey{}).(*handlerRun)
	if !ok {
		return nil, false
	}
	l, ok := run.lease.(*idem.Lease[TTx])
	return l, ok
}

// Fail reports that the handler failed with err, the way http.Error reports
// a message. Inside the middleware it discards whatever the handler wrote:
// the transaction rolls back and nothing is stored; if err is a retryable
// database error (a serialization failure or deadlock, see
// idem.ErrSerialization), the store runs the whole transaction, handler
// included, again; otherwise the client gets a 500 problem and err is
// logged. The first Fail of a run wins.
//
// Under WrapLease, Fail releases the lease instead: a retry resumes the work
// from its last recorded step.
//
// Outside the middleware, Fail writes a 500 problem to w. Return from the
// handler after calling it.
func Fail(w http.ResponseWriter, r *http.Request, err error) {
	if run, ok := r.Context().Value(runKey{}).(*handlerRun); ok {
		if err == nil {
			err = errors.New("idemhttp: Fail called with a nil error")
		}
		run.fail(err)
	}
	writeProblem(w, http.StatusInternalServerError, "handler-failed", "The operation failed and was rolled back.")
}
