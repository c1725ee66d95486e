package idemhttp

import (
	"net/http"

	"github.com/idemkit/idem"
)

// NotAnOutcome marks the answer the handler is writing to r as one that is
// not the outcome of its key: the request never began (it failed
// validation, asked for something absent, conflicted with a rule checked
// before any work), so the client may correct it and send it again with
// the same key. The answer is sent as written; the transaction rolls back,
// so nothing the handler wrote commits; nothing is stored, and the key
// stays free, so the next request with it, corrected or not, runs the
// handler. Call it before or after writing the answer, before returning.
//
// Under Wrap, 400 and 422 need no mark: by default
// (idem.DefaultStoreStatus) they are never stored. Under WrapLease they
// release the lease, which keeps the key for this request (the corrected
// one gets 422): mark them there too. Mark any other status the handler answers before it began:
// a 404 for a referenced resource that does not exist, a 409 for a
// precondition the client can fix. An answer about work that was done (a
// 201, or a 409 "already paid" that a retry must see again) is an outcome:
// do not mark it.
//
// Under WrapLease the lease's record is deleted (idem.Lease.Forget) so the
// key is free, provided the handler recorded no step; after a step its work
// began, and the middleware releases the lease and answers 500
// "handler-failed" instead. Fail takes precedence over the mark. Outside
// the middleware it does nothing.
func NotAnOutcome(r *http.Request) {
	if run, ok := r.Context().Value(runKey{}).(*handlerRun); ok {
		run.mu.Lock()
		run.notAnOutcome = true
		run.mu.Unlock()
	}
}

// outcome is what a run that answered returns to the store with its
// response: nil, or idem.ErrNotAnOutcome when the handler called
// NotAnOutcome.
func (r *handlerRun) outcome() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notAnOutcome {
		return idem.ErrNotAnOutcome
	}
	return nil
}
