package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LeaseFunc is the work DoLease protects: it gets the held lease (Resumed,
// Step and DownstreamKey say what was done already; RecordStep each step
// as it finishes) and returns the response to store.
type LeaseFunc[TTx any] func(ctx context.Context, l *Lease[TTx]) (Response, error)

// DoLease runs fn in lease mode: Lease, then fn while a heartbeat extends
// the lease every third of Config.Lease, then Complete with fn's response
// (or Release when its status is not to be stored). Losers get Replay,
// Mismatch or InFlight without running fn.
//
// The heartbeat does not end with ctx: a caller that hangs up does not let
// the lease lapse under work that goes on; it runs until fn has returned
// and the lease is completed or released. fn's context ends with ctx, and
// also, with ErrLeaseLost as its cause (context.Cause), as soon as the
// lease can no longer be known to be held: an extension found it taken
// over, or none succeeded (the database unreachable, say) for so long that
// the lease may have ended, judged on this process's monotonic clock a
// margin before its end. Work that honours its context stops before
// another process can take it over.
//
// If fn returns its response with ErrNotAnOutcome (the request never
// began), the lease is forgotten (Lease.Forget): its record is deleted, so
// the key is free for a corrected request, and the response is returned
// with Committed false. When fn recorded a step, its work began: the lease
// is released instead and DoLease fails with an error matching
// ErrWorkBegan and ErrInvalidResponse.
//
// If fn returns an error or panics, the lease is released, so a retry
// resumes from the last recovery point, and the error (or panic) comes
// back; when fn's context ended because the lease was lost, the error also
// matches ErrLeaseLost, and when the release failed, it holds that error
// too. The lease is released too when Complete refuses the response before
// storing it (too large, an invalid status, more than the database
// accepts). Once fn has returned, completing or releasing no longer ends
// with ctx; it runs within Config.CommitTimeout.
func (s *Store[TTx]) DoLease(ctx context.Context, req Request, fn LeaseFunc[TTx]) (Result, error) {
	if fn == nil {
		return Result{}, fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	l, err := s.Lease(ctx, req)
	if err != nil || l.Outcome != Won {
		if l == nil {
			return Result{}, err
		}
		return l.Result, err
	}
	// The work is done once fn returns: finishing it (completing or
	// releasing) must not end with a caller that hung up; CommitTimeout
	// bounds it instead, as in Do.
	finishCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeoutCause(context.WithoutCancel(ctx), s.cfg.CommitTimeout, ErrCommitTimeout)
	}
	hb := l.startHeartbeat(ctx)
	defer hb.stop()
	returned := false
	defer func() {
		if !returned { // fn panicked: let a retry resume at once
			fctx, cancel := finishCtx()
			defer cancel()
			_ = l.Release(fctx)
		}
	}()
	resp, err := fn(s.markRun(hb.work), l)
	returned = true
	fctx, cancel := finishCtx()
	defer cancel()
	if errors.Is(err, ErrNotAnOutcome) {
		return l.notAnOutcome(fctx, resp)
	}
	if err != nil {
		if cause := context.Cause(hb.work); errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
			err = errors.Join(err, cause) // the work stopped because its lease was lost
		}
		if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return Result{}, errors.Join(err, rerr)
		}
		return Result{}, err
	}
	res, err := l.Complete(fctx, resp, nil)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		// Nothing was stored (or, after a COMMIT of unknown outcome,
		// perhaps it was, and then the fenced release finds no lease):
		// let a retry take the work over now, not when the lease ends.
		// The completion may have used up the commit timeout: the
		// release gets one of its own.
		rctx, cancel := finishCtx()
		defer cancel()
		if rerr := l.Release(rctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return Result{}, errors.Join(err, rerr)
		}
	}
	return res, err
}

// notAnOutcome ends a lease whose function answered resp with
// ErrNotAnOutcome: its record is deleted (Forget), so the key is free, and
// resp is the answer, not stored. A response that could not be stored
// anyway (an invalid status) or a lease that recorded a step releases the
// lease instead, and fails.
func (l *Lease[TTx]) notAnOutcome(ctx context.Context, resp Response) (Result, error) {
	err := resp.validate()
	if err == nil {
		err = l.Forget(ctx)
		if err == nil {
			return Result{Outcome: Won, Response: resp}, nil
		}
		if errors.Is(err, ErrLeaseLost) {
			return Result{}, err
		}
	}
	if rerr := l.Release(ctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
		return Result{}, errors.Join(err, rerr)
	}
	return Result{}, err
}

// heartbeat keeps a lease alive while DoLease's function runs and until the
// lease is completed or released, and ends the function's context when the
// lease can no longer be known to be held.
type heartbeat struct {
	// work is the function's context.
	work   context.Context
	cancel context.CancelCauseFunc
	// stopBeats ends an extension in progress when the heartbeat stops.
	stopBeats context.CancelFunc
	done      chan struct{}
	wg        sync.WaitGroup
	stopOnce  sync.Once
}

// startHeartbeat extends l every third of the lease, on a context detached
// from ctx (a caller that hung up must not let the lease lapse under work
// that goes on), until stop. The work context ends with ctx, or with
// ErrLeaseLost once the lease is lost or can no longer be known held.
func (l *Lease[TTx]) startHeartbeat(ctx context.Context) *heartbeat {
	work, cancel := context.WithCancelCause(ctx)
	beats, stopBeats := context.WithCancel(context.WithoutCancel(ctx))
	h := &heartbeat{work: work, cancel: cancel, stopBeats: stopBeats, done: make(chan struct{})}
	period := max(l.store.cfg.Lease/3, time.Millisecond)
	h.wg.Go(func() {
		next := time.NewTimer(period)
		defer next.Stop()
		lapse := time.NewTimer(time.Until(l.knownHeldUntil()))
		defer lapse.Stop()
		for {
			select {
			case <-h.done:
				return
			case <-lapse.C:
				if until := l.knownHeldUntil(); time.Now().Before(until) {
					lapse.Reset(time.Until(until)) // a recorded step extended it meanwhile
					continue
				}
				cancel(fmt.Errorf("%w: no extension of the lease of key %q succeeded since %v; it may have ended",
					ErrLeaseLost, l.req.Key, l.knownHeldUntil().Add(-l.store.cfg.Lease+leaseMargin(l.store.cfg.Lease)).Format(time.RFC3339Nano)))
			case <-next.C:
				err := l.beat(beats)
				if errors.Is(err, ErrLeaseLost) {
					cancel(err)
					return
				}
				if err == nil {
					lapse.Reset(time.Until(l.knownHeldUntil()))
				}
				next.Reset(period)
			}
		}
	})
	return h
}

// beat runs one extension, bounded by how long the lease is known to be
// held (or, once that passed, by the holder's wait bound): an extension
// that lands later may find the lease taken over anyway.
func (l *Lease[TTx]) beat(ctx context.Context) error {
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	if ended {
		return nil
	}
	deadline := l.knownHeldUntil()
	if least := time.Now().Add(l.store.cfg.HolderWaitBound); deadline.Before(least) {
		deadline = least
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := l.Extend(ctx)
	if err != nil && errors.Is(err, ErrLeaseLost) {
		l.mu.Lock()
		ended = l.ended
		l.mu.Unlock()
		if ended { // completed or released meanwhile: nothing was lost
			return nil
		}
	}
	return err
}

// stop ends the heartbeat and the work context.
func (h *heartbeat) stop() {
	h.stopOnce.Do(func() {
		close(h.done)
		h.stopBeats()
		h.wg.Wait()
		h.cancel(nil)
	})
}
