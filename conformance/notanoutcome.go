package conformance

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/idemkit/idem"
)

// A request that never began is not an outcome: its answer reaches the
// caller, nothing it wrote commits, and the key stays free, so a corrected
// request with the same key (another fingerprint) runs.

// testNotAnOutcome: Do with a function that answers with ErrNotAnOutcome
// (a 409 here, a status the store keeps by default) and with a plain 400
// (not kept by default): each returns its answer, not committed, leaves no
// record and no effect, and the corrected request with the same key wins,
// commits and then replays.
func testNotAnOutcome[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	for _, tc := range []struct {
		name   string
		status int
		err    error
	}{
		{"marked", http.StatusConflict, idem.ErrNotAnOutcome},
		{"marked-wrapped", http.StatusNotFound, errors.Join(errors.New("no such account"), idem.ErrNotAnOutcome)},
		{"status-400", http.StatusBadRequest, nil},
		{"status-422", http.StatusUnprocessableEntity, nil},
	} {
		label := "never-began-" + tc.name
		invalid := request(label, "invalid")
		res, err := e.Store.Do(e.Ctx, invalid, func(ctx context.Context, tx TTx) (idem.Response, error) {
			if err := e.effect(ctx, tx, label); err != nil {
				return idem.Response{}, err
			}
			return idem.Response{Status: tc.status, Body: []byte("fix the request")}, tc.err
		})
		if err != nil || res.Outcome != idem.Won || res.Committed || res.Response.Status != tc.status || string(res.Response.Body) != "fix the request" || res.NotStored != nil {
			e.Fatalf(invalid.Key, "%s: Do = %+v, %v; want won, the %d answered, not committed", tc.name, res, err, tc.status)
		}
		if _, err := e.Store.Lookup(e.Ctx, invalid.Scope, invalid.Key); !errors.Is(err, idem.ErrNotFound) {
			e.Fatalf(invalid.Key, "%s: Lookup after the answer = %v, want ErrNotFound (the key stays free)", tc.name, err)
		}
		if n := e.effectCount(label); n != 0 {
			e.Fatalf(invalid.Key, "%s: effects = %d, want 0 (rolled back)", tc.name, n)
		}
		corrected := request(label, "corrected")
		if r := e.do(e.Store, corrected, e.work(label, created("done"))); r.Outcome != idem.Won || !r.Committed {
			e.Fatalf(corrected.Key, "%s: the corrected request with the same key: %v committed %v, want won and committed", tc.name, r.Outcome, r.Committed)
		}
		if r := e.do(e.Store, corrected, e.work(label, created("again"))); r.Outcome != idem.Replay || string(r.Response.Body) != "done" {
			e.Fatalf(corrected.Key, "%s: a retry of the corrected request: %v %q, want a replay of %q", tc.name, r.Outcome, r.Response.Body, "done")
		}
		if r := e.do(e.Store, invalid, e.work(label, created("x"))); r.Outcome != idem.Mismatch {
			e.Fatalf(invalid.Key, "%s: the invalid request again: %v, want a mismatch (the key now holds the corrected one)", tc.name, r.Outcome)
		}
		if n := e.effectCount(label); n != 1 {
			e.Fatalf(corrected.Key, "%s: effects = %d, want 1", tc.name, n)
		}
	}
	// An invalid status is refused as it is without the mark.
	req := request("never-began-invalid-status", "x")
	if _, err := e.Store.Do(e.Ctx, req, func(context.Context, TTx) (idem.Response, error) {
		return idem.Response{Status: 42}, idem.ErrNotAnOutcome
	}); !errors.Is(err, idem.ErrInvalidResponse) {
		e.Fatalf(req.Key, "Do with status 42 and ErrNotAnOutcome: %v, want ErrInvalidResponse", err)
	}
}

// testLeaseNotAnOutcome: in lease mode, a function that answers with
// ErrNotAnOutcome before recording a step has its record deleted
// (Lease.Forget): the key is free for the corrected request, which wins
// with a higher token. After a step was recorded the work began: DoLease
// releases the lease and fails, and the key stays with its request, which
// resumes from the step.
func testLeaseNotAnOutcome[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	invalid := request("lease-never-began", "invalid")
	res, err := e.Store.DoLease(e.Ctx, invalid, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		return idem.Response{Status: http.StatusNotFound, Body: []byte("no such seat")}, idem.ErrNotAnOutcome
	})
	if err != nil || res.Outcome != idem.Won || res.Committed || res.Response.Status != http.StatusNotFound {
		e.Fatalf(invalid.Key, "DoLease answering ErrNotAnOutcome: %+v, %v; want won, the 404, not committed", res, err)
	}
	if n := e.Records(); n != 0 {
		e.Fatalf(invalid.Key, "records = %d after the lease was forgotten, want 0", n)
	}
	corrected := request(invalid.Key, "corrected")
	l := e.acquire(e.Store, corrected, idem.Won)
	if l.Token() != 2 || l.Resumed() {
		e.Fatalf(corrected.Key, "the corrected request: token %d resumed %v, want a fresh claim with token 2 (tokens never repeat)", l.Token(), l.Resumed())
	}
	if res, err := l.Complete(e.Ctx, created("seat 7"), nil); err != nil || !res.Committed {
		e.Fatalf(corrected.Key, "Complete of the corrected request: %+v, %v", res, err)
	}
	e.acquire(e.Store, corrected, idem.Replay)

	// Forget on a lease that was taken over: lost, and nothing deleted.
	lost := request("lease-never-began-lost", "x")
	old := e.acquire(e.Store, lost, idem.Won)
	if err := e.Store.ForceDelete(e.Ctx, lost.Scope, lost.Key); err != nil {
		e.Fatalf(lost.Key, "ForceDelete: %v", err)
	}
	e.acquire(e.Store, lost, idem.Won)
	if err := old.Forget(e.Ctx); !errors.Is(err, idem.ErrLeaseLost) {
		e.Fatalf(lost.Key, "Forget by a holder whose lease was taken over: %v, want ErrLeaseLost", err)
	}
	if _, err := e.Store.Inspect(e.Ctx, lost.Scope, lost.Key); err != nil {
		e.Fatalf(lost.Key, "the new holder's record after the old holder's Forget: %v, want it kept", err)
	}

	begun := request("lease-began", "x")
	_, err = e.Store.DoLease(e.Ctx, begun, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		if err := l.RecordStep(ctx, "charged", []byte("ch_1"), e.step("lease-began")); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: http.StatusBadRequest}, idem.ErrNotAnOutcome
	})
	if !errors.Is(err, idem.ErrWorkBegan) || !errors.Is(err, idem.ErrInvalidResponse) || errors.Is(err, idem.ErrNotAnOutcome) {
		e.Fatalf(begun.Key, "DoLease answering ErrNotAnOutcome after a step: %v, want an error matching ErrWorkBegan and ErrInvalidResponse, not ErrNotAnOutcome", err)
	}
	next := e.acquire(e.Store, begun, idem.Won)
	if name, _ := next.Step(); !next.Resumed() || name != "charged" {
		e.Fatalf(begun.Key, "a retry after it: resumed %v at %q, want the work resumed from its step (the lease released, not forgotten)", next.Resumed(), name)
	}
	if n := e.effectCount("lease-began"); n != 1 {
		e.Fatalf(begun.Key, "step effects = %d, want 1 (kept)", n)
	}
}
