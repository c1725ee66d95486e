package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/internal/backoff"
)

// providerDelay is the fake provider call of the -5ms paths.
const providerDelay = 5 * time.Millisecond

// stormLease is the takeover storm's Config.Lease: how long the dead
// holders' leases last (WaitBound is half of it).
const stormLease = 4 * time.Second

// withCall is write after the provider call, both in write's transaction.
func withCall[TTx any](write func(ctx context.Context, tx TTx) error, d time.Duration) func(ctx context.Context, tx TTx) error {
	return func(ctx context.Context, tx TTx) error {
		if err := backoff.Sleep(ctx, d); err != nil {
			return err
		}
		return write(ctx, tx)
	}
}

// leaseOn returns Store.DoLease of store as a scheme: the provider call (d,
// outside any transaction), the order written with a recorded step.
func leaseOn[TTx any](store *idem.Store[TTx], insert func(ctx context.Context, tx TTx) error, d time.Duration) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		res, err := store.DoLease(ctx, req, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
			if err := backoff.Sleep(ctx, d); err != nil {
				return idem.Response{}, err
			}
			return response(n), l.RecordStep(ctx, "ordered", nil, insert)
		})
		return res.Outcome, err
	}
}

// stormOn returns the takeover storm's setup on drv's table: it claims n
// keys of ks in lease mode (Store.Lease) for holders that die at once
// (nothing is extended, completed or released), waits until their leases
// have ended, and returns the retry of request i (DoLease of key i mod n:
// the work is a step recording the order) with each key's count of
// completions.
func stormOn[TTx any](drv dialect.Driver[TTx], table string, insert func(ctx context.Context, tx TTx) error) func(ctx context.Context, ks keySpace, n int) (op, []atomic.Int32, error) {
	return func(ctx context.Context, ks keySpace, n int) (op, []atomic.Int32, error) {
		store, err := idem.New(drv, idem.Config{Table: table, Lease: stormLease, WaitBound: stormLease / 2})
		if err != nil {
			return nil, nil, err
		}
		for i := range int64(n) {
			l, err := store.Lease(ctx, request(ks, i, ""))
			if err == nil && l.Outcome != idem.Won {
				err = fmt.Errorf("outcome %v", l.Outcome)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("dead holder's claim of key %d: %w", i, err)
			}
		}
		done := make([]atomic.Int32, n)
		return func(ctx context.Context, i int64) (idem.Outcome, error) {
			k := i % int64(n)
			res, err := store.DoLease(ctx, request(ks, k, ""), func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
				if !l.Resumed() {
					return idem.Response{}, fmt.Errorf("key %d won without a takeover", k)
				}
				return response(k), l.RecordStep(ctx, "ordered", nil, insert)
			})
			if err == nil && res.Committed {
				done[k].Add(1)
			}
			return res.Outcome, err
		}, done, backoff.Sleep(ctx, stormLease+stormLease/10)
	}
}

// completedOnce fails unless every key completed exactly once: none twice
// (the guarantee), none never (a storm that left work undone).
func completedOnce(done []atomic.Int32) error {
	var bad []string
	for k := range done {
		if n := done[k].Load(); n != 1 {
			bad = append(bad, fmt.Sprintf("key %d %d times", k, n))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d keys did not complete exactly once: %s", len(bad), len(done), strings.Join(bad[:min(len(bad), 5)], ", "))
}

// stormAndQueue runs the takeover storm (-storm: every retry at once, as
// one cell of path storm) and the queue test (-queue) on t.
func stormAndQueue(ctx context.Context, o options, t *target, srv *servers, runID string, rep *report) error {
	if o.storm > 0 && ctx.Err() == nil {
		if t.storm == nil {
			rep.notes = append(rep.notes, t.name+": takeover storm skipped: no lease mode (its dialect is no dialect.Leaser)")
		} else {
			fn, done, err := t.storm(ctx, newKeySpace(runID, "storm", o.storm, 0), o.storm)
			if err != nil {
				return fmt.Errorf("takeover storm: %w", err)
			}
			c := measure(ctx, t, o.storm*o.stormRacers, 2*time.Minute, int64(o.storm*o.stormRacers), fn, nil)
			c.path = "storm"
			rep.add(c)
			check := "every key completed exactly once"
			if err = completedOnce(done); err != nil {
				check = "**failed: " + err.Error() + "**"
			}
			rep.notes = append(rep.notes, fmt.Sprintf("%s: takeover storm (path storm): %d keys whose holders died (Config.Lease %v), retried by %d clients each at once through DoLease: %.0f takeovers/s (%d in %v); %s",
				t.name, o.storm, stormLease, o.stormRacers, float64(c.outcomes[idem.Won])/c.elapsed.Seconds(), c.outcomes[idem.Won], c.elapsed.Round(time.Millisecond), check))
			logf("%s", rep.notes[len(rep.notes)-1])
			if err != nil {
				return fmt.Errorf("takeover storm: %w", err)
			}
		}
	}
	if o.queue > 0 && ctx.Err() == nil {
		if err := queueTest(ctx, o, t, srv, runID, rep); err != nil {
			return fmt.Errorf("queue test: %w", err)
		}
	}
	return nil
}
