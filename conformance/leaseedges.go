package conformance

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Lease mode at its edges: a holder that lost its lease long ago, many
// claims on one live lease, a holder cut off from its database or left by
// its caller, a response the store refuses, a record gone before Resume.

// staleRefused checks that a holder whose lease was lost can write nothing
// under it: Extend, RecordStep (with its step's own write), Complete (with
// its final write) and Release all fail with ErrLeaseLost, and nothing the
// stale holder's functions wrote is left.
func (e *env[TTx]) staleRefused(stale *idem.Lease[TTx], label string) {
	e.T.Helper()
	key := e.T.Name()
	if err := stale.Extend(e.Ctx); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(key, "stale Extend (token %d): %v, want ErrLeaseLost", stale.Token(), err)
	}
	if err := stale.RecordStep(e.Ctx, "stale-step", []byte("stale"), e.step(label)); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(key, "stale RecordStep (token %d): %v, want ErrLeaseLost", stale.Token(), err)
	}
	if _, err := stale.Complete(e.Ctx, created("stale answer"), e.step(label)); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(key, "stale Complete (token %d): %v, want ErrLeaseLost", stale.Token(), err)
	}
	if err := stale.Release(e.Ctx); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(key, "stale Release (token %d): %v, want ErrLeaseLost", stale.Token(), err)
	}
	if n := e.effectCount(label); n != 0 {
		e.Fatalf(key, "the stale holder's writes: %d rows, want none (rolled back)", n)
	}
}

// testLeaseFencingAcrossLifetimes: a key's fencing tokens never repeat,
// even across records deleted and claimed afresh, so a holder whose lease
// was lost long ago cannot write to the new intention's record however it
// was deleted: ForceDelete of a pending record, Delete of a completed one,
// Purge after the holder stalled past the retention. The new holder keeps
// its lease and its answer is the one replayed.
func testLeaseFencingAcrossLifetimes[TTx any](t *testing.T, b Backend[TTx]) {
	for _, tc := range []struct {
		name string
		// otherBody: the new intention's request differs from the stale
		// holder's (else only the token tells them apart).
		otherBody bool
		// remove deletes the stale holder's record, moving the clock as
		// the path needs; it returns the highest token the key had.
		remove func(e *env[TTx], clk *clock, stale *idem.Lease[TTx], req idem.Request) int64
	}{
		{"ForceDelete of a pending record", false, func(e *env[TTx], _ *clock, stale *idem.Lease[TTx], req idem.Request) int64 {
			if err := e.Store.ForceDelete(e.Ctx, req.Scope, req.Key); err != nil {
				e.Fatalf(req.Key, "ForceDelete: %v", err)
			}
			// admin.go's promise: a deleted record's late completion fails
			// and rolls back, before any new claim too.
			if _, err := stale.Complete(e.Ctx, created("late"), e.step("lifetimes-late")); !errors.Is(err, idem.ErrLeaseLost) {
				e.Fatalf(req.Key, "Complete after ForceDelete: %v, want ErrLeaseLost", err)
			}
			if n := e.effectCount("lifetimes-late"); n != 0 {
				e.Fatalf(req.Key, "the late completion's write: %d rows, want none", n)
			}
			return stale.Token()
		}},
		{"Delete of a completed record", true, func(e *env[TTx], clk *clock, stale *idem.Lease[TTx], req idem.Request) int64 {
			clk.add(lease + time.Second) // the stale holder hung: taken over, completed
			taker := e.acquire(e.Store, req, idem.Won)
			if _, err := taker.Complete(e.Ctx, created("taker"), nil); err != nil {
				e.Fatalf(req.Key, "taker's Complete: %v", err)
			}
			if err := e.Store.Delete(e.Ctx, req.Scope, req.Key); err != nil {
				e.Fatalf(req.Key, "Delete: %v", err)
			}
			return taker.Token()
		}},
		{"ForceDelete, then a Do's record taken over once expired", false, func(e *env[TTx], clk *clock, stale *idem.Lease[TTx], req idem.Request) int64 {
			if err := e.Store.ForceDelete(e.Ctx, req.Scope, req.Key); err != nil {
				e.Fatalf(req.Key, "ForceDelete: %v", err)
			}
			// A single-transaction claim makes the key's next record (it
			// holds no lease); once it expires, a lease takes it over.
			if r := e.do(e.Store, req, e.work("lifetimes-do", created("do"))); r.Outcome != idem.Won {
				e.Fatalf(req.Key, "Do after ForceDelete: %v, want won", r.Outcome)
			}
			clk.add(lifetime + time.Second)
			return stale.Token()
		}},
		{"Purge after the holder stalled past the retention", false, func(e *env[TTx], clk *clock, stale *idem.Lease[TTx], req idem.Request) int64 {
			clk.add(retention + lease + time.Second)
			if res, err := e.Store.Purge(e.Ctx); err != nil || res.Deleted != 1 {
				e.Fatalf(req.Key, "Purge: %+v, %v, want the stalled record deleted", res, err)
			}
			return stale.Token()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, clk := leaseEnv(t, b, idem.Config{})
			req := request("lifetimes", "x")
			stale := e.acquire(e.Store, req, idem.Won)
			if err := stale.RecordStep(e.Ctx, "charged", []byte("ch_old"), nil); err != nil {
				e.Fatalf(req.Key, "RecordStep: %v", err)
			}
			highest := tc.remove(e, clk, stale, req)

			fresh := req
			if tc.otherBody {
				fresh = request(req.Key, "another body")
			}
			holder := e.acquire(e.Store, fresh, idem.Won)
			e.staleRefused(stale, "lifetimes-stale")
			if holder.Token() <= highest {
				e.Fatalf(req.Key, "the new intention's token %d, want above %d, the key's highest before: a key's tokens must never repeat", holder.Token(), highest)
			}
			if holder.Resumed() {
				e.Fatalf(req.Key, "the new intention resumed the deleted one's work")
			}
			if name, _ := holder.Step(); name != "" {
				e.Fatalf(req.Key, "the new intention starts at step %q, want none", name)
			}
			rec, err := e.Store.Lookup(e.Ctx, fresh.Scope, fresh.Key)
			if err != nil || rec.Completed || rec.Token != holder.Token() || rec.Fingerprint != fresh.Fingerprint || rec.Step != "" {
				e.Fatalf(req.Key, "the new intention's record after the stale writes: %+v, %v; want it untouched", rec, err)
			}
			if err := holder.Extend(e.Ctx); err != nil {
				e.Fatalf(req.Key, "the new holder's Extend: %v, want its lease kept", err)
			}
			if res, err := holder.Complete(e.Ctx, created("fresh"), e.step("lifetimes-fresh")); err != nil || !res.Committed {
				e.Fatalf(req.Key, "the new holder's Complete: %+v, %v", res, err)
			}
			if r := e.acquire(e.Store, fresh, idem.Replay); string(r.Response.Body) != "fresh" {
				e.Fatalf(req.Key, "replay %q, want the new holder's answer", r.Response.Body)
			}
			if n := e.effectCount("lifetimes-fresh"); n != 1 {
				e.Fatalf(req.Key, "the new holder's write: %d rows, want 1", n)
			}
		})
	}
}

// testLeaseReleaseNotUndone: an extension racing a release (DoLease's
// heartbeat while the work's failure releases the lease) does not bring the
// released lease back: a retry right after the release takes the work over.
func testLeaseReleaseNotUndone[TTx any](t *testing.T, b Backend[TTx]) {
	e, hooks := setupFaults(t, b, idem.Config{Lease: time.Minute, WaitBound: 100 * time.Millisecond})
	req := request("lease-release-race", "x")
	l := e.acquire(e.Store, req, idem.Won)
	released := make(chan error, 1)
	hooks.beforeNextBegin(func() { // the extension is under way
		go func() { released <- l.Release(e.Ctx) }()
		time.Sleep(200 * time.Millisecond) // the release runs now, or waits for this extension
	})
	if err := l.Extend(e.Ctx); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "Extend: %v", err)
	}
	if err := <-released; err != nil {
		e.Fatalf(req.Key, "Release: %v", err)
	}
	if next := e.acquire(e.Store, req, idem.Won); !next.Resumed() {
		e.Fatalf(req.Key, "a retry after the release: resumed %v, want the work taken over", next.Resumed())
	}
}

// testLeaseClaimsOnLiveLease: many claims at once on a key whose lease is
// live all get InFlight, with the library's default retry settings: a lost
// claim must not write after its insert (on InnoDB that deadlocks the
// losers with each other).
func testLeaseClaimsOnLiveLease[TTx any](t *testing.T, b Backend[TTx]) {
	const n = 16
	e := setup(t, b, idem.Config{WaitBound: 200 * time.Millisecond, Lease: time.Minute})
	req := request("lease-live-claims", "x")
	holder := e.acquire(e.Store, req, idem.Won)
	outcomes := make([]idem.Outcome, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			l, err := e.Store.Lease(e.Ctx, req)
			if err == nil {
				outcomes[i] = l.Outcome
			}
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil || outcomes[i] != idem.InFlight {
			e.Errorf(req.Key, "claim %d on a live lease: %v, %v; want in-flight", i, outcomes[i], errs[i])
		}
	}
	if _, err := holder.Complete(e.Ctx, created("holder"), nil); err != nil {
		e.Fatalf(req.Key, "holder's Complete: %v", err)
	}
}

// testLeaseInFlightCarriesLeaseEnd: a claim that waits out its bound while
// the holder's transaction holds the key (here: a recorded step's writes
// in progress) gets InFlight with the holder's record and its lease's end,
// to build Retry-After from.
func testLeaseInFlightCarriesLeaseEnd[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 200 * time.Millisecond
	e := setup(t, b, idem.Config{WaitBound: bound, Lease: time.Minute})
	req := request("lease-inflight-end", "x")
	holder := e.acquire(e.Store, req, idem.Won)
	inStep, release := make(chan struct{}), make(chan struct{})
	stepDone := make(chan error, 1)
	go func() {
		stepDone <- holder.RecordStep(e.Ctx, "charged", nil, func(ctx context.Context, tx TTx) error {
			close(inStep)
			select {
			case <-release:
			case <-time.After(time.Minute):
			}
			return e.effect(ctx, tx, "inflight-end")
		})
	}()
	<-inStep
	l, err := e.Store.Lease(e.Ctx, req)
	close(release)
	if err != nil || l.Outcome != idem.InFlight {
		e.Fatalf(req.Key, "claim while the holder's step is in progress: %+v, %v; want in-flight", l, err)
	}
	if l.Record.LeaseUntil.IsZero() || l.Record.Token != holder.Token() {
		e.Fatalf(req.Key, "in-flight record %+v: want the holder's, with its lease's end", l.Record)
	}
	if err := <-stepDone; err != nil {
		e.Fatalf(req.Key, "holder's RecordStep: %v", err)
	}
}

// testLeaseHolderWaitsItsOwnBound: a holder's own writes wait for the
// database up to Config.HolderWaitBound, not the claims' WaitBound: with a
// short WaitBound, a step recorded while another transaction holds a lock
// the step needs (on SQLite: the whole database) still succeeds once the
// lock is let go.
func testLeaseHolderWaitsItsOwnBound[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{WaitBound: 20 * time.Millisecond, Lease: 5 * time.Second, HolderWaitBound: time.Second})
	req := request("lease-holder-bound", "x")
	holder := e.acquire(e.Store, req, idem.Won)
	_, finish := e.holdClaim(request("lease-holder-other", "x"), "holder-other")
	time.AfterFunc(200*time.Millisecond, func() { finish(true) })
	if err := holder.RecordStep(e.Ctx, "charged", []byte("ch_1"), e.step("holder-bound")); err != nil {
		e.Fatalf(req.Key, "RecordStep while another transaction writes: %v, want it to wait up to HolderWaitBound", err)
	}
	if _, err := holder.Complete(e.Ctx, created("done"), nil); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
}

// testDoLeaseStopsWhenLeaseUnknown: when the holder cannot reach its
// database, the heartbeat's extensions fail, and DoLease cancels the work's
// context, with ErrLeaseLost as its cause, before the lease can have ended:
// nobody can take the work over while it still runs.
func testDoLeaseStopsWhenLeaseUnknown[TTx any](t *testing.T, b Backend[TTx]) {
	const leaseFor = 3 * time.Second
	e, cut := setupFaults(t, b, idem.Config{WaitBound: 100 * time.Millisecond, Lease: leaseFor})
	req := request("lease-cut-off", "x")
	started := time.Now()
	var (
		stoppedAfter time.Duration
		lookedAfter  time.Duration
		cause        error
		rec          idem.Record
		lookupErr    error
	)
	res, err := e.Store.DoLease(e.Ctx, req, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		cut.cut.Store(true) // the database is unreachable from here on
		select {
		case <-ctx.Done():
		case <-time.After(3 * leaseFor):
		}
		stoppedAfter, cause = time.Since(started), context.Cause(ctx)
		// The record as another process sees it, at once.
		rec, lookupErr = e.Store.Lookup(e.Ctx, req.Scope, req.Key)
		lookedAfter = time.Since(started)
		cut.cut.Store(false)
		return idem.Response{}, errors.New("stopped: the lease may be lost")
	})
	if err == nil || res.Committed {
		e.Fatalf(req.Key, "DoLease: %+v, %v; want the function's error", res, err)
	}
	if !errors.Is(cause, idem.ErrLeaseLost) || stoppedAfter >= leaseFor {
		e.Fatalf(req.Key, "the work's context: cause %v after %v; want ErrLeaseLost before the lease (%v) could end", cause, stoppedAfter, leaseFor)
	}
	// The lease began after started, so a look that ended before
	// started+leaseFor must find it live. A look that a loaded machine made
	// later proves nothing about that either way.
	if lookupErr != nil || rec.Completed || rec.LeaseUntil.IsZero() || rec.LeaseExpired && lookedAfter < leaseFor {
		e.Fatalf(req.Key, "the record when the work stopped (looked at %v after the start): %+v, %v; want its lease still live (no takeover possible yet)", lookedAfter, rec, lookupErr)
	}
	// The lease was released once the database was back: a retry resumes.
	if l := e.acquire(e.Store, req, idem.Won); !l.Resumed() {
		e.Fatalf(req.Key, "a retry after the work stopped: resumed %v, want the work resumed", l.Resumed())
	}
}

// testDoLeaseOutlivesHangUp: a caller that hangs up does not end the
// heartbeat: work that goes on keeps its lease (a retry meanwhile is
// InFlight, not a takeover), and its answer is stored.
func testDoLeaseOutlivesHangUp[TTx any](t *testing.T, b Backend[TTx]) {
	const leaseFor = heartbeatLease
	e := setup(t, b, idem.Config{WaitBound: 50 * time.Millisecond, Lease: leaseFor})
	req := request("lease-hang-up", "x")
	ctx, hangUp := context.WithCancel(e.Ctx)
	defer hangUp()
	var probe idem.Outcome
	res, err := e.Store.DoLease(ctx, req, func(_ context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		hangUp()                           // the client went away
		time.Sleep(leaseFor + leaseFor/10) // the work goes on past the lease
		other, err := e.Store.Lease(e.Ctx, req)
		if err != nil {
			return idem.Response{}, err
		}
		probe = other.Outcome
		return created("finished"), nil
	})
	if err != nil || !res.Committed {
		e.Fatalf(req.Key, "DoLease after the caller hung up: %+v, %v; want the answer stored", res, err)
	}
	if probe != idem.InFlight {
		e.Fatalf(req.Key, "a retry while the work went on: %v, want in-flight (the heartbeat kept the lease)", probe)
	}
	if r := e.acquire(e.Store, req, idem.Replay); string(r.Response.Body) != "finished" {
		e.Fatalf(req.Key, "replay %q, want the work's answer", r.Response.Body)
	}
}

// testDoLeaseRefusedResponseReleases: a response Complete refuses before
// storing it (over MaxBody, an invalid status) releases the lease, so a
// retry takes the work over at once instead of waiting out the lease.
func testDoLeaseRefusedResponseReleases[TTx any](t *testing.T, b Backend[TTx]) {
	for _, tc := range []struct {
		name string
		resp idem.Response
		want error
	}{
		{"body over MaxBody", idem.Response{Status: 201, Body: make([]byte, 65)}, idem.ErrTooLarge},
		{"invalid status", idem.Response{Status: 999}, idem.ErrInvalidResponse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, b, idem.Config{MaxBody: 64, Lease: time.Minute, WaitBound: 100 * time.Millisecond})
			req := request("lease-refused", "x")
			_, err := e.Store.DoLease(e.Ctx, req, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
				return tc.resp, l.RecordStep(ctx, "charged", []byte("ch_1"), nil)
			})
			if !errors.Is(err, tc.want) {
				e.Fatalf(req.Key, "DoLease: %v, want %v", err, tc.want)
			}
			next := e.acquire(e.Store, req, idem.Won)
			if name, _ := next.Step(); !next.Resumed() || name != "charged" {
				e.Fatalf(req.Key, "a retry at once: resumed %v at step %q; want the work taken over from its step", next.Resumed(), name)
			}
		})
	}
}

// testLeaseExpiredRecordStartsClean: a lease-mode record whose retention
// passed with a step recorded (its holder gave up, no retry came in time)
// is a new intention for the next claim of its key, with the same request
// or another: it is won fresh, not resumed, and sees no step of the old
// intention, which would make it skip work it never did.
func testLeaseExpiredRecordStartsClean[TTx any](t *testing.T, b Backend[TTx]) {
	for _, body := range []string{"x", "other"} {
		e, clk := leaseEnv(t, b, idem.Config{})
		req := request("lease-expired-clean-"+body, "x")
		old := e.acquire(e.Store, req, idem.Won)
		if err := old.RecordStep(e.Ctx, "charged", []byte("ch_1"), nil); err != nil {
			e.Fatalf(req.Key, "RecordStep: %v", err)
		}
		clk.add(retention + lease + time.Second) // the record's retention passed
		next := e.acquire(e.Store, request(req.Key, body), idem.Won)
		if step, data := next.Step(); next.Resumed() || step != "" || data != nil || next.Token() <= old.Token() {
			e.Fatalf(req.Key, "claim after the retention (body %q): resumed %v, step %q %q, token %d after %d; want a fresh intention, no step, a greater token",
				body, next.Resumed(), step, data, next.Token(), old.Token())
		}
	}
	// Do's claim of such a record starts clean too: the record it
	// completes carries no step of the old intention.
	e, clk := leaseEnv(t, b, idem.Config{})
	req := request("lease-expired-clean-do", "x")
	old := e.acquire(e.Store, req, idem.Won)
	if err := old.RecordStep(e.Ctx, "charged", []byte("ch_1"), nil); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	clk.add(retention + lease + time.Second)
	if r := e.do(e.Store, req, e.work("lease-expired-clean-do", created("do"))); r.Outcome != idem.Won {
		e.Fatalf(req.Key, "Do after the retention: %v, want won", r.Outcome)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil || !rec.Completed || rec.Step != "" || rec.StepData != nil {
		e.Fatalf(req.Key, "the record Do completed: %+v, %v; want it completed with no step", rec, err)
	}
}

// testResumeNeverStartsIntention: Resume takes over only the intention it
// read; a record that vanished between its read and the takeover is
// ErrNotFound, and no record is made.
func testResumeNeverStartsIntention[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e, hooks := setupFaults(t, b, idem.Config{Clock: clk.Now, Lease: lease, Retention: retention})
	req := request("resume-vanished", "x")
	e.acquire(e.Store, req, idem.Won)
	clk.add(lease + time.Second) // the holder crashed
	hooks.beforeNextBegin(func() {
		if err := e.Store.ForceDelete(e.Ctx, req.Scope, req.Key); err != nil {
			e.Errorf(req.Key, "ForceDelete: %v", err)
		}
	})
	l, err := e.Store.Resume(e.Ctx, req.Scope, req.Key)
	if !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "Resume of a record deleted before its takeover: %+v, %v; want ErrNotFound", l, err)
	}
	if _, err := e.Store.Inspect(e.Ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "after Resume: %v; want no record (Resume made one)", err)
	}
}

// testLeaseObserved: lease mode reports what Do reports: each claim's
// outcome, the stored response, and a takeover, marked as lease mode.
func testLeaseObserved[TTx any](t *testing.T, b Backend[TTx]) {
	events := &eventLog{}
	e, clk := leaseEnv(t, b, idem.Config{Observer: events})
	req := request("lease-observed", "x")
	e.acquire(e.Store, req, idem.Won)
	e.acquire(e.Store, request(req.Key, "other"), idem.Mismatch)
	clk.add(lease + time.Second)
	taker := e.acquire(e.Store, req, idem.Won)
	if _, err := taker.Complete(e.Ctx, created("done"), nil); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	e.acquire(e.Store, req, idem.Replay)
	var claims []idem.Outcome
	for _, ev := range events.of(idem.EventClaim) {
		if !ev.Lease || ev.Key != req.Key {
			e.Fatalf(req.Key, "claim event %+v: want lease mode and the key", ev)
		}
		claims = append(claims, ev.Outcome)
	}
	want := []idem.Outcome{idem.Won, idem.Mismatch, idem.Won, idem.Replay}
	if len(claims) != len(want) {
		e.Fatalf(req.Key, "claim events %v, want %v", claims, want)
	}
	for i := range want {
		if claims[i] != want[i] {
			e.Fatalf(req.Key, "claim events %v, want %v", claims, want)
		}
	}
	stored := events.of(idem.EventStored)
	if len(stored) != 1 || !stored[0].Lease || stored[0].Status != 201 || stored[0].BodyBytes != len("done") {
		e.Fatalf(req.Key, "stored events %+v, want one of lease mode with the 201 and its body's size", stored)
	}
	if got := events.of(idem.EventTakeover); len(got) != 1 || !got[0].Lease {
		e.Fatalf(req.Key, "takeover events %+v, want one of lease mode", got)
	}
}

// testLeaseAccessors: Step hands out a copy, Until follows every write
// that moves the lease's end, and a loser has no downstream key.
func testLeaseAccessors[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{})
	req := request("lease-accessors", "x")
	l := e.acquire(e.Store, req, idem.Won)
	if want := clk.Now().Add(lease); !l.Until().Equal(want) {
		e.Fatalf(req.Key, "Until after the claim: %v, want %v", l.Until(), want)
	}
	clk.add(10 * time.Second)
	if err := l.Extend(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Extend: %v", err)
	}
	if want := clk.Now().Add(lease); !l.Until().Equal(want) {
		e.Fatalf(req.Key, "Until after Extend: %v, want %v", l.Until(), want)
	}
	clk.add(10 * time.Second)
	if err := l.RecordStep(e.Ctx, "charged", []byte("ch_1"), nil); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	if want := clk.Now().Add(lease); !l.Until().Equal(want) {
		e.Fatalf(req.Key, "Until after RecordStep: %v, want %v", l.Until(), want)
	}
	_, data := l.Step()
	data[0] = 'X'
	if _, again := l.Step(); string(again) != "ch_1" {
		e.Fatalf(req.Key, "Step's data after the caller changed what it got: %q, want ch_1 (a copy)", again)
	}
}

// testLeaseNeverWritesPlainClaim: a stale holder whose token a claim made
// in one transaction happens to carry (the key was deleted, claimed by Do,
// expired, and claimed again by a transaction that committed without its
// response) is refused: a fenced write takes only a record holding a
// lease. Found by the model.
func testLeaseNeverWritesPlainClaim[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{})
	req := request("lease-plain", "x")
	stale := e.acquire(e.Store, req, idem.Won)
	if err := e.Store.ForceDelete(e.Ctx, req.Scope, req.Key); err != nil {
		e.Fatalf(req.Key, "ForceDelete: %v", err)
	}
	e.do(e.Store, req, e.work("plain-do", created("do")))
	clk.add(lifetime + time.Second)
	tx := e.Begin()
	cl, err := e.Store.Claim(e.Ctx, tx.Native(), req)
	if err != nil || cl.Outcome != idem.Won {
		e.Fatalf(req.Key, "Claim after the retention: %+v, %v, want Won", cl, err)
	}
	if err := tx.Commit(e.Ctx); err != nil { // committed without its response
		e.Fatalf(req.Key, "Commit: %v", err)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil || rec.Completed || !rec.LeaseUntil.IsZero() {
		e.Fatalf(req.Key, "record: %+v, %v, want pending without a lease", rec, err)
	}
	if rec.Token != stale.Token() {
		// The guard is still required; this backend numbers a takeover
		// in one transaction differently, so the case cannot show it.
		t.Logf("[%s] the record claimed in one transaction has token %d, the stale holder %d: the tokens alone refuse it here",
			e.Backend, rec.Token, stale.Token())
	}
	if err := stale.RecordStep(e.Ctx, "charged", nil, e.step("plain-step")); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "the stale holder's RecordStep (token %d) on a record claimed in one transaction (token %d): %v, want ErrLeaseLost",
			stale.Token(), rec.Token, err)
	}
	if _, err := stale.Complete(e.Ctx, created("stale"), e.step("plain-final")); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "the stale holder's Complete: %v, want ErrLeaseLost", err)
	}
	if n := e.effectCount("plain-step") + e.effectCount("plain-final"); n != 0 {
		e.Fatalf(req.Key, "the stale holder's writes: %d rows, want none", n)
	}
	after, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil || after.Completed || !after.LeaseUntil.IsZero() || after.Step != "" {
		e.Fatalf(req.Key, "record after the stale writes: %+v, %v, want it unchanged", after, err)
	}
}
