package conformance

import (
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/idemkit/idem"
)

// TestHistoryPlanRepeats: a seed draws the same plan every time, whatever
// order the operations are planned in (as workers do, at their own pace),
// and every choice of an operation is drawn whether it needs it or not.
func TestHistoryPlanRepeats(t *testing.T) {
	const seed, n = 424242, historyDefaultOps
	// inOrder is a dry run: each worker plans its operations in turn.
	inOrder := func(seed uint64) [historyWorkers][]historyOp {
		var plan [historyWorkers][]historyOp
		for w := range historyWorkers {
			for j := range historyWorkerOps(n, w) {
				plan[w] = append(plan[w], planHistoryOp(seed, w, j))
			}
		}
		return plan
	}
	// atOnce is a dry run whose workers plan at once, the last operation
	// first.
	atOnce := func(seed uint64) [historyWorkers][]historyOp {
		var plan [historyWorkers][]historyOp
		var wg sync.WaitGroup
		for w := range historyWorkers {
			plan[w] = make([]historyOp, historyWorkerOps(n, w))
			wg.Go(func() {
				for j := len(plan[w]) - 1; j >= 0; j-- {
					plan[w][j] = planHistoryOp(seed, w, j)
				}
			})
		}
		wg.Wait()
		return plan
	}
	first, second := inOrder(seed), atOnce(seed)
	t.Logf("seed %d, worker 0's first operations: %+v", uint64(seed), first[0][:4])
	kinds := map[string]bool{}
	for w := range historyWorkers {
		for j := range first[w] {
			if first[w][j] != second[w][j] {
				t.Fatalf("seed %d, worker %d, operation %d: planned %+v, then %+v", uint64(seed), w, j, first[w][j], second[w][j])
			}
			kinds[fmt.Sprintf("lease=%v step=%v end=%v", first[w][j].Lease, first[w][j].Step, first[w][j].End)] = true
		}
	}
	if len(kinds) < 10 {
		t.Errorf("the plan has %d kinds of operation, want the lot: %v", len(kinds), kinds)
	}
	if other := inOrder(seed + 1); slices.Equal(other[0], first[0]) {
		t.Error("seeds 424242 and 424243 draw the same plan")
	}
	if a, b := historyPlanDigest(seed, n), historyPlanDigest(seed, n); a != b || a == historyPlanDigest(seed+1, n) {
		t.Errorf("plan digests %x and %x of one seed, %x of another", a, b, historyPlanDigest(seed+1, n))
	}
}

// TestHistoryStepFailureWaits: a worker whose RecordStep failed, or ended
// unknown (a restart met it), waits for the server before its next
// operation, as one whose operation of the history did.
func TestHistoryStepFailureWaits(t *testing.T) {
	h := &historyRun[any]{}
	h.failedLast[1] = false // its acquire won
	h.stepFailed(t.Context(), 1, nil, "k", fmt.Errorf("idem: record step: %w", idem.ErrCommitUnknown))
	if !h.failedLast[1] {
		t.Error("after a RecordStep whose outcome is unknown, the worker does not wait for the server")
	}
	if len(h.unexpected) > 0 {
		t.Errorf("unexpected: %v", h.unexpected)
	}
}
