package conformance

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// testPurgeBatchSizes: every batch deletes at most Config.PurgeBatch
// records, and Purge stops after the first batch that was not full, or,
// where batches may be partial (Capabilities.PartialPurgeBatches), after the
// first that deleted nothing. The case's records share one scope, so a
// backend that purges one routing value per batch fills its batches too.
func testPurgeBatchSizes[TTx any](t *testing.T, b Backend[TTx]) {
	for _, tc := range []struct {
		expired, batch, wantBatches int
	}{
		{0, 5, 1},
		{4, 5, 1},
		{5, 5, 2},
		{6, 5, 2},
		{10, 5, 3},
		{11, 4, 3},
		{12, 4, 4},
	} {
		t.Run(fmt.Sprintf("%d-expired-by-%d", tc.expired, tc.batch), func(t *testing.T) {
			clk := newClock(t0)
			e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now, PurgeBatch: tc.batch})
			for i := range tc.expired {
				e.do(e.Store, request(keyN("old", i), "x"), e.work("batch-old", created("old")))
			}
			clk.add(lifetime)
			live := request("live", "x")
			e.do(e.Store, live, e.work("batch-live", created("live")))
			res, err := e.Store.Purge(e.Ctx)
			if err != nil {
				e.Fatalf("old-*", "Purge: %v", err)
			}
			want := tc.wantBatches
			if e.Driver.Dialect().Capabilities().PartialPurgeBatches && tc.expired%tc.batch != 0 {
				want++ // the short batch, then an empty one
			}
			if res.Deleted != int64(tc.expired) || res.Batches != want {
				e.Fatalf("old-*", "Purge = %+v, want %d deleted in %d batches of at most %d", res, tc.expired, want, tc.batch)
			}
			if n := e.Records(); n != 1 {
				e.Fatalf(live.Key, "records after purge = %d, want only the live one", n)
			}
		})
	}
}

// testPurgeBesideTakeover: a purge that runs while a claim is taking over
// an expired record (its transaction still open) deletes the other expired
// records but never the one being taken over, whether the backend lets it
// skip the held row or makes it wait. Every check runs and reports, so a
// purge that waits and then deletes the row just taken over (one that
// picked the expired keys without a lock and deletes them by key, say)
// shows both mistakes, and the record's loss above all.
func testPurgeBesideTakeover[TTx any](t *testing.T, b Backend[TTx]) {
	const stale = 3
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	old := request("taken-over", "old body")
	e.do(e.Store, old, e.work("purge-old", created("old")))
	for i := range stale {
		e.do(e.Store, request(keyN("stale", i), "x"), e.work("purge-stale", created("stale")))
	}
	clk.add(lifetime) // everything has expired

	next := request("taken-over", "new body")
	claim, finish := e.holdClaim(next, "purge-new") // the takeover, still open
	type purged struct {
		res idem.PurgeResult
		err error
	}
	ch := make(chan purged, 1)
	go func() {
		res, err := e.Store.Purge(e.Ctx)
		ch <- purged{res, err}
	}()
	// With row locks, purge skips the held row and returns without waiting
	// for the claim; with a database write lock (SQLite) it can only wait.
	skips := !e.Driver.Dialect().Capabilities().DatabaseWriteLock
	wait := 300 * time.Millisecond
	if skips {
		wait = 20 * time.Second
	}
	var (
		p        purged
		returned bool
	)
	select {
	case p = <-ch:
		returned = true
	case <-time.After(wait):
		if skips {
			e.Errorf(next.Key, "Purge waited for the claim holding an expired row; it must skip rows other transactions hold")
		}
	}
	if err := claim.Complete(e.Ctx, created("new")); err != nil {
		e.Fatalf(next.Key, "Complete: %v", err)
	}
	finish(true)
	if !returned {
		select {
		case p = <-ch:
		case <-time.After(time.Minute):
			e.Fatalf(next.Key, "Purge did not return after the takeover committed")
		}
	}
	if p.err != nil {
		e.Fatalf(next.Key, "Purge beside the takeover: %v", p.err)
	}
	if n := e.Count("SELECT COUNT(*) FROM " + e.Table + " WHERE idem_key = 'taken-over'"); n != 1 {
		e.Errorf(next.Key, "the record taken over while Purge ran is gone (%d rows): Purge deleted a row another transaction had just made live; "+
			"check expires_at again on the row it deletes, under its lock", n)
	} else if rec, err := e.Store.Lookup(e.Ctx, next.Scope, next.Key); err != nil || !rec.Completed || rec.Fingerprint != next.Fingerprint || string(rec.Response.Body) != "new" {
		e.Errorf(next.Key, "taken-over record after purge: %+v, %v, want the new response", rec, err)
	}
	if p.res.Deleted != stale {
		e.Errorf(next.Key, "Purge beside the takeover deleted %d records, want the %d other expired ones", p.res.Deleted, stale)
	}
	if n := e.Records(); n != 1 {
		e.Errorf(next.Key, "records = %d, want only the taken-over one", n)
	}
	if n := e.effectCount("purge-new"); n != 1 {
		e.Errorf(next.Key, "effects = %d, want 1", n)
	}
	// A purge after the takeover committed leaves the live record alone.
	if again, err := e.Store.Purge(e.Ctx); err != nil || again.Deleted != 0 {
		e.Errorf(next.Key, "Purge after the takeover: %+v, %v, want nothing deleted", again, err)
	}
	if _, err := e.Store.Lookup(e.Ctx, next.Scope, next.Key); err != nil {
		e.Errorf(next.Key, "taken-over record after a second purge: %v", err)
	}
}

// testPurgersRace: two replicas each running the purge schedule on one
// table at once get no errors, delete every expired record exactly once
// between them, and keep every live one.
func testPurgersRace[TTx any](t *testing.T, b Backend[TTx]) {
	const expired, live = 60, 5
	clk := newClock(t0)
	cfg := idem.Config{Retention: retention, Clock: clk.Now, PurgeBatch: 7, PurgeDutyCycle: 1}
	e := setup(t, b, cfg)
	for i := range expired {
		e.do(e.Store, request(keyN("old", i), "x"), e.work("race-old", created("old")))
	}
	clk.add(lifetime)
	for i := range live {
		e.do(e.Store, request(keyN("live", i), "x"), e.work("race-live", created("live")))
	}
	cfg.Table, cfg.WaitBound = e.Table, e.Store.Config().WaitBound
	other, err := idem.New(e.Driver, cfg) // another replica's store (Open may give another database)
	if err != nil {
		e.Fatalf("", "idem.New: %v", err)
	}

	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	var (
		mu      sync.Mutex
		deleted int64
		runs    [2]int
		errs    []error
		wg      sync.WaitGroup
	)
	for i, p := range []idem.Purger{e.Store, other} {
		wg.Go(func() {
			_ = idem.RunPurges(ctx, p, idem.PurgeSchedule{
				Interval: 5 * time.Millisecond,
				Jitter:   0.5,
				Report: func(r idem.PurgeRun) {
					mu.Lock()
					defer mu.Unlock()
					runs[i]++
					deleted += r.Result.Deleted
					if r.Err != nil && ctx.Err() == nil {
						errs = append(errs, r.Err)
					}
				},
			})
		})
	}
	// Run until both replicas have purged a few times after everything
	// expired was gone, so a double count would show.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		doneRuns := min(runs[0], runs[1])
		n := deleted
		mu.Unlock()
		if (n >= expired && doneRuns >= 5) || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	for _, err := range errs {
		e.Errorf("old-*", "a purge run failed: %v", err)
	}
	if deleted != expired {
		e.Fatalf("old-*", "the two purgers deleted %d records between them (runs %v), want %d, each once", deleted, runs, expired)
	}
	if n := e.Records(); n != live {
		e.Fatalf("live-*", "records after the race = %d, want the %d live ones", n, live)
	}
	if r := e.do(e.Store, request(keyN("live", 0), "x"), e.work("race-live", created("again"))); r.Outcome != idem.Replay {
		e.Fatalf(keyN("live", 0), "a live record after the race: %v, want replay", r.Outcome)
	}
}
