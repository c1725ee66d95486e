package idem

import (
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
// fn's error rolls back and is returned unchanged. A response with a 5xx
// status is returned with Committed false and rolled back, unless
// Config.StoreServerErrors is set. Errors the dialect classifies as retryable
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
	txn, err := s.driver.Begin(ctx, dialect.BeginOptions{WaitBound: s.cfg.WaitBound})
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
	if resp.Status >= 500 && !s.cfg.StoreServerErrors {
		return Result{Outcome: Won, Response: resp}, nil
	}
	if err := claim.Complete(ctx, resp); err != nil {
		return Result{}, err
	}
	finished = true
	if err := txn.Commit(ctx); err != nil {
		rollback(ctx, txn)
		return Result{}, s.failed(ctx, "commit of", req, s.d.Classify(err))
	}
	return Result{Outcome: Won, Response: resp, Committed: true}, nil
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
