package idem_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// fakeClock is a store clock a test moves, safe for the heartbeats'
// goroutines.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC).UnixMicro())
	return c
}
func (c *fakeClock) Now() time.Time      { return time.UnixMicro(c.now.Load()).UTC() }
func (c *fakeClock) add(d time.Duration) { c.now.Add(d.Microseconds()) }
func (c *fakeClock) cfg(cfg idem.Config) idem.Config {
	cfg.Clock, cfg.Lease = c.Now, time.Minute
	return cfg
}

// events keeps a store's events.
type events struct {
	mu  sync.Mutex
	all []idem.Event
}

func (e *events) Observe(_ context.Context, ev idem.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

// recoveries are the EventRecovery events with outcome o, by key.
func (e *events) recoveries(o idem.RecoveryOutcome) []idem.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []idem.Event
	for _, ev := range e.all {
		if ev.Kind == idem.EventRecovery && ev.Recovery == o {
			out = append(out, ev)
		}
	}
	return out
}

const payOp = `POST "/orders/{id}/pay"`

// payRequest is a request of the pay operation, in the scope idemhttp
// builds.
func payRequest(key string) idem.Request {
	return idem.Request{Scope: idem.Scope("tenant-42", payOp), Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders/1/pay", []byte(key))}
}

// abandon takes a lease on req, records the step "charged" and drops the
// holder, as a process killed mid-work would: no release, no heartbeat.
// It returns the dead holder's lease, to check it is fenced.
func abandon(t *testing.T, store *idem.Store[*sql.Tx], req idem.Request) *idem.Lease[*sql.Tx] {
	t.Helper()
	l, err := store.Lease(t.Context(), req)
	if err != nil || l.Outcome != idem.Won {
		t.Fatalf("Lease %q: %+v, %v", req.Key, l, err)
	}
	if err := l.RecordStep(t.Context(), "charged", []byte("ch_"+req.Key), nil); err != nil {
		t.Fatalf("RecordStep %q: %v", req.Key, err)
	}
	return l
}

// runRounds runs RunRecovery until it has run n rounds and returns them.
func runRounds(t *testing.T, store *idem.Store[*sql.Tx], r idem.Recovery[*sql.Tx], n int) []idem.RecoveryRound {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var rounds []idem.RecoveryRound
	r.Report = func(round idem.RecoveryRound) {
		rounds = append(rounds, round)
		if len(rounds) == n {
			cancel()
		}
	}
	if r.Interval == 0 {
		r.Interval = time.Millisecond
	}
	done := make(chan error, 1)
	go func() { done <- idem.RunRecovery(ctx, store, r) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunRecovery: %v, want context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		cancel()
		<-done
		t.Fatalf("RunRecovery ran %d rounds in 20s, want %d", len(rounds), n)
	}
	return rounds
}

// resumePay resumes the pay operation: charges unless a step says it was
// done, and answers with the charge.
func resumePay(calls *atomic.Int64) idem.LeaseFunc[*sql.Tx] {
	return func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
		calls.Add(1)
		name, data := l.Step()
		if name != "charged" {
			return idem.Response{}, errors.New("no charge recorded")
		}
		return idem.Response{Status: 201, Body: data}, nil
	}
}

// TestRecoveryResumesAbandonedLease: a holder dies after its first step;
// the runner takes the lease over, its function resumes from the step and
// the response is stored; the dead holder is fenced; a live lease is not
// touched.
func TestRecoveryResumesAbandonedLease(t *testing.T) {
	clk := newFakeClock()
	obs := &events{}
	lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{Observer: obs}))
	store := lite.Store
	dead := abandon(t, store, payRequest("dead"))
	clk.add(2 * time.Minute) // the holder is gone: its lease ends
	live := abandon(t, store, payRequest("live"))

	var calls atomic.Int64
	rounds := runRounds(t, store, idem.Recovery[*sql.Tx]{Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: resumePay(&calls)}}, 1)
	if r := rounds[0]; r.Listed != 1 || r.Completed != 1 || r.Failed+r.Taken+r.Unknown != 0 || r.Err != nil {
		t.Fatalf("round %+v, want the abandoned lease listed and completed", r)
	}
	if calls.Load() != 1 {
		t.Fatalf("recovery function ran %d times, want 1 (the live lease is not taken)", calls.Load())
	}
	got := obs.recoveries(idem.RecoveryCompleted)
	if len(got) != 1 || got[0].Key != "dead" || got[0].Token != 2 || got[0].Step != "charged" || got[0].Status != 201 {
		t.Fatalf("completed events %+v, want one for dead with token 2 from step charged", got)
	}
	res, err := store.Lease(t.Context(), payRequest("dead"))
	if err != nil || res.Outcome != idem.Replay || string(res.Response.Body) != "ch_dead" {
		t.Fatalf("retry after recovery: %+v, %v, want the recovered answer replayed", res, err)
	}
	if _, err := dead.Complete(t.Context(), idem.Response{Status: 201}, nil); !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("the dead holder's Complete: %v, want ErrLeaseLost", err)
	}
	if live.Token() != 1 {
		t.Fatal("live lease token changed")
	}
	if _, err := live.Complete(t.Context(), idem.Response{Status: 201}, nil); err != nil {
		t.Fatalf("the live holder's Complete: %v, want its lease intact", err)
	}
}

// TestRecoveryUnknownScope: a lease of a scope no function is registered
// for is left alone and reported (event and warning), and more of them
// than Limit at the head of the list do not starve a known one behind.
func TestRecoveryUnknownScope(t *testing.T) {
	clk := newFakeClock()
	obs := &events{}
	var logs bytes.Buffer
	lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{Observer: obs, Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	store := lite.Store
	for i := range 3 {
		req := payRequest(fmt.Sprintf("other-%d", i))
		req.Scope = idem.Scope("tenant-42", `POST "/refunds"`)
		abandon(t, store, req)
		clk.add(time.Second)
	}
	abandon(t, store, payRequest("known")) // newest: last in the list
	clk.add(2 * time.Minute)

	var calls atomic.Int64
	rounds := runRounds(t, store, idem.Recovery[*sql.Tx]{Limit: 2, Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: resumePay(&calls)}}, 1)
	if r := rounds[0]; r.Unknown != 3 || r.Completed != 1 || r.Listed != 4 {
		t.Fatalf("round %+v, want 3 unknown and the known one completed past them", r)
	}
	if n := len(obs.recoveries(idem.RecoveryUnknownScope)); n != 3 {
		t.Fatalf("%d unknown-scope events, want 3", n)
	}
	if !strings.Contains(logs.String(), "no recovery function") {
		t.Fatalf("no warning logged for an unknown scope: %s", logs.String())
	}
	rec, err := store.Lookup(t.Context(), idem.Scope("tenant-42", `POST "/refunds"`), "other-0")
	if err != nil || rec.Token != 1 || !rec.LeaseExpired {
		t.Fatalf("unknown-scope record %+v, %v: want it untouched (token 1, lease still expired)", rec, err)
	}
}

// TestRecoveryHashedOperation: an operation Scope hashed in a long scope
// still finds its function.
func TestRecoveryHashedOperation(t *testing.T) {
	clk := newFakeClock()
	lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{}))
	op := `POST "/` + strings.Repeat("x", idem.MaxScopeBytes) + `"`
	req := payRequest("long")
	req.Scope = idem.Scope("tenant-42", op)
	if !strings.Contains(req.Scope, "sha256:") {
		t.Fatalf("scope %q not hashed", req.Scope)
	}
	abandon(t, lite.Store, req)
	clk.add(2 * time.Minute)
	var calls atomic.Int64
	rounds := runRounds(t, lite.Store, idem.Recovery[*sql.Tx]{Operations: map[string]idem.LeaseFunc[*sql.Tx]{op: resumePay(&calls)}}, 1)
	if rounds[0].Completed != 1 || calls.Load() != 1 {
		t.Fatalf("round %+v, calls %d: want the hashed operation resumed", rounds[0], calls.Load())
	}
}

// TestRecoveryFunctionFails: a function that fails, panics or answers a
// status the store does not store leaves the lease to lapse, not
// released: the next round does not retry it at once (no busy loop) and a
// retry of the request waits; once the lease has lapsed a round resumes it
// again.
func TestRecoveryFunctionFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func() (idem.Response, error)
	}{
		{"error", func() (idem.Response, error) { return idem.Response{}, errors.New("provider down") }},
		{"panic", func() (idem.Response, error) { panic("bug") }},
		{"status 503", func() (idem.Response, error) { return idem.Response{Status: 503}, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			obs := &events{}
			lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{Observer: obs, WaitBound: 10 * time.Millisecond}))
			store := lite.Store
			abandon(t, store, payRequest("k"))
			clk.add(2 * time.Minute)
			var calls atomic.Int64
			failing := true
			fn := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
				calls.Add(1)
				if failing {
					return tc.fail()
				}
				return idem.Response{Status: 201, Body: []byte("done")}, nil
			}
			r := idem.Recovery[*sql.Tx]{Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: fn}}
			rounds := runRounds(t, store, r, 3)
			if calls.Load() != 1 || rounds[0].Failed != 1 || rounds[1].Listed != 0 || rounds[2].Listed != 0 {
				t.Fatalf("rounds %+v, %d calls: want one failed attempt, then nothing listed while its lease runs", rounds, calls.Load())
			}
			if got := obs.recoveries(idem.RecoveryFailed); len(got) != 1 || got[0].Err == nil || got[0].Token != 2 {
				t.Fatalf("failed events %+v, want one with the error and token 2", got)
			}
			if l, err := store.Lease(t.Context(), payRequest("k")); err != nil || l.Outcome != idem.InFlight {
				t.Fatalf("a retry after the failure: %+v, %v, want in-flight (the lease is left to lapse)", l, err)
			}
			clk.add(2 * time.Minute)
			failing = false
			rounds = runRounds(t, store, r, 1)
			if rounds[0].Completed != 1 || calls.Load() != 2 {
				t.Fatalf("round after the lapse %+v, %d calls: want it resumed and completed", rounds[0], calls.Load())
			}
			if rec, err := store.Lookup(t.Context(), payRequest("k").Scope, "k"); err != nil || !rec.Completed || rec.Token != 3 {
				t.Fatalf("record %+v, %v: want completed by the third holder", rec, err)
			}
		})
	}
}

// TestRecoveryPacing: a round resumes at most Limit leases; rounds are
// an interval apart; at most Concurrency functions run at once, and that
// many do.
func TestRecoveryPacing(t *testing.T) {
	clk := newFakeClock()
	lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{}))
	store := lite.Store
	for i := range 5 {
		abandon(t, store, payRequest(fmt.Sprintf("k%d", i)))
	}
	clk.add(2 * time.Minute)
	var running, most atomic.Int64
	both := make(chan struct{})
	var once sync.Once
	fn := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if n == 2 {
			once.Do(func() { close(both) })
		}
		select { // the first two wait for each other, within a bound
		case <-both:
		case <-time.After(5 * time.Second):
		}
		return idem.Response{Status: 201}, nil
	}
	const interval = 30 * time.Millisecond
	rounds := runRounds(t, store, idem.Recovery[*sql.Tx]{Interval: interval, Jitter: -1, Limit: 2, Concurrency: 2,
		Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: fn}}, 4)
	var completed []int
	for _, r := range rounds {
		completed = append(completed, r.Completed)
	}
	if fmt.Sprint(completed) != "[2 2 1 0]" {
		t.Fatalf("completed per round %v, want [2 2 1 0] (Limit 2)", completed)
	}
	for i := 1; i < len(rounds); i++ {
		if gap := rounds[i].Started.Sub(rounds[i-1].Started.Add(rounds[i-1].Took)); gap < interval {
			t.Errorf("round %d began %v after the previous ended, want at least %v", i, gap, interval)
		}
	}
	if most.Load() != 2 {
		t.Fatalf("at most %d functions ran at once, want 2 (Concurrency 2)", most.Load())
	}
}

// TestRecoveryStops: RunRecovery returns when its context ends, during a
// pause or while a function runs; the function's context ends with it,
// and the lease it held is released so another instance resumes at once.
func TestRecoveryStops(t *testing.T) {
	clk := newFakeClock()
	lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{}))
	store := lite.Store
	abandon(t, store, payRequest("k"))
	clk.add(2 * time.Minute)
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan struct{})
	fn := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
		close(started)
		<-ctx.Done()
		return idem.Response{}, ctx.Err()
	}
	done := make(chan error, 1)
	go func() {
		done <- idem.RunRecovery(ctx, store, idem.Recovery[*sql.Tx]{Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: fn}})
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the function did not start")
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunRecovery: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunRecovery did not return within 10s of its context's end")
	}
	rec, err := store.Lookup(t.Context(), payRequest("k").Scope, "k")
	if err != nil || rec.Token != 2 || !rec.LeaseExpired || !rec.LeaseUntil.Equal(rec.CreatedAt) {
		t.Fatalf("record %+v, %v: want token 2 and its lease released", rec, err)
	}

	// During a pause: a long interval, cancelled after the first round.
	ctx, cancel = context.WithCancel(t.Context())
	go func() {
		done <- idem.RunRecovery(ctx, store, idem.Recovery[*sql.Tx]{Interval: time.Hour, Jitter: -1,
			Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: func(context.Context, *idem.Lease[*sql.Tx]) (idem.Response, error) {
				return idem.Response{Status: 201}, nil
			}},
			Report: func(idem.RecoveryRound) { cancel() }})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunRecovery: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunRecovery did not return during its pause")
	}
}

// TestRecoveryRace: two runners (two instances' stores on one database)
// that list the same abandoned lease: the one that resumes second finds it
// taken (held by the first, or completed by it) and runs nothing; the
// effect happens once.
func TestRecoveryRace(t *testing.T) {
	for _, firstDone := range []bool{false, true} {
		t.Run(fmt.Sprintf("first completed=%v", firstDone), func(t *testing.T) {
			clk := newFakeClock()
			obsA, obsB := &events{}, &events{}
			lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{Observer: obsA}))
			storeA := lite.Store
			storeB, err := idem.New(lite.Driver, clk.cfg(idem.Config{Observer: obsB}))
			if err != nil {
				t.Fatal(err)
			}
			abandon(t, storeA, payRequest("r1"))
			abandon(t, storeA, payRequest("r2"))
			clk.add(2 * time.Minute)

			var effects atomic.Int64
			aInside, aGo, aReturned := make(chan struct{}), make(chan struct{}), make(chan error, 1)
			ctxA, stopA := context.WithCancel(t.Context())
			defer stopA()
			// A resumes r2 only (B holds r1 by then), and waits inside
			// its function until told to go.
			fnA := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
				close(aInside)
				select {
				case <-aGo:
				case <-time.After(10 * time.Second):
				}
				effects.Add(1)
				return idem.Response{Status: 201, Body: []byte("A")}, nil
			}
			// B lists r1 and r2, resumes r1 and, inside it, lets A take
			// r2 (and complete it, in one variant); then B's stale listing
			// has it try r2.
			fnB := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
				if l.Record.Key == "r1" {
					go func() {
						aReturned <- idem.RunRecovery(ctxA, storeA, idem.Recovery[*sql.Tx]{Interval: time.Hour, Jitter: -1,
							Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: fnA}, Report: func(idem.RecoveryRound) { stopA() }})
					}()
					<-aInside
					if firstDone {
						close(aGo)
						waitFor(t, func() bool { return len(obsA.recoveries(idem.RecoveryCompleted)) == 1 })
					}
				}
				effects.Add(1)
				return idem.Response{Status: 201, Body: []byte("B")}, nil
			}
			rounds := runRounds(t, storeB, idem.Recovery[*sql.Tx]{Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: fnB}}, 1)
			if !firstDone {
				close(aGo)
				waitFor(t, func() bool { return len(obsA.recoveries(idem.RecoveryCompleted)) == 1 })
			}
			if err := <-aReturned; !errors.Is(err, context.Canceled) {
				t.Fatalf("A's RunRecovery: %v", err)
			}
			if r := rounds[0]; r.Listed != 2 || r.Completed != 1 || r.Taken != 1 || r.Failed != 0 {
				t.Fatalf("B's round %+v, want r1 completed and r2 taken", r)
			}
			if got := obsB.recoveries(idem.RecoveryTaken); len(got) != 1 || got[0].Key != "r2" {
				t.Fatalf("B's taken events %+v, want r2", got)
			}
			if effects.Load() != 2 {
				t.Fatalf("%d effects, want 2 (one per record)", effects.Load())
			}
			res, err := storeA.Lease(t.Context(), payRequest("r2"))
			if err != nil || res.Outcome != idem.Replay || string(res.Response.Body) != "A" {
				t.Fatalf("r2: %+v, %v, want A's answer", res, err)
			}
		})
	}
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRecoveryManyRunners: runners on four instances at once, many
// abandoned leases: each is completed exactly once, and the function runs
// once per lease.
func TestRecoveryManyRunners(t *testing.T) {
	const keys, runners = 24, 4
	clk := newFakeClock()
	lite := idemtest.NewSQLite(t, clk.cfg(idem.Config{}))
	for i := range keys {
		abandon(t, lite.Store, payRequest(fmt.Sprintf("k%d", i)))
	}
	clk.add(2 * time.Minute)
	var mu sync.Mutex
	ran := map[string]int{}
	fn := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
		mu.Lock()
		ran[l.Record.Key]++
		mu.Unlock()
		return idem.Response{Status: 201}, nil
	}
	var wg sync.WaitGroup
	for range runners {
		store, err := idem.New(lite.Driver, clk.cfg(idem.Config{}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			runRounds(t, store, idem.Recovery[*sql.Tx]{Jitter: -1, Concurrency: 3, Limit: 8, Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: fn}}, 3)
		})
	}
	wg.Wait()
	for i := range keys {
		key := fmt.Sprintf("k%d", i)
		if ran[key] != 1 {
			t.Errorf("%s: function ran %d times, want 1", key, ran[key])
		}
		if rec, err := lite.Store.Lookup(t.Context(), payRequest(key).Scope, key); err != nil || !rec.Completed {
			t.Errorf("%s: %+v, %v, want completed", key, rec, err)
		}
	}
}

// TestRunRecoveryRefusesBadConfig: a runner that could do nothing, or
// whose schedule is out of range, is refused before it starts.
func TestRunRecoveryRefusesBadConfig(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{})
	fn := func(context.Context, *idem.Lease[*sql.Tx]) (idem.Response, error) { return idem.Response{}, nil }
	ops := map[string]idem.LeaseFunc[*sql.Tx]{payOp: fn}
	for name, r := range map[string]idem.Recovery[*sql.Tx]{
		"no function":       {},
		"nil function":      {Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: nil}},
		"nil scope func":    {Scopes: map[string]idem.LeaseFunc[*sql.Tx]{"s": nil}},
		"hashed operation":  {Operations: map[string]idem.LeaseFunc[*sql.Tx]{"sha256:ab": fn}},
		"negative interval": {Operations: ops, Interval: -time.Second},
		"jitter 1":          {Operations: ops, Jitter: 1},
		"negative limit":    {Operations: ops, Limit: -1},
		"negative conc":     {Operations: ops, Concurrency: -1},
	} {
		if err := idem.RunRecovery(t.Context(), lite.Store, r); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
	if err := idem.RunRecovery[*sql.Tx](t.Context(), nil, idem.Recovery[*sql.Tx]{Operations: ops}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("nil store: %v, want ErrInvalidConfig", err)
	}
}
