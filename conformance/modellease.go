package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/idemkit/idem"
	"pgregory.net/rapid"
)

// The model's lease mode: claims, the holders' writes (stale holders
// included) and Resume, each checked against the reference.

// lease claims in lease mode: a fresh intention, a takeover of an ended
// lease, or what a loser finds (after waiting out WaitBound on a live one).
func (r *modelRun[TTx]) lease(t *rapid.T) {
	s, body, st := r.drawSlot(t), r.drawBody(t), r.drawStore(t)
	now := r.clk.Now()
	want, resume := r.m.claimOutcome(s, body, now, true)
	l, err := st.store.Lease(r.ctx, modelRequest(s, body))
	if err != nil {
		r.fail("Lease on %s: %v", s, err)
	}
	r.did("Lease %s body %q on the %s: %v token %d resumed=%v", s, body, st.name, l.Outcome, l.Token(), l.Resumed())
	if want != idem.Won {
		r.lost("Lease", s, want, l.Result, nil)
		return
	}
	if l.Outcome != idem.Won || l.Resumed() != resume {
		r.fail("Lease on %s: %v resumed=%v; the model says Won resumed=%v (record: %s)", s, l.Outcome, l.Resumed(), resume, r.describeModel(s))
	}
	var rec *refRecord
	r.holderSeq++
	if resume {
		rec = r.m.resume(s, now, modelLease, r.holderSeq)
	} else {
		rec = r.m.newIntention(s, body, now, modelRetention, modelLease, r.holderSeq)
	}
	r.won(s, l, rec)
}

// won checks a lease the model says was won and keeps its holder.
func (r *modelRun[TTx]) won(s slot, l *idem.Lease[TTx], rec *refRecord) {
	r.t.Helper()
	if why := r.m.sawToken(s, l.Token()); why != "" {
		r.fail("lease on %s: %s (the token floor is %d)", s, why, r.m.floor)
	}
	step, data := l.Step()
	if l.Token() != rec.token || !l.Until().Equal(rec.leaseUntil) || step != rec.step || string(data) != string(rec.stepData) {
		r.fail("lease on %s: token %d until %s step %q %q; the model says token %d until %s step %q %q", s,
			l.Token(), l.Until(), step, data, rec.token, rec.leaseUntil, rec.step, rec.stepData)
	}
	// The downstream key names the intention: the same for every holder
	// of it, another for an intention claimed at another instant.
	dk, err := l.DownstreamKey(modelSteps()[0])
	if err != nil {
		r.fail("DownstreamKey on %s: %v", s, err)
	}
	if first, ok := r.downstream[rec.intention]; ok && first != dk {
		r.fail("lease on %s: downstream key %s, but the intention's first holder had %s", s, dk, first)
	}
	for i, other := range r.downstream {
		if i != rec.intention && other == dk && !r.created[i].Equal(rec.created) {
			r.fail("lease on %s: downstream key %s is intention %d's, claimed at another instant", s, dk, i)
		}
	}
	r.downstream[rec.intention], r.created[rec.intention] = dk, rec.created
	h := &modelHolder[TTx]{id: rec.holder, name: fmt.Sprintf("holder %d (%s token %d)", rec.holder, s, l.Token()), slot: s,
		lease: l, intention: rec.intention}
	r.holders = append(r.holders, h)
	if len(r.holders) > maxModelHolders {
		r.holders = r.holders[1:]
	}
}

// holds reports whether the model lets h write: it did not end its lease
// itself and its token still fences the record.
func (r *modelRun[TTx]) holds(h *modelHolder[TTx]) bool {
	return !h.ended && r.m.fenced(h.slot, h.id)
}

// refused checks a holder's write the model refuses: ErrLeaseLost, and
// the function that would have written beside it never ran.
func (r *modelRun[TTx]) refused(op string, h *modelHolder[TTx], err error, ran bool) {
	r.t.Helper()
	if !errors.Is(err, idem.ErrLeaseLost) || ran {
		r.fail("%s by %s, which lost its lease: %v, its function ran: %v; want ErrLeaseLost with nothing written (record: %s)",
			op, h.name, err, ran, r.describeModel(h.slot))
	}
}

func (r *modelRun[TTx]) extend(t *rapid.T) {
	h := r.drawHolder(t)
	ok := r.holds(h)
	err := h.lease.Extend(r.ctx)
	r.did("Extend by %s: err %v", h.name, err)
	if !ok {
		r.refused("Extend", h, err, false)
		return
	}
	if err != nil {
		r.fail("Extend by %s: %v; the model says it holds the lease", h.name, err)
	}
	r.m.extend(h.slot, r.clk.Now(), modelLease)
	if until := r.m.rows[h.slot].leaseUntil; !h.lease.Until().Equal(until) {
		r.fail("Extend by %s: Until %s, want %s", h.name, h.lease.Until(), until)
	}
}

// recordStep records a recovery point whose function writes the step's
// effect row, or fails.
func (r *modelRun[TTx]) recordStep(t *rapid.T) {
	h := r.drawHolder(t)
	step := rapid.SampledFrom(modelSteps()).Draw(t, "step")
	data := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "data")
	fails := rapid.Bool().Draw(t, "function fails")
	r.labels++
	label := r.label("i%d/%s%d", h.intention, step, r.labels)
	ran := false
	err := h.lease.RecordStep(r.ctx, step, data, func(ctx context.Context, tx TTx) error {
		ran = true
		if err := r.e.effectIn(ctx, tx, h.slot.scope, label); err != nil {
			return err
		}
		if fails {
			return errModelFunc
		}
		return nil
	})
	r.did("RecordStep %q %x by %s, function fails=%v: err %v", step, data, h.name, fails, err)
	switch {
	case !r.holds(h):
		r.refused("RecordStep", h, err, ran)
	case fails:
		if !errors.Is(err, errModelFunc) {
			r.fail("RecordStep by %s: %v, want the function's error", h.name, err)
		}
	default:
		if err != nil {
			r.fail("RecordStep by %s: %v; the model says it holds the lease", h.name, err)
		}
		r.m.extend(h.slot, r.clk.Now(), modelLease)
		rec := r.m.rows[h.slot]
		rec.step, rec.stepData = step, data
		r.m.effects[label] = 1
	}
}

// leaseComplete completes a lease with a function that writes the
// intention's effect row; a response the store does not keep releases the
// lease instead.
func (r *modelRun[TTx]) leaseComplete(t *rapid.T) {
	h := r.drawHolder(t)
	var resp idem.Response
	switch rapid.SampledFrom([]string{"kept", "not kept", "too large"}).Draw(t, "response") {
	case "kept":
		resp = r.drawResponse(t)
	case "not kept":
		resp = r.drawUnstored(t)
	default:
		resp = idem.Response{Status: http.StatusCreated, Body: make([]byte, modelMaxBody+1)}
	}
	label := r.label("i%d", h.intention)
	ran := false
	res, err := h.lease.Complete(r.ctx, resp, func(ctx context.Context, tx TTx) error {
		ran = true
		return r.e.effectIn(ctx, tx, h.slot.scope, label)
	})
	r.did("Complete by %s with %s: committed=%v err %v", h.name, describeResponse(resp), res.Committed, err)
	if len(resp.Body) > modelMaxBody && !h.ended { // refused before the database is asked
		if !errors.Is(err, idem.ErrTooLarge) || ran {
			r.fail("Complete by %s with %d bytes: %v, its function ran: %v; want ErrTooLarge before anything is written",
				h.name, len(resp.Body), err, ran)
		}
		return // a held lease stays held
	}
	if !r.holds(h) {
		r.refused("Complete", h, err, ran)
		return
	}
	stored := modelStores(resp.Status)
	if err != nil || res.Outcome != idem.Won || res.Committed != stored || ran != stored {
		r.fail("Complete by %s: %+v, %v, its function ran: %v; want Won, committed and run: %v", h.name, res, err, ran, stored)
	}
	h.ended = true
	now := r.clk.Now()
	if !stored {
		r.m.releaseLease(h.slot, now)
		return
	}
	r.m.complete(h.slot, resp, now, modelRetention)
	r.m.effects[label] = 1
}

func (r *modelRun[TTx]) release(t *rapid.T) {
	h := r.drawHolder(t)
	err := h.lease.Release(r.ctx)
	r.did("Release by %s: err %v", h.name, err)
	if !r.holds(h) {
		r.refused("Release", h, err, false)
		return
	}
	if err != nil {
		r.fail("Release by %s: %v; the model says it holds the lease", h.name, err)
	}
	h.ended = true
	r.m.releaseLease(h.slot, r.clk.Now())
}

// resume is a recovery routine's takeover: only of an intention whose
// lease ended.
func (r *modelRun[TTx]) resume(t *rapid.T) {
	s := r.drawSlot(t)
	now := r.clk.Now()
	rec := r.m.live(s, now)
	l, err := r.stores[0].store.Resume(r.ctx, s.scope, s.key)
	var got string
	if l != nil {
		got = fmt.Sprintf("%v token %d", l.Outcome, l.Token())
	}
	r.did("Resume %s: %s err %v", s, got, err)
	if rec != nil && (err != nil || l == nil) {
		r.fail("Resume of %s: %v; the model has %s", s, err, r.describeModel(s))
	}
	switch {
	case rec == nil:
		if !errors.Is(err, idem.ErrNotFound) {
			r.fail("Resume of %s, which has no live record: %s %v, want ErrNotFound", s, got, err)
		}
	case rec.completed:
		r.lost("Resume", s, idem.Replay, l.Result, err)
	case !rec.leaseEnded(now):
		r.lost("Resume", s, idem.InFlight, l.Result, err)
	default:
		if err != nil || l.Outcome != idem.Won || !l.Resumed() {
			r.fail("Resume of %s: %s %v, the model says Won (record: %s)", s, got, err, r.describeModel(s))
		}
		r.holderSeq++
		r.won(s, l, r.m.resume(s, now, modelLease, r.holderSeq))
	}
}

// expiredLeases lists the records whose lease ended before their work
// completed, while their retention runs: the model's, exactly.
func (r *modelRun[TTx]) expiredLeases(*rapid.T) {
	recs, err := r.stores[0].store.ExpiredLeases(r.ctx, 10)
	now := r.clk.Now()
	var want []string
	for _, s := range modelSlots() {
		if rec := r.m.live(s, now); rec != nil && rec.pending() && rec.leaseEnded(now) {
			want = append(want, fmt.Sprintf("%s token %d", s, rec.token))
		}
	}
	var got []string
	for _, rec := range recs {
		got = append(got, fmt.Sprintf("%s token %d", slot{rec.Scope, rec.Key}, rec.Token))
	}
	slices.Sort(got)
	slices.Sort(want)
	r.did("ExpiredLeases: %v, err %v", got, err)
	if err != nil || !slices.Equal(got, want) {
		r.fail("ExpiredLeases: %v, %v; the model has %v", got, err, want)
	}
}
