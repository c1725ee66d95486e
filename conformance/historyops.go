package conformance

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem"
)

// The History case's operations: each worker runs its share of a plan
// drawn from the seed, one operation at a time, and records each as an
// operation of the history.

// historyOp is one planned operation: every choice it may need is drawn
// before it runs, from a source of its own (the seed, its worker and its
// place), so what an operation does never depends on how earlier ones
// ended or how long they took, and a seed repeats the whole plan.
type historyOp struct {
	// Key is the key, Body which of its two request bodies.
	Key  string
	Body int
	// Lease says the operation is lease work; else it is a Do.
	Lease bool
	// Step says a won lease records the step (unless an earlier holder
	// did), End how its holder ends.
	Step bool
	End  leaseEnd
}

// leaseEnd is how a lease holder ends its work.
type leaseEnd uint8

const (
	endComplete leaseEnd = iota // completes, with a final effect
	endRelease                  // releases the lease
	endLapse                    // lets the lease lapse, then completes after a rival took over
	endAbandon                  // abandons it: the lease expires and a retry takes it over
)

func (e leaseEnd) String() string {
	return [...]string{"complete", "release", "lapse", "abandon"}[e]
}

// historyStream is the random stream of worker w's operation j, for its
// choices and (under another seed) for its COMMITs' faults.
func historyStream(w, j int) uint64 { return uint64(w)<<32 | uint64(j) }

// planHistoryOp draws worker w's operation j: always the same draws, in
// the same order, whatever the operation turns out to need.
func planHistoryOp(seed uint64, w, j int) historyOp {
	rng := rand.New(rand.NewPCG(seed, historyStream(w, j)))
	op := historyOp{Key: fmt.Sprintf("h%d-%d", j/historyRound, rng.IntN(historyKeys))}
	op.Body = boolInt(rng.IntN(4) == 0)
	op.Lease = rng.IntN(2) == 1
	op.Step = rng.IntN(2) == 0
	switch c := rng.IntN(20); {
	case c < 11:
		op.End = endComplete
	case c < 15:
		op.End = endRelease
	case c < 17:
		op.End = endLapse
	default:
		op.End = endAbandon
	}
	return op
}

// historyPlanDigest sums up the plan of a history of n operations, so two
// runs' logs show whether they drew the same choices.
func historyPlanDigest(seed uint64, n int) uint64 {
	d := fnv.New64a()
	for w := range historyWorkers {
		for j := range historyWorkerOps(n, w) {
			fmt.Fprintf(d, "%d/%d:%+v;", w, j, planHistoryOp(seed, w, j))
		}
	}
	return d.Sum64()
}

// worker runs its share of the history's operations.
func (h *historyRun[TTx]) worker(w, n int) {
	for j := range n {
		h.mu.Lock()
		failed := h.failedLast[w]
		h.mu.Unlock()
		if failed {
			h.awaitServer(h.Ctx)
		}
		h.started(h.opsStarted.Add(1))
		h.run(w, j, planHistoryOp(h.seed, w, j))
	}
}

// run runs worker w's operation j as planned.
func (h *historyRun[TTx]) run(w, j int, op historyOp) {
	resp := idem.Response{Status: 201, Body: fmt.Appendf(nil, "w%d-op%d", w, j)}
	req := request(op.Key, fmt.Sprintf("b%d", op.Body))
	rates := historyDoFaults()
	if op.Lease {
		rates = historyFaults()
	}
	plan := newFaultPlan(h.seed^0x5eed, historyStream(w, j), rates, h.breaker)
	ctx := withFaultPlan(h.Ctx, plan)
	if !op.Lease {
		h.do(ctx, w, op.Key, op.Body, req, resp, plan)
		return
	}
	h.leaseWork(ctx, w, op, req, resp, plan)
}

// leaseLost says what ErrLeaseLost means to an operation.
type leaseLost bool

const (
	// lostUnexpected: the operation holds no lease (Do, Lease), so no
	// lease of it can be lost.
	lostUnexpected leaseLost = false
	// lostRefused: the operation writes under a lease (Complete,
	// RecordStep), and a takeover refuses it.
	lostRefused leaseLost = true
)

// classify is the result of an operation on key that failed with err.
func (h *historyRun[TTx]) classify(op, key string, lost leaseLost, err error) histResult {
	switch {
	case errors.Is(err, idem.ErrCommitUnknown):
		return resUnknown
	case errors.Is(err, idem.ErrLeaseLost) && lost == lostRefused:
		return resLost
	case errors.Is(err, idem.ErrRetriesExhausted), errors.Is(err, idem.ErrUnavailable), errors.Is(err, idem.ErrLockTimeout):
		// Nothing commits before a COMMIT succeeds, and none did.
		return resFailed
	}
	h.unexpectedf("%s on key %q: unexpected error %v", op, key, err)
	return resUnknown
}

// historyOutcome is how an outcome appears in the history. Where reads
// may fail (the server restarts during the run), InFlight without a record
// (and not Busy) is blind: the store answers it too when the read after a
// wait that ran out failed (see histOutput.Blind). Elsewhere it means no
// committed record held the key, and the model holds the store to that.
func historyOutcome(r idem.Result, readsMayFail bool) histOutput {
	out := histOutput{Result: map[idem.Outcome]histResult{idem.Won: resWon, idem.Replay: resReplay, idem.Mismatch: resMismatch, idem.InFlight: resInFlight}[r.Outcome]}
	out.Blind = readsMayFail && r.Outcome == idem.InFlight && !r.Busy && r.Record.Key == ""
	return out
}

// historyResp is how a response appears in the history.
func historyResp(r idem.Response) string { return fmt.Sprintf("%d:%s", r.Status, r.Body) }

// effectLabel names an intention's effect: its key, its body and where
// it was written (do, step or final).
func effectLabel(key string, body int, where string) string {
	return fmt.Sprintf("%s/b%d/%s", key, body, where)
}

func (h *historyRun[TTx]) do(ctx context.Context, w int, key string, body int, req idem.Request, resp idem.Response, plan *faultPlan) {
	in := histInput{Kind: histDo, Key: key, Body: body, Resp: historyResp(resp)}
	label := effectLabel(key, body, "do")
	call := h.now()
	res, err := h.Store.Do(ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		if err := h.effect(ctx, tx, label); err != nil {
			return idem.Response{}, err
		}
		return resp, nil
	})
	var out histOutput
	switch {
	case err != nil:
		out.Result = h.classify("Do", key, lostUnexpected, err)
	case res.Outcome == idem.Won && !res.Committed:
		h.unexpectedf("Do on key %q: won but not committed", key)
		out.Result = resUnknown
	default:
		out = historyOutcome(res, h.restarts != nil)
		if out.Result == resWon || out.Result == resReplay {
			out.Resp = historyResp(res.Response)
		}
	}
	h.record(w, in, call, out, plan, err)
}

// leaseWork claims the key in lease mode and, on winning, maybe records a
// step (with its effect, unless an earlier holder recorded it), then
// completes (with a final effect), releases or abandons the lease, as op
// planned.
func (h *historyRun[TTx]) leaseWork(ctx context.Context, w int, op historyOp, req idem.Request, resp idem.Response, plan *faultPlan) {
	key, body := op.Key, op.Body
	l := h.acquire(ctx, w, key, body, req, plan)
	if l == nil {
		return
	}
	if op.Step {
		if step, _ := l.Step(); step == "" {
			err := l.RecordStep(ctx, historyStep, []byte(key), func(ctx context.Context, tx TTx) error {
				return h.effect(ctx, tx, effectLabel(key, body, "step"))
			})
			if err != nil {
				h.stepFailed(ctx, w, l, key, err)
				return // abandoned: a takeover resumes it
			}
		}
	}
	switch op.End {
	case endComplete:
		h.complete(ctx, w, l, key, body, resp, plan)
	case endRelease:
		h.release(ctx, w, l, key)
	case endLapse:
		h.lapse(ctx, w, l, key, body, req, resp, plan)
	case endAbandon:
		// The lease expires and a retry takes it over.
	}
}

// stepFailed handles a RecordStep that failed with err: it is no operation
// of the history (the step is checked against the effects), but a worker
// whose step failed (a restart, say) waits for the server like one whose
// operation did; a step that failed with nothing committed releases the
// lease.
func (h *historyRun[TTx]) stepFailed(ctx context.Context, w int, l *idem.Lease[TTx], key string, err error) {
	r := h.classify("RecordStep", key, lostRefused, err)
	h.ended(w, r)
	if r == resFailed {
		h.release(ctx, w, l, key)
	}
}

// acquire claims the key in lease mode, as an operation of the history,
// and returns the lease when it was won.
func (h *historyRun[TTx]) acquire(ctx context.Context, w int, key string, body int, req idem.Request, plan *faultPlan) *idem.Lease[TTx] {
	in := histInput{Kind: histLease, Key: key, Body: body}
	call := h.now()
	l, err := h.Store.Lease(ctx, req)
	var out histOutput
	if err != nil {
		out.Result = h.classify("Lease", key, lostUnexpected, err)
	} else {
		out = historyOutcome(l.Result, h.restarts != nil)
		switch l.Outcome {
		case idem.Won:
			out.Token = l.Token()
		case idem.Replay:
			out.Resp = historyResp(l.Response)
		}
	}
	h.record(w, in, call, out, plan, err)
	if err != nil || l.Outcome != idem.Won {
		return nil
	}
	return l
}

// complete completes l with resp and a final effect, as an operation of
// the history; a completion that failed with nothing committed releases
// the lease.
func (h *historyRun[TTx]) complete(ctx context.Context, w int, l *idem.Lease[TTx], key string, body int, resp idem.Response, plan *faultPlan) {
	in := histInput{Kind: histComplete, Key: key, Body: body, Resp: historyResp(resp), Token: l.Token()}
	call := h.now()
	res, err := l.Complete(ctx, resp, func(ctx context.Context, tx TTx) error {
		return h.effect(ctx, tx, effectLabel(key, body, "final"))
	})
	out := histOutput{Result: resWon}
	switch {
	case err != nil:
		out.Result = h.classify("Complete", key, lostRefused, err)
	case !res.Committed:
		h.unexpectedf("Complete on key %q: not committed", key)
		out.Result = resUnknown
	}
	h.record(w, in, call, out, plan, err)
	if out.Result == resFailed {
		h.release(ctx, w, l, key)
	}
}

// lapse lets l's lease run out while its holder still works, has a rival
// take the key over, and then has the stale holder complete (it must be
// refused) before the rival does: the fencing token at work.
func (h *historyRun[TTx]) lapse(ctx context.Context, w int, l *idem.Lease[TTx], key string, body int, req idem.Request, resp idem.Response, plan *faultPlan) {
	t := time.NewTimer(h.Store.Config().Lease + 150*time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return
	}
	rival := h.acquire(ctx, w, key, body, req, plan)
	h.complete(ctx, w, l, key, body, resp, plan)
	if rival != nil {
		h.complete(ctx, w, rival, key, body, idem.Response{Status: resp.Status, Body: append(resp.Body, "-rival"...)}, plan)
	}
}

// release ends a lease; its failures only delay the key's takeover, but a
// worker whose release failed as the server went away waits for it.
func (h *historyRun[TTx]) release(ctx context.Context, w int, l *idem.Lease[TTx], key string) {
	err := l.Release(ctx)
	switch {
	case err == nil, errors.Is(err, idem.ErrLeaseLost):
	case idem.Retryable(err):
		h.ended(w, resFailed)
	default:
		h.unexpectedf("Release on key %q: %v", key, err)
	}
}
