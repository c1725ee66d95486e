package conformance

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
)

// testCompleteGuardsClaimedRow: a Claim stays bound to the record it
// claimed. Once the key was taken over (here in the same transaction, the
// store's clock past the retention), Complete on the old Claim must not
// write the response onto the new owner's record: the completion statement
// checks the fingerprint and that the record is still in flight.
func testCompleteGuardsClaimedRow[TTx any](t *testing.T, b Backend[TTx]) {
	for _, tc := range []struct {
		name string
		// takeoverBody is the body of the request that takes the key over.
		takeoverBody string
		// ownerFirst completes the new owner before the stale claim tries.
		ownerFirst bool
	}{
		{"another fingerprint took the key over", "new body", false},
		{"another fingerprint took the key over and completed", "new body", true},
		{"the same fingerprint took the key over and completed", "old body", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock(t0)
			e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
			first := request("guard-1", "old body")
			txn := e.Begin()
			defer txn.Rollback(e.Ctx)
			stale, err := e.Store.Claim(e.Ctx, txn.Native(), first)
			if err != nil || stale.Outcome != idem.Won {
				e.Fatalf(first.Key, "first Claim: %+v, %v, want won", stale, err)
			}
			clk.add(lifetime)
			next := request("guard-1", tc.takeoverBody)
			owner, err := e.Store.Claim(e.Ctx, txn.Native(), next)
			if err != nil || owner.Outcome != idem.Won {
				e.Fatalf(next.Key, "Claim after the retention: %+v, %v, want won (takeover)", owner, err)
			}
			if tc.ownerFirst {
				if err := owner.Complete(e.Ctx, created("owner")); err != nil {
					e.Fatalf(next.Key, "owner's Complete: %v", err)
				}
			}
			if err := stale.Complete(e.Ctx, created("stale")); !errors.Is(err, idem.ErrNotClaimed) {
				e.Fatalf(first.Key, "Complete of the superseded claim: %v, want ErrNotClaimed", err)
			}
			if !tc.ownerFirst {
				if err := owner.Complete(e.Ctx, created("owner")); err != nil {
					e.Fatalf(next.Key, "owner's Complete: %v", err)
				}
			}
			if err := txn.Commit(e.Ctx); err != nil {
				e.Fatalf(next.Key, "Commit: %v", err)
			}
			rec, err := e.Store.Lookup(e.Ctx, next.Scope, next.Key)
			if err != nil {
				e.Fatalf(next.Key, "Lookup: %v", err)
			}
			if !rec.Completed || rec.Fingerprint != next.Fingerprint || string(rec.Response.Body) != "owner" {
				e.Fatalf(next.Key, "stored record: completed %v, body %q; want the owner's response", rec.Completed, rec.Response.Body)
			}
		})
	}
}

// testInFlightMismatch: a key whose record is in flight (here: claimed and
// committed without Complete) answers a different fingerprint with Mismatch,
// not InFlight, on both paths, and does no work.
func testInFlightMismatch[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("abandoned-2", "first body")
	txn := e.Begin()
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Won {
		e.Fatalf(req.Key, "Claim: %+v, %v", claim, err)
	}
	if err := txn.Commit(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Commit: %v", err)
	}
	other := request("abandoned-2", "second body")
	res := e.do(e.Store, other, e.work("abandoned-2", created("x")))
	if res.Outcome != idem.Mismatch || res.Committed || res.Record.Completed || res.Record.Fingerprint != req.Fingerprint {
		e.Fatalf(req.Key, "Do with another body on an in-flight record: %+v, want mismatch naming the stored fingerprint", res)
	}
	txn = e.Begin()
	defer txn.Rollback(e.Ctx)
	c, err := e.Store.Claim(e.Ctx, txn.Native(), other)
	if err != nil || c.Outcome != idem.Mismatch {
		e.Fatalf(req.Key, "Claim with another body on an in-flight record: %+v, %v, want mismatch", c, err)
	}
	if n := e.effectCount("abandoned-2"); n != 0 {
		e.Fatalf(req.Key, "effects = %d, want 0", n)
	}
}

// testStatusPolicy: by default every status below 500 but 400, 408, 422, 425
// and 429 is stored and replays; the others are returned but rolled back
// (the retry does the work again). Config.StoreStatus changes the rule.
func testStatusPolicy[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	storing, err := idem.New(e.Driver, idem.Config{Table: e.Table, WaitBound: e.Store.Config().WaitBound, StoreStatus: func(int) bool { return true }})
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", e.Backend, err)
	}
	for _, tc := range []struct {
		status      int
		storeErrors bool
		stored      bool
	}{
		{200, false, true},
		{302, false, true},
		{400, false, false},
		{404, false, true},
		{409, false, true},
		{422, false, false},
		{499, false, true},
		{400, true, true},
		{422, true, true},
		{408, false, false},
		{425, false, false},
		{429, false, false},
		{500, false, false},
		{503, false, false},
		{599, false, false},
		{500, true, true},
		{599, true, true},
		{429, true, true},
	} {
		store, label := e.Store, fmt.Sprintf("status-%d", tc.status)
		if tc.storeErrors {
			store, label = storing, label+"-kept"
		}
		req := request(label, "x")
		resp := idem.Response{Status: tc.status, Body: []byte(label)}
		res := e.do(store, req, e.work(label, resp))
		if res.Outcome != idem.Won || res.Committed != tc.stored || res.Response.Status != tc.status {
			e.Errorf(req.Key, "status %d: %v committed %v, want won, committed %v", tc.status, res.Outcome, res.Committed, tc.stored)
			continue
		}
		_, lerr := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
		if tc.stored != (lerr == nil) {
			e.Errorf(req.Key, "status %d: Lookup = %v, want stored=%v", tc.status, lerr, tc.stored)
		}
		again := e.do(store, req, e.work(label, created("again")))
		switch {
		case tc.stored && (again.Outcome != idem.Replay || again.Response.Status != tc.status || string(again.Response.Body) != label):
			e.Errorf(req.Key, "status %d again: %v %d %q, want a replay of it", tc.status, again.Outcome, again.Response.Status, again.Response.Body)
		case !tc.stored && (again.Outcome != idem.Won || !again.Committed):
			e.Errorf(req.Key, "status %d again: %v, want won (the answer was rolled back)", tc.status, again.Outcome)
		}
		if n := e.effectCount(label); n != 1 {
			e.Errorf(req.Key, "status %d: effects = %d, want 1", tc.status, n)
		}
	}
}

// testCompleteFindsNothing: when the completion finds no in-flight record to
// store the response on (here the function removed it; on some backends the
// completion only runs at COMMIT), Do fails with ErrNotClaimed and the
// effect does not commit without its record.
func testCompleteFindsNothing[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("vanished-1", "x")
	_, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		if err := e.effect(ctx, tx, "vanished-1"); err != nil {
			return idem.Response{}, err
		}
		q, err := e.Driver.Wrap(tx)
		if err != nil {
			return idem.Response{}, err
		}
		if _, err := q.Exec(ctx, "DELETE FROM "+e.Table+" WHERE scope = "+sqlString(req.Scope)+" AND idem_key = "+sqlString(req.Key)); err != nil {
			return idem.Response{}, err
		}
		return created("x"), nil
	})
	if !errors.Is(err, idem.ErrNotClaimed) {
		e.Fatalf(req.Key, "Do whose record vanished before Complete: %v, want ErrNotClaimed", err)
	}
	if n := e.Records() + e.effectCount("vanished-1"); n != 0 {
		e.Fatalf(req.Key, "rows after the failed completion = %d, want 0 (rolled back)", n)
	}
	if r := e.do(e.Store, req, e.work("vanished-1", created("ok"))); r.Outcome != idem.Won || !r.Committed {
		e.Fatalf(req.Key, "Do afterwards: %v, want won", r.Outcome)
	}
}
