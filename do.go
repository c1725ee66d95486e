package idem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Func is the work Do protects. It runs in the transaction that holds the
// claim and returns the response to store. Returning an error rolls
// everything back and stores nothing, so a retry does the work.
type Func[TTx any] func(ctx context.Context, tx TTx) (Response, error)

// rollbackTimeout bounds a rollback run after the caller's context ended.
const rollbackTimeout = 5 * time.Second

// Do owns the transaction: it begins one the way the backend needs, claims
// req's key, runs fn in the transaction, stores fn's response and commits.
// Losers get Replay, Mismatch or InFlight without running fn.
//
// fn's error rolls back and is returned unchanged. A response whose status
// Config.StoreStatus refuses (by default 5xx, 408, 425 and 429) is returned
// with Committed false and rolled back. Once fn has returned, the completion
// and COMMIT no longer end when ctx does: they run within
// Config.CommitTimeout, so a caller that hangs up does not make a healthy
// commit's outcome unknown. fn must not commit or roll back the
// transaction itself; if it does, Do returns a *TxEndedError. Errors the dialect classifies as retryable
// (serialization failure, deadlock), from any statement including fn's,
// retry the whole transaction up to Config.MaxAttempts times with jittered
// backoff; then Do returns a *RetryError. Everything else is returned wrapped
// with what failed; a commit whose outcome is unknown matches
// ErrCommitUnknown.
func (s *Store[TTx]) Do(ctx context.Context, req Request, fn Func[TTx]) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	if fn == nil {
		return Result{}, fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	if s.cfg.ReadFirst {
		if res, done, err := s.readFirst(ctx, req); err != nil || done {
			return res, err
		}
	}
	var last error
	for attempt := 1; attempt <= s.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if err := sleep(ctx, backoff(attempt)); err != nil {
				return Result{}, fmt.Errorf("idem: retry of key %q: %w (last error: %w)", req.Key, err, last)
			}
		}
		res, err := s.attempt(ctx, req, fn)
		if err == nil {
			return res, nil
		}
		var ferr fnError
		if errors.As(err, &ferr) {
			// The function's own error comes back unchanged, unless it is
			// one the dialect says a retry may cure.
			classified := s.d.Classify(ferr.err)
			if !retryable(classified) {
				return Result{}, ferr.err
			}
			err = classified
		} else if !retryable(err) {
			return Result{}, err
		}
		last = err
	}
	return Result{}, &RetryError{Attempts: s.cfg.MaxAttempts, Err: last}
}

// readFirst answers req from its record, read outside any transaction, when
// that record settles the outcome: completed with req's fingerprint (Replay)
// or claimed with another (Mismatch). Completed records do not change until
// they expire, so the read needs no lock. done is false when the key has no
// live record or it is in flight with req's fingerprint: the claim decides.
func (s *Store[TTx]) readFirst(ctx context.Context, req Request) (res Result, done bool, err error) {
	rec, found, err := s.d.Lookup(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
	if err != nil {
		return Result{}, false, s.failed(ctx, "read before claiming", req, s.d.Classify(err))
	}
	if !found {
		return Result{}, false, nil
	}
	res, err = s.judge(req, rec)
	if err != nil || res.Outcome == InFlight {
		return Result{}, false, err
	}
	return res, true, nil
}

// fnError marks an error returned by the caller's function, so Do returns it
// unchanged.
type fnError struct{ err error }

func (e fnError) Error() string { return e.err.Error() }
func (e fnError) Unwrap() error { return e.err }

// attempt runs one transaction.
func (s *Store[TTx]) attempt(ctx context.Context, req Request, fn Func[TTx]) (Result, error) {
	txCtx := followContext(ctx)
	defer txCtx.release()
	txn, err := s.driver.Begin(txCtx, dialect.BeginOptions{WaitBound: s.cfg.WaitBound})
	if err != nil {
		err = s.d.Classify(err)
		if errors.Is(err, ErrLockTimeout) && ctx.Err() == nil {
			// SQLite: another writer held the database past the wait bound.
			return Result{Outcome: InFlight}, nil
		}
		return Result{}, s.failed(ctx, "begin for", req, err)
	}
	finished := false
	defer func() {
		if !finished {
			rollback(ctx, txn)
		}
	}()

	claim, err := s.claim(ctx, txn, req)
	if err != nil {
		return Result{}, err
	}
	if claim.Outcome != Won {
		return claim.Result, nil
	}
	resp, err := fn(ctx, txn.Native())
	if err != nil {
		return Result{}, fnError{err}
	}
	if err := resp.validate(); err != nil {
		return Result{}, err
	}
	if !s.cfg.StoreStatus(resp.Status) {
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
			return Result{}, s.txEnded(req, err)
		}
		return Result{}, err
	}
	finished = true
	if err := txn.Commit(txCtx); err != nil {
		rollback(ctx, txn)
		err = s.d.Classify(err)
		if errors.Is(err, ErrTxDone) {
			return Result{}, s.txEnded(req, err)
		}
		return Result{}, s.failed(txCtx, "commit of", req, err)
	}
	return Result{Outcome: Won, Response: resp, Committed: true}, nil
}

// txEnded reports that the function committed or rolled back the
// transaction Do gave it. A read of the key tells which: a claim still in
// flight was committed by the function, with whatever it wrote.
func (s *Store[TTx]) txEnded(req Request, cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	e := &TxEndedError{Scope: req.Scope, Key: req.Key, Err: cause}
	rec, found, err := s.d.Lookup(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
	switch {
	case err != nil:
		e.Err = fmt.Errorf("%w (reading the key afterwards also failed: %w)", cause, s.d.Classify(err))
		e.Unknown = true
	case found && rec.State == dialect.InFlight && bytes.Equal(rec.Fingerprint, req.Fingerprint[:]):
		e.ClaimCommitted = true
		e.ExpiresAt = rec.ExpiresAt
	}
	return e
}

// txContext is the context a transaction of Do is begun with. It follows
// the caller's context until detach; after that the caller going away no
// longer ends it, and the timeout given to detach does.
type txContext struct {
	context.Context
	cancel context.CancelFunc
	follow func() bool // stops following the caller's context
	timer  *time.Timer
}

func followContext(ctx context.Context) *txContext {
	c, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &txContext{Context: c, cancel: cancel, follow: context.AfterFunc(ctx, cancel)}
}

// detach stops following the caller's context and bounds what is left by
// timeout. It reports false when the caller's context had already ended
// (the transaction may already be rolling back).
func (c *txContext) detach(timeout time.Duration) bool {
	if !c.follow() {
		return false
	}
	c.timer = time.AfterFunc(timeout, c.cancel)
	return true
}

func (c *txContext) release() {
	c.follow()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel()
}

// rollback ends txn even when ctx is already cancelled, within a bound.
func rollback(ctx context.Context, txn dialect.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = txn.Rollback(ctx) // nothing to keep; a failed rollback closes the connection in every driver
}

// backoff is the pause before attempt n (n >= 2): exponential from 2 ms,
// capped at 100 ms, with full jitter so racing retries spread out.
func backoff(n int) time.Duration {
	d := 2 * time.Millisecond << min(n-2, 6)
	d = min(d, 100*time.Millisecond)
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
