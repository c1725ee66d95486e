package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/internal/backoff"
)

// Func is the work Do protects. It runs in the transaction that holds the
// claim and returns the response to store. Returning an error rolls
// everything back and stores nothing, so a retry does the work. Returning
// a response with ErrNotAnOutcome (a request that failed validation) rolls
// back too, and Do returns that response as the answer, not stored.
type Func[TTx any] func(ctx context.Context, tx TTx) (Response, error)

// Do owns the transaction: it begins one the way the backend needs, claims
// req's key, runs fn in the transaction, stores fn's response and commits.
// Losers get Replay, Mismatch or InFlight without running fn. opts choose how
// this call's transaction begins (Isolation).
//
// fn's error rolls back and is returned unchanged, except ErrNotAnOutcome:
// then fn's response is returned with Committed false and rolled back, and
// the key stays free. A response whose status Config.StoreStatus refuses
// (by default 5xx, 400, 408, 422, 425 and 429) is returned the same way. When a statement of fn failed and
// the database aborted the transaction (PostgreSQL, see ErrTxAborted), fn's
// response cannot be stored: Do rolls back, and returns a client error
// (4xx) with Committed false and Result.NotStored set, and any other
// response as an error matching ErrTxAborted, which is not retried. Errors
// that a retry of the whole
// transaction may cure (ErrSerialization, ErrDeadlock, ErrUnavailable), from
// any statement including fn's, retry it up to Config.MaxAttempts times
// with jittered backoff; then Do returns a *RetryError. Once fn has
// returned, the completion and COMMIT no longer end when ctx does: they run
// within Config.CommitTimeout, so a caller that hangs up does not make a
// healthy commit's outcome unknown. A response to store whose caller's ctx
// has ended before the completion begins is not stored: Do rolls back and
// returns ctx's error. A commit whose outcome is unknown
// matches ErrCommitUnknown. fn must not commit or roll back the transaction
// itself; if it does, Do returns a *TxEndedError.
func (s *Store[TTx]) Do(ctx context.Context, req Request, fn Func[TTx], opts ...Option) (res Result, err error) {
	if s.doObserver != nil {
		var done func(Result, error)
		ctx, done = s.doObserver.StartDo(ctx, req)
		defer func() { done(res, err) }()
	}
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	if fn == nil {
		return Result{}, fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	if s.readsFirst() {
		if res, done, err := s.readFirst(ctx, req); err != nil || done {
			return res, err
		}
	}
	o := newCallOptions(opts)
	err = s.retry(ctx, req, func() error {
		var err error
		res, err = s.attempt(ctx, req, fn, o)
		var ferr fnError
		if errors.As(err, &ferr) {
			// The function's own error comes back unchanged, unless it is
			// one the dialect says a retry may cure.
			if classified := s.d.Classify(ferr.err); retryable(classified) {
				return classified
			}
			return ferr.err
		}
		return err
	})
	if err != nil {
		var stopped *stoppedError
		if errors.As(err, &stopped) {
			return Result{}, fmt.Errorf("idem: retry of key %q: %w (last error: %w)", req.Key, stopped.ctxErr, stopped.last)
		}
		return Result{}, err
	}
	return res, nil
}

// readFirst answers req from its record, read outside any transaction, when
// that record settles the outcome: completed with req's fingerprint (Replay)
// or claimed with another (Mismatch). Completed records do not change until
// they expire, so the read needs no lock. done is false when the key has no
// live record or it is pending with req's fingerprint, and when the read
// failed (a connection lost, say) while ctx is still live: the claim
// decides, with Do's retries.
func (s *Store[TTx]) readFirst(ctx context.Context, req Request) (res Result, done bool, err error) {
	rec, found, err := s.d.Lookup(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, false, s.failed(ctx, "read before claiming", req, s.d.Classify(err))
		}
		// The read only saves work; the claim decides, and its errors
		// are retried the way the read's would not be.
		return Result{}, false, nil
	}
	if !found {
		return Result{}, false, nil
	}
	res, err = s.judge(req, rec)
	if err != nil || res.Outcome == InFlight {
		return Result{}, false, err
	}
	s.claimed(ctx, req, res.Outcome, time.Time{}, true)
	return res, true, nil
}

// fnError marks an error returned by the caller's function, so Do returns it
// unchanged.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }
func (e fnError) Unwrap() error { return e.err }

// attempt runs one transaction.
func (s *Store[TTx]) attempt(ctx context.Context, req Request, fn Func[TTx], o callOptions) (Result, error) {
	txCtx := followContext(ctx)
	defer txCtx.release()
	started := s.startClock()
	tx, err := s.driver.Begin(txCtx, dialect.BeginOptions{Isolation: o.isolation, WaitBound: s.cfg.WaitBound})
	if err != nil {
		err = s.d.Classify(err)
		if errors.Is(err, ErrLockTimeout) && ctx.Err() == nil {
			// SQLite: another writer held the database past the wait
			// bound; the key's record says whether that was its holder.
			res := s.waitedOut(ctx, req)
			s.claimed(ctx, req, res.Outcome, started, false)
			return res, nil
		}
		return Result{}, s.failed(ctx, "begin for", req, err)
	}
	finished := false
	defer func() {
		if !finished {
			rollback(ctx, tx)
		}
	}()

	// Every read through the pool comes after the rollback: the
	// transaction holds a connection, maybe the pool's only one.
	end := func() {
		finished = true
		rollback(ctx, tx)
	}
	claim, err := s.claim(ctx, tx, req, end)
	if err != nil {
		return Result{}, err
	}
	if claim.Outcome != Won {
		return claim.Result, nil
	}
	resp, err := fn(s.markRun(ctx), tx.Native())
	notAnOutcome := errors.Is(err, ErrNotAnOutcome)
	if err != nil && !notAnOutcome {
		return Result{}, fnError{err}
	}
	if err := resp.validate(); err != nil {
		return Result{}, err
	}
	if notAnOutcome || !s.cfg.StoreStatus(resp.Status) {
		return Result{Outcome: Won, Response: resp}, nil
	}
	// The work is done: from here a caller that goes away must not turn
	// the commit into one whose outcome is unknown. The commit timeout
	// bounds it instead.
	if !txCtx.detach(s.cfg.CommitTimeout) {
		return Result{}, s.failed(ctx, "complete", req, ctx.Err())
	}
	if err := claim.Complete(txCtx, resp); err != nil {
		if errors.Is(err, ErrTxDone) {
			end()
			return Result{}, s.txEnded(req, err)
		}
		if errors.Is(err, ErrTxAborted) {
			end()
			return unstored(req, resp, err)
		}
		return Result{}, err
	}
	finished = true
	if err := tx.Commit(txCtx); err != nil {
		rollback(ctx, tx)
		err = s.d.Classify(err)
		if errors.Is(err, ErrTxDone) {
			return Result{}, s.txEnded(req, err)
		}
		if errors.Is(err, ErrTxAborted) {
			// The completion held back for COMMIT met the aborted
			// transaction, or COMMIT rolled it back.
			return unstored(req, resp, s.failed(txCtx, "commit of", req, err))
		}
		if errors.Is(err, ErrCommitUnknown) && s.observing() {
			s.emit(ctx, Event{Kind: EventCommitUnknown, Scope: req.Scope, Key: req.Key, Err: err})
		}
		return Result{}, s.failed(txCtx, "commit of", req, err)
	}
	return Result{Outcome: Won, Response: resp, Committed: true}, nil
}

// unstored is the outcome of work whose transaction a failed statement
// aborted before the function answered (err matches ErrTxAborted): it was
// rolled back and resp cannot be stored. A client error (4xx) is the
// function's own answer to that failure (a unique violation answered 409,
// say): it is returned, not stored, with NotStored saying why. Any other
// answer reports work that did not happen: an error.
func unstored(req Request, resp Response, err error) (Result, error) {
	if resp.Status >= 400 && resp.Status < 500 {
		return Result{Outcome: Won, Response: resp, NotStored: err}, nil
	}
	return Result{}, fmt.Errorf("idem: key %q in scope %q: the function answered status %d after a statement of its transaction failed and aborted it; the work was rolled back and nothing stored: %w",
		req.Key, req.Scope, resp.Status, err)
}

// txEnded reports that the function committed or rolled back the
// transaction Do gave it. A read of the key tells which: a claim still
// pending was committed by the function, with whatever it wrote. Do's own
// transaction must have been ended first: it may hold the pool's only
// connection (a driver that keeps one of its own for the transaction).
func (s *Store[TTx]) txEnded(req Request, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	e := &TxEndedError{Scope: req.Scope, Key: req.Key, Err: cause}
	rec, found, err := s.d.Lookup(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
	switch {
	case err != nil:
		e.Err = fmt.Errorf("%w (reading the key afterwards also failed: %w)", cause, s.d.Classify(err))
		e.Unknown = true
	case found && rec.State == dialect.Pending && bytes.Equal(rec.Fingerprint, req.Fingerprint[:]):
		e.ClaimCommitted = true
		e.ExpiresAt = rec.ExpiresAt
	}
	return e
}

// retry runs attempt until it succeeds, fails with an error a retry of the
// whole transaction cannot cure, or Config.MaxAttempts ran (then it returns
// a *RetryError), pausing with jittered backoff in between. When ctx ends
// during a pause it returns a *stoppedError.
func (c *core) retry(ctx context.Context, req Request, attempt func() error) error {
	var last error
	for n := 1; n <= c.cfg.MaxAttempts; n++ {
		if n > 1 {
			if err := backoff.Sleep(ctx, pause(n)); err != nil {
				return &stoppedError{ctxErr: err, last: last}
			}
		}
		err := attempt()
		if err == nil || !retryable(err) {
			return err
		}
		last = err
		if n < c.cfg.MaxAttempts && c.observing() {
			c.emit(ctx, Event{Kind: EventRetry, Scope: req.Scope, Key: req.Key, Cause: retryCause(err), Attempt: n, Err: err})
		}
	}
	return &RetryError{Attempts: c.cfg.MaxAttempts, Err: last}
}

// stoppedError: the context ended while retry waited to try again.
type stoppedError struct{ ctxErr, last error }

func (e *stoppedError) Error() string {
	return fmt.Sprintf("%v (last error: %v)", e.ctxErr, e.last)
}

func (e *stoppedError) Unwrap() []error { return []error{e.ctxErr, e.last} }

// pause is the wait before attempt n (n >= 2): exponential from 2 ms,
// capped at 100 ms, with full jitter so racing retries spread out.
func pause(n int) time.Duration {
	return backoff.Full(backoff.Step(n-1, 2*time.Millisecond, 100*time.Millisecond))
}
