package conformance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Lease mode's cases. A backend without dialect.Leaser fails them: lease
// mode is part of the contract idem's users rely on.

const lease = time.Minute

// leaseEnv is a case on a store whose clock the case moves.
func leaseEnv[TTx any](t *testing.T, b Backend[TTx], cfg idem.Config) (*env[TTx], *clock) {
	clk := newClock(t0)
	cfg.Clock, cfg.Lease = clk.Now, lease
	if cfg.Retention == 0 {
		cfg.Retention = retention
	}
	return setup(t, b, cfg), clk
}

// acquire claims req in lease mode and fails the case unless the outcome
// is want.
func (e *env[TTx]) acquire(store *idem.Store[TTx], req idem.Request, want idem.Outcome) *idem.Lease[TTx] {
	e.T.Helper()
	l, err := store.Lease(e.Ctx, req)
	if err != nil {
		e.Fatalf(req.Key, "Lease: %v", err)
	}
	if l.Outcome != want {
		e.Fatalf(req.Key, "Lease: %v (%+v), want %v", l.Outcome, l.Result.Record, want)
	}
	return l
}

// step is a RecordStep function that writes one effect.
func (e *env[TTx]) step(label string) func(context.Context, TTx) error {
	return func(ctx context.Context, tx TTx) error { return e.effect(ctx, tx, label) }
}

// testLeaseLifecycle: a fresh lease records a step with its writes and
// completes with its final writes; a retry replays byte for byte.
func testLeaseLifecycle[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	req := request("lease-life", "x")
	l := e.acquire(e.Store, req, idem.Won)
	if l.Token() != 1 || l.Resumed() {
		e.Fatalf(req.Key, "fresh lease: token %d resumed %v, want token 1", l.Token(), l.Resumed())
	}
	if name, _ := l.Step(); name != "" {
		e.Fatalf(req.Key, "fresh lease has step %q", name)
	}
	if err := l.RecordStep(e.Ctx, "charged", []byte("ch_1"), e.step("lease-life-step")); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	res, err := l.Complete(e.Ctx, created("done"), e.step("lease-life-final"))
	if err != nil || !res.Committed {
		e.Fatalf(req.Key, "Complete: %+v, %v", res, err)
	}
	again := e.acquire(e.Store, req, idem.Replay)
	if !sameResponse(again.Response, created("done")) {
		e.Fatalf(req.Key, "replay %+v, want the stored response", again.Response)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil || !rec.Completed || !rec.LeaseUntil.IsZero() || rec.Step != "charged" {
		e.Fatalf(req.Key, "record after completion: %+v, %v, want completed, no lease, the step kept", rec, err)
	}
	if n := e.effectCount("lease-life-step") + e.effectCount("lease-life-final"); n != 2 {
		e.Fatalf(req.Key, "effects = %d, want the step's and the completion's", n)
	}
	if err := l.RecordStep(e.Ctx, "late", nil, nil); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "RecordStep after Complete: %v, want ErrLeaseLost", err)
	}
}

// testLeaseLoserWaits: while a lease is live a retry waits, up to the wait
// bound, then gets InFlight; a retry that waits while the holder completes
// replays.
func testLeaseLoserWaits[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 300 * time.Millisecond
	e, _ := leaseEnv(t, b, idem.Config{WaitBound: bound})
	req := request("lease-wait", "x")
	holder := e.acquire(e.Store, req, idem.Won)
	start := time.Now()
	l := e.acquire(e.Store, req, idem.InFlight)
	if d := time.Since(start); d < bound/2 {
		e.Fatalf(req.Key, "InFlight after %v, want it after waiting about the bound %v", d, bound)
	}
	if l.Result.Record.LeaseUntil.IsZero() || l.Result.Record.Fingerprint != req.Fingerprint {
		e.Fatalf(req.Key, "InFlight record %+v, want the holder's with its lease end", l.Result.Record)
	}

	patient, err := idem.New(e.Driver, withWait(e.Store.Config(), lease/2))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *idem.Lease[TTx], 1)
	go func() {
		l, err := patient.Lease(e.Ctx, req)
		if err != nil {
			e.Errorf(req.Key, "waiting Lease: %v", err)
		}
		ch <- l
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := holder.Complete(e.Ctx, created("holder"), nil); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	select {
	case l := <-ch:
		if l == nil || l.Outcome != idem.Replay || string(l.Response.Body) != "holder" {
			e.Fatalf(req.Key, "waiting retry: %+v, want a replay of the holder's answer", l)
		}
	case <-time.After(time.Minute):
		e.Fatalf(req.Key, "the waiting retry did not return after the holder completed")
	}
}

func withWait(cfg idem.Config, d time.Duration) idem.Config {
	cfg.WaitBound = d
	return cfg
}

// testLeaseTakeoverOneWinner: after the lease expires, of many retries at
// once exactly one takes the work over, with the next token and the last
// recorded step; the others get InFlight.
func testLeaseTakeoverOneWinner[TTx any](t *testing.T, b Backend[TTx]) {
	const n = 16
	e, clk := leaseEnv(t, b, idem.Config{WaitBound: 200 * time.Millisecond})
	req := request("lease-race", "x")
	crashed := e.acquire(e.Store, req, idem.Won)
	if err := crashed.RecordStep(e.Ctx, "charged", []byte("ch_9"), nil); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	clk.add(lease) // the holder crashed: its lease ends

	leases := make([]*idem.Lease[TTx], n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			leases[i], errs[i] = e.Store.Lease(e.Ctx, req)
		})
	}
	close(start)
	wg.Wait()
	var winner *idem.Lease[TTx]
	for i, l := range leases {
		switch {
		case errs[i] != nil:
			e.Errorf(req.Key, "retry %d: %v", i, errs[i])
		case l.Outcome == idem.Won && winner != nil:
			e.Fatalf(req.Key, "two retries took the lease over (tokens %d and %d)", winner.Token(), l.Token())
		case l.Outcome == idem.Won:
			winner = l
		case l.Outcome != idem.InFlight:
			e.Errorf(req.Key, "retry %d: %v, want in-flight", i, l.Outcome)
		}
	}
	if winner == nil {
		e.Fatalf(req.Key, "no retry took the expired lease over")
	}
	name, data := winner.Step()
	if winner.Token() != 2 || !winner.Resumed() || name != "charged" || string(data) != "ch_9" {
		e.Fatalf(req.Key, "takeover: token %d, step %q %q; want token 2 and the crashed holder's step", winner.Token(), name, data)
	}
}

// eventLog keeps the events a store reports (Config.Observer).
type eventLog struct {
	mu     sync.Mutex
	events []idem.Event
}

func (l *eventLog) Observe(_ context.Context, e idem.Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *eventLog) of(kind idem.EventKind) []idem.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []idem.Event
	for _, e := range l.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// testLeaseTakeoverReported: taking over an expired lease is reported once,
// to the Observer (EventTakeover with the new token and the last step) and
// to the Logger (a warning); a fresh lease reports no takeover.
func testLeaseTakeoverReported[TTx any](t *testing.T, b Backend[TTx]) {
	events := &eventLog{}
	var logged bytes.Buffer
	e, clk := leaseEnv(t, b, idem.Config{Observer: events, Logger: slog.New(slog.NewJSONHandler(&logged, nil))})
	req := request("lease-reported", "x")
	crashed := e.acquire(e.Store, req, idem.Won)
	if err := crashed.RecordStep(e.Ctx, "charged", []byte("ch_7"), nil); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	if got := events.of(idem.EventTakeover); len(got) != 0 {
		e.Fatalf(req.Key, "a fresh lease reported takeovers: %+v", got)
	}
	clk.add(lease + time.Second)
	taker := e.acquire(e.Store, req, idem.Won)
	got := events.of(idem.EventTakeover)
	if len(got) != 1 {
		e.Fatalf(req.Key, "%d takeover events, want 1: %+v", len(got), got)
	}
	if ev := got[0]; ev.Scope != req.Scope || ev.Key != req.Key || ev.Token != taker.Token() || ev.Token != 2 || ev.Step != "charged" {
		e.Fatalf(req.Key, "takeover event %+v, want scope %q key %q token 2 step charged", ev, req.Scope, req.Key)
	}
	var line struct {
		Level, Msg, Key, Step string
		Token                 int64
	}
	for _, raw := range bytes.Split(logged.Bytes(), []byte("\n")) {
		if bytes.Contains(raw, []byte("taken over")) {
			if err := json.Unmarshal(raw, &line); err != nil {
				e.Fatalf(req.Key, "log line %s: %v", raw, err)
			}
		}
	}
	if line.Level != "WARN" || line.Key != req.Key || line.Token != 2 || line.Step != "charged" {
		e.Fatalf(req.Key, "takeover log %+v (all: %s), want a warning with key, token 2 and step", line, logged.String())
	}
}

// testLeaseFencing: a holder whose lease was taken over can neither record a
// step, extend, release nor complete; its step's writes roll back; the
// taker's answer is the one stored.
func testLeaseFencing[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{})
	req := request("lease-fence", "x")
	stale := e.acquire(e.Store, req, idem.Won)
	clk.add(lease + time.Second) // the holder hung
	taker := e.acquire(e.Store, req, idem.Won)
	if taker.Token() != stale.Token()+1 {
		e.Fatalf(req.Key, "takeover token %d, want %d", taker.Token(), stale.Token()+1)
	}
	if err := stale.RecordStep(e.Ctx, "charged", nil, e.step("lease-fence-stale")); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "stale RecordStep: %v, want ErrLeaseLost", err)
	}
	if err := stale.Extend(e.Ctx); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "stale Extend: %v, want ErrLeaseLost", err)
	}
	if _, err := stale.Complete(e.Ctx, created("stale"), e.step("lease-fence-stale")); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "stale Complete: %v, want ErrLeaseLost", err)
	}
	if err := stale.Release(e.Ctx); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(req.Key, "stale Release: %v, want ErrLeaseLost", err)
	}
	if n := e.effectCount("lease-fence-stale"); n != 0 {
		e.Fatalf(req.Key, "the stale holder's writes: %d, want 0 (rolled back)", n)
	}
	if res, err := taker.Complete(e.Ctx, created("taker"), nil); err != nil || !res.Committed {
		e.Fatalf(req.Key, "taker's Complete: %+v, %v", res, err)
	}
	if r := e.acquire(e.Store, req, idem.Replay); string(r.Response.Body) != "taker" {
		e.Fatalf(req.Key, "replay %q, want the taker's answer", r.Response.Body)
	}
}

// testLeaseExtend: an extended lease is not taken over at its first end,
// only at its extended one.
func testLeaseExtend[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{WaitBound: 100 * time.Millisecond})
	req := request("lease-extend", "x")
	l := e.acquire(e.Store, req, idem.Won)
	clk.add(lease / 2)
	if err := l.Extend(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Extend: %v", err)
	}
	clk.add(lease/2 + time.Second) // past the first end, before the extended one
	e.acquire(e.Store, req, idem.InFlight)
	clk.add(lease / 2)
	if taker := e.acquire(e.Store, req, idem.Won); taker.Token() != 2 {
		e.Fatalf(req.Key, "after the extended lease: token %d, want 2", taker.Token())
	}
}

// testLeaseDownstreamKey: the downstream key of a step is the same for every
// holder of one intention, different for another step and for a new
// intention after the retention.
func testLeaseDownstreamKey[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{})
	req := request("lease-downstream", "x")
	first := e.acquire(e.Store, req, idem.Won)
	charge, email := e.downstream(first, "charge"), e.downstream(first, "email")
	if charge == email || len(charge) > 64 {
		e.Fatalf(req.Key, "downstream keys %q and %q: want distinct keys of at most 64 bytes", charge, email)
	}
	if err := idem.ValidateKey(charge); err != nil {
		e.Fatalf(req.Key, "downstream key %q is not a valid key: %v", charge, err)
	}
	clk.add(lease)
	second := e.acquire(e.Store, req, idem.Won)
	if got := e.downstream(second, "charge"); got != charge {
		e.Fatalf(req.Key, "after a takeover the downstream key is %q, want %q", got, charge)
	}
	if _, err := second.Complete(e.Ctx, created("done"), nil); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	clk.add(2 * retention)
	next := e.acquire(e.Store, req, idem.Won)
	if got := e.downstream(next, "charge"); got == charge || next.Resumed() {
		e.Fatalf(req.Key, "a new intention after the retention: key %q resumed %v, want a new key, not resumed", got, next.Resumed())
	}
	loser := e.acquire(e.Store, request(req.Key, "other"), idem.Mismatch)
	if got, err := loser.DownstreamKey("charge"); !errors.Is(err, idem.ErrNotClaimed) || got != "" {
		e.Fatalf(req.Key, "a loser's downstream key: %q, %v; want none and ErrNotClaimed", got, err)
	}
	if got, err := next.DownstreamKey("bad\nstep"); !errors.Is(err, idem.ErrInvalidStep) || got != "" {
		e.Fatalf(req.Key, "downstream key of an invalid step: %q, %v; want none and ErrInvalidStep", got, err)
	}
}

// downstream is l.DownstreamKey(step), failing the case on error.
func (e *env[TTx]) downstream(l *idem.Lease[TTx], step string) string {
	e.T.Helper()
	k, err := l.DownstreamKey(step)
	if err != nil {
		e.Fatalf(e.T.Name(), "DownstreamKey(%q): %v", step, err)
	}
	return k
}

// testLeasePurgeKeepsLive: purge never deletes a record whose lease is live,
// even when the lease runs past the retention the claim set.
func testLeasePurgeKeepsLive[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{Retention: 2 * lease})
	req := request("lease-purge", "x")
	l := e.acquire(e.Store, req, idem.Won)
	for range 3 { // work longer than the retention, extending as it goes
		clk.add(lease / 2)
		if err := l.Extend(e.Ctx); err != nil {
			e.Fatalf(req.Key, "Extend: %v", err)
		}
	}
	clk.add(lease/2 + time.Second) // past the claim's retention, inside the lease
	res, err := e.Store.Purge(e.Ctx)
	if err != nil || res.Deleted != 0 {
		e.Fatalf(req.Key, "Purge beside a live lease: %+v, %v, want nothing deleted", res, err)
	}
	if _, err := l.Complete(e.Ctx, created("late but done"), nil); err != nil {
		e.Fatalf(req.Key, "Complete after the purge: %v", err)
	}
}

// testLeaseReleaseResumes: a released lease is taken over at once by the
// next claim, which resumes from the recorded step; a response not to be
// stored releases the lease the same way.
func testLeaseReleaseResumes[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	req := request("lease-release", "x")
	l := e.acquire(e.Store, req, idem.Won)
	if err := l.RecordStep(e.Ctx, "reserved", []byte("seat 7"), nil); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	if err := l.Release(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Release: %v", err)
	}
	next := e.acquire(e.Store, req, idem.Won)
	if name, data := next.Step(); next.Token() != 2 || name != "reserved" || string(data) != "seat 7" {
		e.Fatalf(req.Key, "after Release: token %d step %q %q, want token 2 resuming from the step", next.Token(), name, data)
	}
	res, err := next.Complete(e.Ctx, idem.Response{Status: 503, Body: []byte("provider down")}, nil)
	if err != nil || res.Committed {
		e.Fatalf(req.Key, "Complete with a 503: %+v, %v, want returned but not stored", res, err)
	}
	if third := e.acquire(e.Store, req, idem.Won); third.Token() != 3 {
		e.Fatalf(req.Key, "after a 503: token %d, want the work resumed with token 3", third.Token())
	}
}

// testLeaseMismatch: another body under a leased key is a mismatch, whether
// the lease is live or completed.
func testLeaseMismatch[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	req := request("lease-mismatch", "x")
	l := e.acquire(e.Store, req, idem.Won)
	e.acquire(e.Store, request(req.Key, "other"), idem.Mismatch)
	if _, err := l.Complete(e.Ctx, created("done"), nil); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	e.acquire(e.Store, request(req.Key, "other"), idem.Mismatch)
}

// heartbeatLease is the lease of the cases whose work outlasts it under
// the heartbeat. The heartbeat beats every third of the lease and gives up
// once no extension succeeded for 9/10 of it, so the lease bounds the round
// trips: two extensions in a row may take 1.2 s together here. (At 400 ms
// they had 227 ms, and at 1 s 567 ms, which CI runs on two loaded cores
// missed.)
const heartbeatLease = 2 * time.Second

// testDoLeaseHeartbeat: DoLease keeps the lease alive while slow work runs
// (no takeover), and stores the work's answer.
func testDoLeaseHeartbeat[TTx any](t *testing.T, b Backend[TTx]) {
	const short = heartbeatLease
	e := setup(t, b, idem.Config{Lease: short, WaitBound: 50 * time.Millisecond})
	req := request("lease-heartbeat", "x")
	probed := make(chan idem.Outcome, 1)
	res, err := e.Store.DoLease(e.Ctx, req, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		time.Sleep(short + short/10) // past the lease: without the heartbeat it would end
		other, err := e.Store.Lease(e.Ctx, req)
		if err != nil {
			return idem.Response{}, err
		}
		probed <- other.Outcome
		return created("slow"), l.RecordStep(ctx, "done", nil, e.step("lease-heartbeat"))
	})
	if err != nil || !res.Committed {
		e.Fatalf(req.Key, "DoLease: %+v, %v", res, err)
	}
	if o := <-probed; o != idem.InFlight {
		e.Fatalf(req.Key, "a retry during slow work: %v, want in-flight (the heartbeat keeps the lease)", o)
	}
	if r := e.acquire(e.Store, req, idem.Replay); string(r.Response.Body) != "slow" {
		e.Fatalf(req.Key, "replay %q", r.Response.Body)
	}
}

// testExpiredLeasesResume: a lease nobody resumes is listed, and a recovery
// routine resumes it without the request.
func testExpiredLeasesResume[TTx any](t *testing.T, b Backend[TTx]) {
	e, clk := leaseEnv(t, b, idem.Config{})
	req := request("lease-abandoned", "x")
	l := e.acquire(e.Store, req, idem.Won)
	if err := l.RecordStep(e.Ctx, "charged", []byte("ch_3"), nil); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	live := e.acquire(e.Store, request("lease-live", "x"), idem.Won)
	e.acquire(e.Store, request("lease-done", "x"), idem.Won).Complete(e.Ctx, created("x"), nil)
	if got, err := e.Store.ExpiredLeases(e.Ctx, 10); err != nil || len(got) != 0 {
		e.Fatalf(req.Key, "ExpiredLeases before any expiry: %d, %v, want none", len(got), err)
	}
	clk.add(lease / 2)
	if err := live.Extend(e.Ctx); err != nil {
		e.Fatalf("lease-live", "Extend: %v", err)
	}
	clk.add(lease/2 + time.Second)
	got, err := e.Store.ExpiredLeases(e.Ctx, 10)
	if err != nil || len(got) != 1 || got[0].Key != req.Key || got[0].Step != "charged" {
		e.Fatalf(req.Key, "ExpiredLeases: %+v, %v, want only the abandoned one", got, err)
	}
	resumed, err := e.Store.Resume(e.Ctx, got[0].Scope, got[0].Key)
	if err != nil || resumed.Outcome != idem.Won || resumed.Token() != 2 {
		e.Fatalf(req.Key, "Resume: %+v, %v, want the lease taken over", resumed, err)
	}
	if name, _ := resumed.Step(); name != "charged" {
		e.Fatalf(req.Key, "resumed at step %q, want charged", name)
	}
	if _, err := e.Store.Resume(e.Ctx, req.Scope, "no-such-key"); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf("no-such-key", "Resume of an absent key: %v, want ErrNotFound", err)
	}
}

// testLeaseAndDoShareKeys: a transaction of Do meeting a live lease gets
// InFlight, and never runs its function.
func testLeaseAndDoShareKeys[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	req := request("lease-and-do", "x")
	l := e.acquire(e.Store, req, idem.Won)
	if r := e.do(e.Store, req, e.work("lease-and-do", created("do"))); r.Outcome != idem.InFlight {
		e.Fatalf(req.Key, "Do beside a live lease: %v, want in-flight", r.Outcome)
	}
	if _, err := l.Complete(e.Ctx, created("lease"), nil); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	if r := e.do(e.Store, req, e.work("lease-and-do", created("do"))); r.Outcome != idem.Replay || string(r.Response.Body) != "lease" {
		e.Fatalf(req.Key, "Do after the lease completed: %v %q, want a replay", r.Outcome, r.Response.Body)
	}
	if n := e.effectCount("lease-and-do"); n != 0 {
		e.Fatalf(req.Key, "Do's function ran %d times, want never", n)
	}
}

// testLeaseBadInput: bad steps and misuse are refused before anything is
// written.
func testLeaseBadInput[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	req := request("lease-input", "x")
	l := e.acquire(e.Store, req, idem.Won)
	for _, tc := range []struct {
		step string
		data []byte
	}{{"", nil}, {"bad\nstep", nil}, {"ok", make([]byte, idem.MaxStepData+1)}} {
		if err := l.RecordStep(e.Ctx, tc.step, tc.data, nil); !errors.Is(err, idem.ErrInvalidStep) {
			e.Fatalf(req.Key, "RecordStep(%q, %d bytes): %v, want ErrInvalidStep", tc.step, len(tc.data), err)
		}
	}
	loser := e.acquire(e.Store, request(req.Key, "other"), idem.Mismatch)
	if err := loser.RecordStep(e.Ctx, "x", nil, nil); !errors.Is(err, idem.ErrNotClaimed) {
		e.Fatalf(req.Key, "RecordStep on a lost claim: %v, want ErrNotClaimed", err)
	}
	if _, err := e.Store.Lease(e.Ctx, idem.Request{Scope: req.Scope, Key: ""}); !errors.Is(err, idem.ErrInvalidKey) {
		e.Fatalf("", "Lease with an empty key: %v, want ErrInvalidKey", err)
	}
	if name, _ := l.Step(); name != "" {
		e.Fatalf(req.Key, "a refused step was recorded: %q", name)
	}
}
