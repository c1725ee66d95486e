package conformance

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

const retention = 24 * time.Hour

// lifetime is how long a record of Do or Claim lives when its work took
// less than the grace: the claim sets its expiry the retention plus
// idem.ExpiryGrace of it ahead, and the completion leaves it there.
var lifetime = retention + idem.ExpiryGrace(retention)

func testRetentionTakeover[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	req := request("expire-1", "old body")
	e.do(e.Store, req, e.work("expire-1", created("old")))

	clk.add(lifetime) // expires_at <= now: expired
	next := request("expire-1", "new body")
	res := e.do(e.Store, next, e.work("expire-1", created("new")))
	if res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "claim after retention: %v, want won (takeover)", res.Outcome)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil {
		e.Fatalf(req.Key, "Lookup: %v", err)
	}
	if rec.Fingerprint != next.Fingerprint || string(rec.Response.Body) != "new" {
		e.Fatalf(req.Key, "after takeover the record holds %q, want the new response", rec.Response.Body)
	}
	if !rec.CreatedAt.Equal(clk.Now()) || !rec.ExpiresAt.Equal(clk.Now().Add(lifetime)) {
		e.Fatalf(req.Key, "after takeover: created %v expires %v, want %v and %v",
			rec.CreatedAt, rec.ExpiresAt, clk.Now(), clk.Now().Add(lifetime))
	}
	if n := e.effectCount("expire-1"); n != 2 {
		e.Fatalf(req.Key, "effects = %d, want 2 (the window passed, so the work ran again)", n)
	}
	if n := e.Records(); n != 1 {
		e.Fatalf(req.Key, "records = %d, want 1", n)
	}
}

func testLiveKeyNeverTakenOver[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	req := request("live-1", "body")
	e.do(e.Store, req, e.work("live-1", created("kept")))

	clk.add(lifetime - time.Microsecond) // one microsecond before expiry
	if r := e.do(e.Store, request("live-1", "other"), e.work("live-1", created("x"))); r.Outcome != idem.Mismatch {
		e.Fatalf(req.Key, "other body just before expiry: %v, want mismatch", r.Outcome)
	}
	if r := e.do(e.Store, req, e.work("live-1", created("x"))); r.Outcome != idem.Replay || string(r.Response.Body) != "kept" {
		e.Fatalf(req.Key, "same body just before expiry: %v, want replay", r.Outcome)
	}
	if n := e.effectCount("live-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
	clk.add(time.Microsecond)
	if _, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key); err == nil {
		e.Fatalf(req.Key, "Lookup found the record at its expiry instant")
	}
}

// testConcurrentTakeover: claims of an expired key while another claim is
// taking it over (its transaction still open) wait for that takeover and
// replay its answer once it commits: exactly one of them does the work. The
// interleavings are forced, not left to timing: first a takeover is held
// open until every other claim is waiting, and only then committed; then
// claims of an expired key nobody holds send their statements in lockstep,
// so each reads the expired row before any writes. A takeover that reads
// the expired row and then updates it without checking again under the row
// lock takes the key a second time in one of them.
func testConcurrentTakeover[TTx any](t *testing.T, b Backend[TTx]) {
	const n = 7
	clk := newClock(t0)
	e := setupObserved(t, b, idem.Config{Retention: retention, Clock: clk.Now, MaxAttempts: 40})
	req := request("takeover-1", "old")
	e.do(e.Store, req, e.work("takeover-old", created("old")))
	clk.add(2 * retention)

	next := request("takeover-1", "new")
	claim, finish := e.holdClaim(next, "takeover-new") // the first takeover, held open
	waits, losers := e.waitingLosers(e.Ctx, n, next, func(i int) idem.Func[TTx] {
		return e.work("takeover-new", created(fmt.Sprintf("second-%d", i)))
	})
	if err := claim.Complete(e.Ctx, created("new")); err != nil {
		e.Fatalf(next.Key, "Complete of the first takeover: %v", err)
	}
	released := finish(true)
	for i, ch := range losers {
		o := e.await(next.Key, ch, time.Minute, causeAfterCommit)
		if o.err != nil || o.res.Outcome != idem.Replay || string(o.res.Response.Body) != "new" {
			e.Errorf(next.Key, "claim %d beside the held takeover: %+v, %v, want a replay of the first takeover's answer", i, o.res, o.err)
		}
		e.answeredAfter(next.Key, o, released)
	}
	if err := e.obs.CheckRetries(waits); err != nil {
		e.Fatalf(next.Key, "%v", err)
	}
	if c := e.effectCount("takeover-new"); c != 1 {
		e.Fatalf(req.Key, "effects after takeover = %d, want 1", c)
	}
	if c := e.effectCount("takeover-old"); c != 1 {
		e.Fatalf(req.Key, "effects of the expired record's work = %d, want 1", c)
	}

	// Then claims that arrive together at an expired key nobody holds,
	// their statements in lockstep: each reads before any writes, so a
	// takeover that reads the expired row and then updates it without
	// checking again under the row lock lets two of them win.
	again := request("takeover-2", "old")
	e.do(e.Store, again, e.work("takeover-2-old", created("old")))
	clk.add(2 * retention)
	e.obs.reset()
	e.obs.inLockstep(n, 300*time.Millisecond)
	var wg sync.WaitGroup
	results := make([]outcome, n)
	retake := request("takeover-2", "new")
	for i := range n {
		wg.Go(func() {
			res, err := e.Store.Do(AsClient(e.Ctx, i), retake, e.work("takeover-2-new", created(fmt.Sprintf("new-%d", i))))
			results[i] = outcome{res: res, err: err, end: time.Now()}
		})
	}
	wg.Wait()
	e.oneWinner(retake.Key, results)
	if c := e.effectCount("takeover-2-new"); c != 1 {
		e.Fatalf(retake.Key, "effects after claims in lockstep took an expired key over = %d, want 1", c)
	}
}

func testPurgeWhileClaiming[TTx any](t *testing.T, b Backend[TTx]) {
	const expired, live, claims, batch = 30, 5, 10, 7
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now, PurgeBatch: batch, MaxAttempts: 20})
	for i := range expired {
		e.do(e.Store, request(keyN("old", i), "x"), e.work("purge-old", created("old")))
	}
	clk.add(lifetime / 2)
	for i := range live {
		e.do(e.Store, request(keyN("live", i), "x"), e.work("purge-live", created("live")))
	}
	clk.add(lifetime / 2) // the first 30 have expired, the last 5 have not

	var wg sync.WaitGroup
	errs := make(chan error, claims)
	for i := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := e.Store.Do(e.Ctx, request(keyN("new", i), "x"), e.work("purge-new", created("new"))); err != nil {
				errs <- err
			}
		}()
	}
	res, err := e.Store.Purge(e.Ctx)
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Errorf("new-*", "claim during purge: %v", err)
	}
	if err != nil {
		e.Fatalf("old-*", "Purge: %v", err)
	}
	if res.Deleted != expired {
		e.Fatalf("old-*", "Purge deleted %d, want %d", res.Deleted, expired)
	}
	if res.Batches < (expired+batch-1)/batch {
		e.Fatalf("old-*", "Purge ran %d batches of at most %d, want at least %d", res.Batches, batch, (expired+batch-1)/batch)
	}
	if n := e.Records(); n != live+claims {
		e.Fatalf("old-*", "records after purge = %d, want %d live", n, live+claims)
	}
	for i := range live {
		if _, err := e.Store.Lookup(e.Ctx, request(keyN("live", i), "").Scope, keyN("live", i)); err != nil {
			e.Fatalf(keyN("live", i), "live record after purge: %v", err)
		}
	}
	if again, err := e.Store.Purge(e.Ctx); err != nil || again.Deleted != 0 {
		e.Fatalf("old-*", "second Purge: %+v, %v, want nothing deleted", again, err)
	}
}

func keyN(prefix string, i int) string {
	return prefix + "-" + string(rune('a'+i/26)) + string(rune('a'+i%26))
}
