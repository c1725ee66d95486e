package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"pgregory.net/rapid"
)

// The model's batches: Store.DoBatch over some of the slots, each with a
// body of its own, checked key by key against the reference.

// doBatch runs DoBatch on a drawn set of slots, in a drawn order, with a
// function that writes each won intention's effect and then answers every
// won request, fails, or answers one of them with a status that is not
// stored. The function must get exactly the slots the model says are won,
// in (scope, key) order; they commit together or not at all.
func (r *modelRun[TTx]) doBatch(t *rapid.T) {
	st := r.drawStore(t)
	slots := rapid.Permutation(modelSlots()).Draw(t, "batch order")
	slots = slots[:rapid.IntRange(1, len(slots)).Draw(t, "batch size")]
	kind := rapid.SampledFrom([]string{"answers", "fails", "answers one with a status not stored"}).Draw(t, "batch function")
	now := r.clk.Now()
	reqs := make([]idem.Request, len(slots))
	bodies := make([]string, len(slots))
	wants := make([]idem.Outcome, len(slots))
	// The won slots in (scope, key) order, which modelSlots keeps, and
	// what the function answers for each.
	var (
		won      []slot
		resps    = map[slot]idem.Response{}
		labels   = map[slot]string{}
		unstored = false
	)
	for i, s := range slots {
		bodies[i] = r.drawBody(t)
		reqs[i] = modelRequest(s, bodies[i])
		wants[i], _ = r.m.claimOutcome(s, bodies[i], now, false)
	}
	for _, s := range modelSlots() {
		i := indexOf(slots, s)
		if i < 0 || wants[i] != idem.Won {
			continue
		}
		won = append(won, s)
		resps[s] = r.drawResponse(t)
		if kind == "answers one with a status not stored" && !unstored {
			resps[s], unstored = r.drawUnstored(t), true
		}
		labels[s] = r.label("i%d", r.nextIntention()+len(won)-1)
	}
	calls := 0
	var got []string
	fn := func(ctx context.Context, tx TTx, in []idem.Request) ([]idem.Response, error) {
		calls++
		out := make([]idem.Response, len(in))
		for i, req := range in {
			s := slot{req.Scope, req.Key}
			got = append(got, s.String())
			if err := r.e.effectIn(ctx, tx, s.scope, labels[s]); err != nil {
				return nil, err
			}
			out[i] = resps[s]
		}
		if kind == "fails" {
			return nil, errModelFunc
		}
		return out, nil
	}
	res, err := st.store.DoBatch(r.ctx, reqs, fn)
	describe := make([]string, len(slots))
	for i, s := range slots {
		describe[i] = fmt.Sprintf("%s body %q", s, bodies[i])
	}
	r.did("DoBatch [%s], function %s, on the %s: %d results, function ran %d times with %v, err %v",
		strings.Join(describe, ", "), kind, st.name, len(res), calls, got, err)

	if r.shardedScopes && spansScopes(slots) {
		// DoBatch claims every key in the batch's transaction (it does
		// not read first, whatever Config.ReadFirst says), on both
		// shards: refused before the function runs.
		refused := r.crossShard(err)
		if !refused || calls != 0 || res != nil {
			r.fail("DoBatch over both scopes, which lie on two shards: function ran %d times, %d results, %v; want it refused "+
				"before the function, with Backend.CrossShard's error", calls, len(res), err)
		}
		if refused {
			r.budget.refusedAcross++
			return // nothing written: the next check compares every record and effect
		}
	}
	wantGot := make([]string, len(won))
	for i, s := range won {
		wantGot[i] = s.String()
	}
	switch {
	case len(won) == 0 && calls != 0:
		r.fail("DoBatch ran the function with %v, but the model says no slot is won", got)
	case len(won) > 0 && (calls != 1 || fmt.Sprint(got) != fmt.Sprint(wantGot)):
		r.fail("DoBatch's function ran %d times with %v, want once with the won slots in key order %v", calls, got, wantGot)
	}
	if kind == "fails" && len(won) > 0 {
		if !errors.Is(err, errModelFunc) || res != nil {
			r.fail("DoBatch: %v, %v, want the function's own error and no results", res, err)
		}
		return
	}
	if err != nil || len(res) != len(reqs) {
		r.fail("DoBatch: %d results, %v, want %d results", len(res), err, len(reqs))
	}
	committed := len(won) > 0 && !unstored
	for i, s := range slots {
		if wants[i] != idem.Won {
			r.lost("DoBatch", s, wants[i], res[i], nil)
			continue
		}
		if res[i].Outcome != idem.Won || res[i].Committed != committed || !sameResponse(res[i].Response, resps[s]) {
			r.fail("DoBatch on %s: %+v, want Won, committed %v, with the function's %s", s, res[i], committed, describeResponse(resps[s]))
		}
	}
	if !committed {
		return
	}
	for _, s := range won {
		r.m.newIntention(s, bodies[indexOf(slots, s)], now, modelRetention, 0, 0)
		r.m.complete(s, resps[s], now, modelRetention)
		r.m.effects[labels[s]] = 1
	}
}

// spansScopes reports whether slots lie in more than one scope.
func spansScopes(slots []slot) bool {
	for _, s := range slots[1:] {
		if s.scope != slots[0].scope {
			return true
		}
	}
	return false
}

// indexOf is the index of s in slots, or -1.
func indexOf(slots []slot, s slot) int {
	for i, x := range slots {
		if x == s {
			return i
		}
	}
	return -1
}
