package conformance

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// testWaitBoundScope: the wait bound applies to the claim only, whether it
// inserted the record or took an expired one over. The function's own
// statements afterwards wait for locks as the transaction would without
// idem (here: without limit).
func testWaitBoundScope[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 200 * time.Millisecond
	for _, tc := range []struct {
		name     string
		takeover bool
	}{
		{"fresh key", false},
		{"expired key taken over", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			e := setup(t, b, idem.Config{WaitBound: bound, Retention: retention, Clock: clk.Now})
			if e.Driver.Dialect().Capabilities().DatabaseWriteLock {
				t.Skipf("[%s] writers wait on the whole database: no row lock to wait for after the claim", e.Backend)
			}
			req := request("bound-scope", "x")
			if tc.takeover {
				e.do(e.Store, req, e.work("bound-scope-old", created("old")))
				clk.add(lifetime)
			}
			e.Exec(e.Driver.Pool(), e.effectInsert(DefaultScope, "row-lock"))
			lockRow := rowLock(e.effects)
			holder := e.Begin()
			defer holder.Rollback(e.Ctx)
			hq, err := e.Driver.Wrap(holder.Native())
			if err != nil {
				e.T.Fatal(err)
			}
			e.Exec(hq, lockRow)

			ch := e.goDo(e.Ctx, e.Store, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
				q, err := e.Driver.Wrap(tx)
				if err != nil {
					return idem.Response{}, err
				}
				if _, err := q.Exec(ctx, lockRow); err != nil { // waits for holder
					return idem.Response{}, err
				}
				if err := e.effect(ctx, tx, "bound-scope"); err != nil {
					return idem.Response{}, err
				}
				return created("ok"), nil
			})
			select {
			case o := <-ch:
				e.Fatalf(req.Key, "the function's statement stopped waiting after %v (%+v, %v): the claim's wait bound %v leaked into it", o.elapsed, o.res, o.err, bound)
			case <-time.After(5 * bound):
			}
			if err := holder.Rollback(e.Ctx); err != nil {
				e.Fatalf(req.Key, "holder's Rollback: %v", err)
			}
			o := e.await(req.Key, ch, time.Minute, causeAfterCommit)
			if o.err != nil || o.res.Outcome != idem.Won || !o.res.Committed {
				e.Fatalf(req.Key, "Do after the lock was released: %+v, %v, want won", o.res, o.err)
			}
			if n := e.effectCount("bound-scope"); n != 1 {
				e.Fatalf(req.Key, "effects = %d, want 1", n)
			}
		})
	}
}

// rowLock is a statement that takes the exclusive lock of effects' row
// 'row-lock': a locking read, not an UPDATE, as a sharded backend may route
// the effects table by k, which vtgate lets no UPDATE set (VT12001).
func rowLock(effects string) string {
	return "SELECT k FROM " + effects + " WHERE scope = " + sqlString(DefaultScope) + " AND k = 'row-lock' FOR UPDATE"
}

// testSubMillisecondWaitBound: a wait bound below one millisecond is still a
// bound: it must not turn into "wait forever" (PostgreSQL's lock_timeout 0,
// for example).
func testSubMillisecondWaitBound[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{WaitBound: 100 * time.Microsecond})
	req := request("tiny-bound", "x")
	claim, finish := e.holdClaim(req, "tiny-bound")
	o := e.await(req.Key, e.goDo(e.Ctx, e.Store, req, e.work("tiny-bound", created("loser"))), 15*time.Second, causeUnbounded)
	if o.err != nil || o.res.Outcome != idem.InFlight {
		e.Fatalf(req.Key, "loser with a 100µs bound: %+v, %v, want in-flight", o.res, o.err)
	}
	if o.elapsed > 5*time.Second {
		e.Fatalf(req.Key, "loser gave up after %v, want promptly", o.elapsed)
	}
	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	finish(true)
	if n := e.effectCount("tiny-bound"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

// testBusyIsNotInFlight: while another transaction holds a key, a request
// for another key is no loser. Where writers take the whole database
// (Capabilities.DatabaseWriteLock) it waits out the bound and reports
// InFlight with Busy set and no record, since nothing holds its key; a key
// whose committed record is pending (a live lease) is InFlight with that
// record and its lease end, not Busy. Elsewhere the other key simply wins.
func testBusyIsNotInFlight[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 200 * time.Millisecond
	e := setup(t, b, idem.Config{WaitBound: bound, Lease: lease})
	leased := request("busy-leased", "x")
	holder := e.acquire(e.Store, leased, idem.Won)
	_, finish := e.holdClaim(request("busy-holder", "x"), "busy-holder")
	defer finish(false)

	free := request("busy-free", "x")
	r, err := e.Store.Do(e.Ctx, free, e.work("busy-free", created("free")))
	if err != nil {
		e.Fatalf(free.Key, "Do beside another key's open claim: %v", err)
	}
	leasedRes, err := e.Store.Do(e.Ctx, leased, e.work("busy-leased", created("leased")))
	if err != nil {
		e.Fatalf(leased.Key, "Do on a leased key: %v", err)
	}
	if leasedRes.Outcome != idem.InFlight || leasedRes.Busy || leasedRes.Record.LeaseUntil.IsZero() {
		e.Fatalf(leased.Key, "Do on a leased key: %v busy %v record %+v, want in-flight, not busy, with the lease's end", leasedRes.Outcome, leasedRes.Busy, leasedRes.Record)
	}
	if e.Driver.Dialect().Capabilities().DatabaseWriteLock {
		if r.Outcome != idem.InFlight || !r.Busy || r.Record.Key != "" {
			e.Fatalf(free.Key, "Do while the database is held: %v busy %v record %+v, want in-flight, busy, no record", r.Outcome, r.Busy, r.Record)
		}
		finish(false)
		if r := e.do(e.Store, free, e.work("busy-free", created("free"))); r.Outcome != idem.Won || r.Busy {
			e.Fatalf(free.Key, "Do once the database is free: %v busy %v, want won", r.Outcome, r.Busy)
		}
	} else if r.Outcome != idem.Won || r.Busy {
		e.Fatalf(free.Key, "Do beside another key's open claim: %v busy %v, want won", r.Outcome, r.Busy)
	}
	if n := e.effectCount("busy-free"); n != 1 {
		e.Fatalf(free.Key, "effects = %d, want 1", n)
	}
	if _, err := holder.Complete(e.Ctx, created("leased"), nil); err != nil {
		e.Fatalf(leased.Key, "Complete: %v", err)
	}
}
