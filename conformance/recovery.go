package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// RunRecovery's cases: a lease holder killed mid-work is resumed by the
// runner from its last recovery point, once, on every backend.

// recoveryRounds runs idem.RunRecovery on store until it has run n rounds
// (within a minute) and returns them.
func (e *env[TTx]) recoveryRounds(store *idem.Store[TTx], r idem.Recovery[TTx], n int) ([]idem.RecoveryRound, error) {
	ctx, cancel := context.WithTimeout(e.Ctx, time.Minute)
	defer cancel()
	var rounds []idem.RecoveryRound
	r.Interval, r.Jitter = time.Millisecond, -1
	r.Report = func(round idem.RecoveryRound) {
		rounds = append(rounds, round)
		if len(rounds) == n {
			cancel()
		}
	}
	err := idem.RunRecovery(ctx, store, r)
	if len(rounds) < n {
		return rounds, fmt.Errorf("RunRecovery ran %d rounds, want %d: %w", len(rounds), n, err)
	}
	if !errors.Is(err, context.Canceled) {
		return rounds, fmt.Errorf("RunRecovery returned %w, want context.Canceled", err)
	}
	return rounds, nil
}

// shipAfterCharge is a recovery function: it resumes only from the step
// "charged" (a takeover that found no charge would charge again, which
// this work must not do), ships with an effect labelled label recorded
// with its step, and answers with the charge.
func (e *env[TTx]) shipAfterCharge(label string) idem.LeaseFunc[TTx] {
	return func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		name, data := l.Step()
		if name != "charged" {
			return idem.Response{}, fmt.Errorf("resumed at step %q, want charged", name)
		}
		if err := l.RecordStep(ctx, "shipped", data, e.step(label)); err != nil {
			return idem.Response{}, err
		}
		return created(string(data)), nil
	}
}

// testRecoveryResumesKilledHolder: a holder takes a lease, records a step
// with its write, and dies (no release, no heartbeat, no completion: a
// killed process). RunRecovery takes the lease over once its holder is
// gone, resumes from the recorded step, completes: every effect happens
// once, the answer replays, the dead holder's later writes are fenced, and
// a live lease beside it is never taken.
func testRecoveryResumesKilledHolder[TTx any](t *testing.T, b Backend[TTx]) {
	events := &eventLog{}
	e, clk := leaseEnv(t, b, idem.Config{Observer: events})
	req := request("recover-killed", "x")
	dead := e.acquire(e.Store, req, idem.Won)
	if err := dead.RecordStep(e.Ctx, "charged", []byte("ch_1"), e.step("recover-charge")); err != nil {
		e.Fatalf(req.Key, "RecordStep: %v", err)
	}
	clk.add(lease + time.Second) // the holder was killed: its lease ends
	live := e.acquire(e.Store, request("recover-live", "x"), idem.Won)

	rounds, err := e.recoveryRounds(e.Store, idem.Recovery[TTx]{
		Scopes: map[string]idem.LeaseFunc[TTx]{req.Scope: e.shipAfterCharge("recover-ship")},
	}, 2)
	if err != nil {
		e.Fatalf(req.Key, "%v", err)
	}
	if r := rounds[0]; r.Listed != 1 || r.Completed != 1 || r.Err != nil {
		e.Fatalf(req.Key, "first round %+v, want the killed holder's lease completed", r)
	}
	if r := rounds[1]; r.Listed != 0 {
		e.Fatalf(req.Key, "second round %+v, want nothing left to recover", r)
	}
	got := events.of(idem.EventRecovery)
	if len(got) != 1 || got[0].Recovery != idem.RecoveryCompleted || got[0].Key != req.Key || got[0].Token != 2 || got[0].Step != "charged" {
		e.Fatalf(req.Key, "recovery events %+v, want one completed with token 2 from step charged", got)
	}
	for _, label := range []string{"recover-charge", "recover-ship"} {
		if n := e.effectCount(label); n != 1 {
			e.Fatalf(req.Key, "%s: %d effects, want exactly 1", label, n)
		}
	}
	if r := e.acquire(e.Store, req, idem.Replay); string(r.Response.Body) != "ch_1" {
		e.Fatalf(req.Key, "replay %q, want the recovered answer", r.Response.Body)
	}
	e.staleRefused(dead, "recover-stale")
	if live.Token() != 1 {
		e.Fatalf("recover-live", "token %d", live.Token())
	}
	if res, err := live.Complete(e.Ctx, created("live"), nil); err != nil || !res.Committed {
		e.Fatalf("recover-live", "the live holder's Complete: %+v, %v, want its lease untouched", res, err)
	}
}

// testRecoveryRunnersRace: runners of several instances (stores) at once
// over several killed holders' leases: each lease is taken over by one
// runner, and each one's work is resumed and done exactly once.
func testRecoveryRunnersRace[TTx any](t *testing.T, b Backend[TTx]) {
	const keys, runners = 6, 3
	e, clk := leaseEnv(t, b, idem.Config{})
	for i := range keys {
		req := request(fmt.Sprintf("recover-race-%d", i), "x")
		dead := e.acquire(e.Store, req, idem.Won)
		if err := dead.RecordStep(e.Ctx, "charged", []byte(req.Key), nil); err != nil {
			e.Fatalf(req.Key, "RecordStep: %v", err)
		}
	}
	clk.add(lease + time.Second)
	errs := make([]error, runners)
	rounds := make([][]idem.RecoveryRound, runners)
	var wg sync.WaitGroup
	for i := range runners {
		store, err := idem.New(e.Driver, e.Store.Config()) // another instance's store
		if err != nil {
			e.Fatalf("", "idem.New: %v", err)
		}
		wg.Go(func() {
			rounds[i], errs[i] = e.recoveryRounds(store, idem.Recovery[TTx]{
				Concurrency: 2,
				Scopes:      map[string]idem.LeaseFunc[TTx]{request("", "").Scope: e.shipAfterCharge("recover-race")},
			}, 2)
		})
	}
	wg.Wait()
	completed := 0
	for i := range runners {
		if errs[i] != nil {
			e.Fatalf("", "runner %d: %v", i, errs[i])
		}
		for _, r := range rounds[i] {
			if r.Failed != 0 || r.Unknown != 0 {
				e.Errorf("", "runner %d: round %+v, want no failure", i, r)
			}
			completed += r.Completed
		}
	}
	if completed != keys {
		e.Fatalf("", "%d leases completed over all runners, want %d", completed, keys)
	}
	if n := e.effectCount("recover-race"); n != keys {
		e.Fatalf("", "%d effects, want %d (one per lease)", n, keys)
	}
	for i := range keys {
		req := request(fmt.Sprintf("recover-race-%d", i), "x")
		if r := e.acquire(e.Store, req, idem.Replay); string(r.Response.Body) != req.Key {
			e.Fatalf(req.Key, "replay %q", r.Response.Body)
		}
	}
}
