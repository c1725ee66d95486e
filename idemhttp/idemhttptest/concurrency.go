package idemhttptest

import (
	"bytes"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
)

func testInFlight[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const bound = 300 * time.Millisecond
	started, release := make(chan struct{}), make(chan struct{})
	e := setup(t, b, options[TTx]{
		store: idem.Config{WaitBound: bound},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if e.runs.Load() == 0 {
				close(started)
				<-release // holds the claim, in its open transaction
			}
			e.order(w, r)
		},
	})
	const key = "in-flight-1"
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.send(call{key: key, body: "x"}) }()
	select {
	case <-started:
	case <-time.After(time.Minute):
		e.Fatalf(key, "the first request's handler did not start")
	}
	start := time.Now()
	r := e.send(call{key: key, body: "x"})
	elapsed := time.Since(start)
	close(release)
	e.expectProblem(key, r, http.StatusConflict, e.heldKeyCode())
	e.expectRetryAfter(key, r)
	if elapsed < bound/2 {
		e.Errorf(key, "409 after %v, want it after waiting about the bound %v", elapsed, bound)
	}
	first := <-firstDone
	if first.status != http.StatusCreated {
		e.Fatalf(key, "first: %d %s", first.status, first.body)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}), "Set-Cookie", "Connection", "X-Hop")
	e.expectRows(key, 1, 1, 1)
}

// testConcurrent: eight requests with one key at once. The first handler
// to run holds its transaction open until the seven others are waiting
// inside their claims (an Observer on the store's driver sees them), then a
// little longer; every one of them must then replay its answer, after it
// committed: one effect, one original answer, seven replays, no 409.
func testConcurrent[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const n = 8
	const hold = 150 * time.Millisecond
	obs := conformance.NewObserver()
	var (
		first   atomic.Bool
		waits   []conformance.Wait
		gateErr error
		release time.Time
	)
	e := setup(t, b, options[TTx]{
		store:  idem.Config{MaxAttempts: 20},
		driver: func(d dialect.Driver[TTx]) dialect.Driver[TTx] { return conformance.Observe(d, obs) },
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if first.CompareAndSwap(false, true) {
				waits, gateErr = obs.AwaitWaiting(n-1, 30*time.Second)
				if gateErr == nil {
					time.Sleep(hold)
					gateErr = obs.StillWaiting(waits)
				}
				release = time.Now()
			}
			e.order(w, r)
		},
	})
	const key = "concurrent-1"
	start := make(chan struct{})
	results := make([]response, n)
	ends := make([]time.Time, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = e.send(call{key: key, body: "x", ctx: conformance.AsClient(e.Ctx, i)})
			ends[i] = time.Now()
		})
	}
	close(start)
	wg.Wait()
	if gateErr != nil {
		e.Fatalf(key, "%v", gateErr)
	}
	var original []byte
	replays := 0
	for i, r := range results {
		switch {
		case r.status == http.StatusCreated && r.header.Get(idemhttp.HeaderReplayed) == "":
			if original != nil {
				e.Fatalf(key, "two original answers: %q and %q", original, r.body)
			}
			original = r.body
		case r.status == http.StatusCreated:
			replays++
			if ends[i].Before(release) {
				e.Fatalf(key, "request %d replayed %v before the first one let go", i, release.Sub(ends[i]))
			}
		default:
			e.Fatalf(key, "request %d: %d %s, want 201 (the original, or a replay of it after waiting)", i, r.status, r.body)
		}
	}
	if replays != n-1 {
		e.Fatalf(key, "%d replays, want %d", replays, n-1)
	}
	for i, r := range results {
		if !bytes.Equal(r.body, original) {
			e.Fatalf(key, "request %d got %q, want the original %q", i, r.body, original)
		}
	}
	if err := obs.CheckRetries(waits); err != nil {
		e.Fatalf(key, "%v", err)
	}
	e.expectRows(key, 1, 1, 1)
}
