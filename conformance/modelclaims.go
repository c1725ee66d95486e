package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"pgregory.net/rapid"
)

// The model's claims: Do, and Claim with Complete in the caller's
// transaction, each checked against the reference (modelref.go).

// The kinds of function a Do step runs: each writes the intention's effect
// row first, then answers or fails.
func modelFuncs() []string {
	return []string{
		"answers", "fails", "fails retryably once", "fails retryably twice", "fails retryably every time",
		"answers with a status not stored", "answers too large",
	}
}

// do runs Store.Do with a function that writes the intention's effect row
// in its transaction, takes some of the store's time, and then answers or
// fails as drawn.
func (r *modelRun[TTx]) do(t *rapid.T) {
	s, body, st := r.drawSlot(t), r.drawBody(t), r.drawStore(t)
	kind := rapid.SampledFrom(modelFuncs()).Draw(t, "function")
	work := rapid.SampledFrom([]time.Duration{0, 0, 10 * time.Second, modelLease}).Draw(t, "the work takes")
	var resp idem.Response
	switch kind {
	case "answers with a status not stored":
		resp = r.drawUnstored(t)
	case "answers too large":
		resp = idem.Response{Status: http.StatusCreated, Body: make([]byte, modelMaxBody+1)}
	default:
		resp = r.drawResponse(t)
	}
	failures := map[string]int{"fails retryably once": 1, "fails retryably twice": 2, "fails retryably every time": modelAttempts}[kind]
	now := r.clk.Now()
	want, _ := r.m.claimOutcome(s, body, now, false)
	label := r.label("i%d", r.nextIntention())
	calls := 0
	var claimedAt time.Time
	fn := func(ctx context.Context, tx TTx) (idem.Response, error) {
		calls++
		claimedAt = r.clk.Now() // the clock moves only here: this attempt claimed at this instant
		r.clk.add(work)
		if err := r.e.effectIn(ctx, tx, s.scope, label); err != nil {
			return idem.Response{}, err
		}
		switch {
		case kind == "fails":
			return idem.Response{}, errModelFunc
		case calls <= failures:
			return idem.Response{}, fmt.Errorf("conformance model: %w", idem.ErrDeadlock)
		}
		return resp, nil
	}
	res, err := st.store.Do(r.ctx, modelRequest(s, body), fn)
	r.did("Do %s body %q, function %s %s taking %s, on the %s: %v committed=%v, function ran %d times, err %v",
		s, body, kind, describeResponse(resp), work, st.name, res.Outcome, res.Committed, calls, err)
	if want != idem.Won {
		r.lost("Do", s, want, res, err)
		if calls != 0 {
			r.fail("Do on %s ran the function %d times for a %v; it must not run", s, calls, want)
		}
		return
	}
	switch kind {
	case "fails":
		if !errors.Is(err, errModelFunc) || calls != 1 {
			r.fail("Do on %s: %v after %d calls, want the function's own error after one", s, err, calls)
		}
	case "fails retryably every time":
		if !errors.Is(err, idem.ErrRetriesExhausted) || calls != modelAttempts {
			r.fail("Do on %s: %v after %d calls, want ErrRetriesExhausted after %d", s, err, calls, modelAttempts)
		}
	case "answers too large":
		if !errors.Is(err, idem.ErrTooLarge) || calls != 1 {
			r.fail("Do on %s: %+v, %v after %d calls, want ErrTooLarge after one, with nothing stored", s, res, err, calls)
		}
	case "answers with a status not stored":
		if err != nil || res.Outcome != idem.Won || res.Committed || !sameResponse(res.Response, resp) || calls != 1 {
			r.fail("Do on %s: %+v, %v, want Won, not committed, with the function's %d", s, res, err, resp.Status)
		}
	default:
		if err != nil || res.Outcome != idem.Won || !res.Committed || !sameResponse(res.Response, resp) || calls != failures+1 {
			r.fail("Do on %s: %+v, %v after %d calls, want Won and committed with the function's response after %d",
				s, res, err, calls, failures+1)
		}
		r.m.newIntention(s, body, claimedAt, modelRetention, 0, 0)
		r.m.complete(s, resp, r.clk.Now(), modelRetention)
		r.m.effects[label] = 1
	}
}

// lost checks a claim the model says was lost: its outcome, and for a
// replay, the winner's bytes.
func (r *modelRun[TTx]) lost(op string, s slot, want idem.Outcome, res idem.Result, err error) {
	r.t.Helper()
	if err != nil || res.Outcome != want {
		r.fail("%s on %s: %v, %v; the model says %v (record: %s)", op, s, res.Outcome, err, want, r.describeModel(s))
	}
	rec := r.m.rows[s]
	if want == idem.Replay && !sameResponse(res.Response, rec.response) {
		r.fail("%s on %s replayed %s, want the winner's stored %s", op, s, describeResponse(res.Response), describeResponse(rec.response))
	}
	// The loser's record is the one it lost to (its lease end tells a
	// client when to retry).
	if diff := recordDiff(res.Record, rec, r.clk.Now()); diff != "" {
		r.fail("%s on %s: the %v's record differs from the model (%s):%s", op, s, want, r.describeModel(s), diff)
	}
}

// claimInTx claims in the caller's own transaction, writes the effect,
// completes (or not) and commits or rolls back. While the transaction is
// open, the records seen from outside are still the model's: the claim is
// not visible before COMMIT.
func (r *modelRun[TTx]) claimInTx(t *rapid.T) {
	s, body := r.drawSlot(t), r.drawBody(t)
	finish := rapid.SampledFrom([]string{"complete and commit", "complete and roll back", "roll back",
		"commit without completing"}).Draw(t, "finish")
	work := rapid.SampledFrom([]time.Duration{0, 10 * time.Second}).Draw(t, "the work takes")
	resp := r.drawResponse(t)
	now := r.clk.Now()
	want, _ := r.m.claimOutcome(s, body, now, false)
	store := r.stores[0].store
	tx, err := r.e.Driver.Begin(r.ctx, dialect.BeginOptions{WaitBound: store.Config().WaitBound})
	if err != nil {
		r.fail("Begin: %v", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	cl, err := store.Claim(r.ctx, tx.Native(), modelRequest(s, body))
	if err != nil {
		r.fail("Claim on %s: %v", s, err)
	}
	r.did("Claim %s body %q in the caller's transaction, the work taking %s, then %s %s: %v", s, body, work, finish,
		describeResponse(resp), cl.Outcome)
	if want != idem.Won {
		r.lost("Claim", s, want, cl.Result, nil)
		return
	}
	if cl.Outcome != idem.Won {
		r.fail("Claim on %s: %v, the model says Won (record: %s)", s, cl.Outcome, r.describeModel(s))
	}
	label := r.label("i%d", r.nextIntention())
	if err := r.e.effectIn(r.ctx, tx.Native(), s.scope, label); err != nil {
		r.fail("effect: %v", err)
	}
	r.clk.add(work)
	completes := finish == "complete and commit" || finish == "complete and roll back"
	if completes {
		if err := cl.Complete(r.ctx, resp); err != nil {
			r.fail("Complete on %s: %v", s, err)
		}
	}
	r.checkRecords("while the caller's transaction is open")
	if finish == "complete and roll back" || finish == "roll back" {
		if err := tx.Rollback(r.ctx); err != nil {
			r.fail("Rollback: %v", err)
		}
		return
	}
	if err := tx.Commit(r.ctx); err != nil {
		r.fail("Commit on %s: %v", s, err)
	}
	rec := r.m.newIntention(s, body, now, modelRetention, 0, 0)
	r.m.effects[label] = 1
	if !completes {
		// A claim committed without its response: in flight until its
		// retention passes, and then taken over.
		rec.abandoned = true
		return
	}
	r.m.complete(s, resp, r.clk.Now(), modelRetention)
}

// badInput claims a key that is not one (empty, too long, a control
// character), or in a scope that is not one, through Do, Claim or Lease:
// ErrInvalidKey or ErrInvalidScope, and nothing runs or is written.
func (r *modelRun[TTx]) badInput(t *rapid.T) {
	bad := rapid.SampledFrom([]slot{
		{modelSlots()[0].scope, ""}, {modelSlots()[0].scope, strings.Repeat("k", idem.MaxKeyBytes+1)},
		{modelSlots()[0].scope, "del\x7fkey"}, {modelSlots()[0].scope, "new\nline"},
		{"model\x01a", modelSlots()[0].key}, {"model\ta", modelSlots()[0].key},
	}).Draw(t, "bad key or scope")
	want := idem.ErrInvalidKey
	if bad.key == modelSlots()[0].key {
		want = idem.ErrInvalidScope
	}
	op := rapid.SampledFrom([]string{"Do", "Claim", "Lease"}).Draw(t, "call")
	req := modelRequest(bad, modelBodies()[0])
	ran := false
	var err error
	switch op {
	case "Do":
		_, err = r.stores[0].store.Do(r.ctx, req, func(context.Context, TTx) (idem.Response, error) {
			ran = true
			return r.drawResponse(t), nil
		})
	case "Claim":
		tx, berr := r.e.Driver.Begin(r.ctx, dialect.BeginOptions{WaitBound: modelWait})
		if berr != nil {
			r.fail("Begin: %v", berr)
		}
		_, err = r.stores[0].store.Claim(r.ctx, tx.Native(), req)
		_ = tx.Rollback(r.ctx)
	case "Lease":
		_, err = r.stores[0].store.Lease(r.ctx, req)
	}
	r.did("%s with scope %q and key %q: err %v", op, bad.scope, bad.key, err)
	if !errors.Is(err, want) || ran {
		r.fail("%s with scope %q and key %q: %v, the function ran: %v; want %v and nothing run", op, bad.scope, bad.key, err, ran, want)
	}
}
