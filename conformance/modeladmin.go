package conformance

import (
	"errors"
	"slices"
	"time"

	"github.com/idemkit/idem"
	"pgregory.net/rapid"
)

// The model's operator steps and its clock: Delete, ForceDelete, Purge,
// and time moving past leases and retention.

func (r *modelRun[TTx]) delete(t *rapid.T) {
	s := r.drawSlot(t)
	row := r.m.rows[s]
	err := r.stores[0].store.Delete(r.ctx, s.scope, s.key)
	r.did("Delete %s: err %v", s, err)
	var inFlight *idem.InFlightRecordError
	switch {
	case row == nil:
		if !errors.Is(err, idem.ErrNotFound) {
			r.fail("Delete of %s, which has no record: %v, want ErrNotFound", s, err)
		}
	case row.completed || !row.live(r.clk.Now()):
		if err != nil {
			r.fail("Delete of %s: %v (record: %s)", s, err, r.describeModel(s))
		}
		r.m.remove(s)
	case !errors.As(err, &inFlight):
		r.fail("Delete of the live pending %s: %v, want an *InFlightRecordError", s, err)
	}
}

func (r *modelRun[TTx]) forceDelete(t *rapid.T) {
	s := r.drawSlot(t)
	row := r.m.rows[s]
	err := r.stores[0].store.ForceDelete(r.ctx, s.scope, s.key)
	r.did("ForceDelete %s: err %v", s, err)
	if row == nil {
		if !errors.Is(err, idem.ErrNotFound) {
			r.fail("ForceDelete of %s, which has no record: %v, want ErrNotFound", s, err)
		}
		return
	}
	if err != nil {
		r.fail("ForceDelete of %s: %v", s, err)
	}
	r.m.remove(s)
}

func (r *modelRun[TTx]) purge(*rapid.T) {
	res, err := r.stores[0].store.Purge(r.ctx)
	want := r.m.purge(r.clk.Now())
	r.did("Purge: deleted %d, err %v", res.Deleted, err)
	// Batches run until one finds fewer than a full batch.
	if batches := int(want/modelPurgeBatch) + 1; err != nil || res.Deleted != want || res.Batches != batches {
		r.fail("Purge: deleted %d in %d batches, %v; the model deletes %d in %d", res.Deleted, res.Batches, err, want, batches)
	}
}

// moveClock moves the store's clock: by a step within a lease, past one,
// past the retention; or to the very instant a lease or a retention the
// model knows of ends, or a microsecond either side of it.
func (r *modelRun[TTx]) moveClock(t *rapid.T) {
	now := r.clk.Now()
	var ends []time.Time
	for _, s := range modelSlots() {
		if rec := r.m.rows[s]; rec != nil {
			for _, end := range []time.Time{rec.expires, rec.leaseUntil} {
				if end.After(now) {
					ends = append(ends, end)
				}
			}
		}
	}
	slices.SortFunc(ends, time.Time.Compare)
	if len(ends) > 0 && rapid.Bool().Draw(t, "to an end") {
		end := ends[rapid.IntRange(0, len(ends)-1).Draw(t, "end")]
		to := end.Add(rapid.SampledFrom([]time.Duration{-time.Microsecond, 0, time.Microsecond}).Draw(t, "off by"))
		if to.After(now) {
			r.clk.set(to)
		}
	} else {
		r.clk.add(rapid.SampledFrom([]time.Duration{time.Second, modelLease / 2, modelLease, modelLease + time.Second,
			modelRetention / 2, modelRetention + time.Second}).Draw(t, "by"))
	}
	r.did("the clock moves %s, to %s", r.clk.Now().Sub(now), r.clk.Now().Format(time.RFC3339Nano))
}
