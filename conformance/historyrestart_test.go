package conformance

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestHistoryRestartsTakeTurns: a restart that falls due while another
// runs waits for it (restarts never overlap), and a worker waiting for the
// server is let go when the restart it waits for ends.
func TestHistoryRestartsTakeTurns(t *testing.T) {
	var running, most, calls atomic.Int64
	first := make(chan struct{})
	restart := func(ctx context.Context) error {
		n := running.Add(1)
		defer running.Add(-1)
		if n > most.Load() {
			most.Store(n)
		}
		if calls.Add(1) == 1 {
			select {
			case <-first:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	answers := func(context.Context) error { return nil }
	var clock atomic.Int64
	r := newHistoryRestarts(t.Context(), 1, 100, restart, answers, func() int64 { return clock.Add(1) })
	r.at = []int64{10, 20}

	r.started(10)
	waitFor(t, "the first restart to begin", func() bool { return calls.Load() == 1 })
	r.started(20) // due while the first runs
	awaited := make(chan struct{})
	go func() {
		r.await(t.Context())
		close(awaited)
	}()
	select {
	case <-awaited:
		t.Fatal("a worker's wait for the server ended while the restart ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(first)
	select {
	case <-awaited:
	case <-time.After(5 * time.Second):
		t.Fatal("a worker waiting for the server still waits after the restart ended")
	}
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the postponed restart never ended")
	}

	if got := calls.Load(); got != 2 {
		t.Errorf("%d restarts ran, want 2", got)
	}
	if got := most.Load(); got != 1 {
		t.Errorf("%d restarts ran at once, want 1", got)
	}
	if len(r.windows) != 2 || r.windows[0].postponed || !r.windows[1].postponed {
		t.Fatalf("windows %+v, want two, the second postponed", r.windows)
	}
	if r.windows[0].end > r.windows[1].begin {
		t.Errorf("windows %+v overlap", r.windows)
	}
	if r.up != nil || len(r.err) > 0 {
		t.Errorf("after the restarts: up %v, errors %v", r.up, r.err)
	}
}

// waitFor polls cond for up to five seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
