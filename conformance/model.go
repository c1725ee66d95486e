package conformance

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// The model: a second layer on the example cases. rapid draws sequences of
// operations over a few keys, scopes and bodies (Do, Claim and Complete in
// the caller's transaction, lease mode's every call, a stale holder that
// keeps calling after it lost, Delete, ForceDelete, Purge, the clock moving
// past leases and retention) and runs them on a real store; after every
// step the store must show what the reference model (modelref.go) decided.
// A failure prints the shrunk sequence, one line per step, and the seed
// that replays it.

// The model's store settings. The store's clock is the model's, so leases
// and retention end when a step moves it; WaitBound is real time, the
// wait of a lease claim on a live lease before InFlight.
const (
	modelRetention = time.Hour
	modelLease     = time.Minute
	modelWait      = 25 * time.Millisecond
)

// ModelTimeEnv and ModelStepsEnv bound each backend's model run: it starts
// no new sequence once either is spent. Defaults: DefaultModelTime and
// DefaultModelSteps. Raise both for a soak:
//
//	IDEM_MODEL_TIME=30m IDEM_MODEL_STEPS=1000000 go test -run 'TestConformance/Model$' ./sqlite/
const (
	ModelTimeEnv  = "IDEM_MODEL_TIME"
	ModelStepsEnv = "IDEM_MODEL_STEPS"
)

// Default bounds of one backend's model run.
const (
	DefaultModelTime  = 20 * time.Second
	DefaultModelSteps = 3000
)

var errModelFunc = errors.New("conformance model: the function failed")

// modelBudget bounds a model run in steps and time. Once a sequence failed
// it no longer stops anything: rapid then shrinks, and every sequence it
// tries must run in full.
type modelBudget struct {
	time     time.Duration
	deadline time.Time
	steps    int
	taken    int
	failing  bool
}

func newModelBudget(t *testing.T) *modelBudget {
	t.Helper()
	d := DefaultModelTime
	if v := os.Getenv(ModelTimeEnv); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 60s", ModelTimeEnv, v)
		}
	}
	steps := DefaultModelSteps
	if v := os.Getenv(ModelStepsEnv); v != "" {
		var err error
		if steps, err = strconv.Atoi(v); err != nil || steps <= 0 {
			t.Fatalf("%s=%q: want a positive number of steps", ModelStepsEnv, v)
		}
	}
	return &modelBudget{time: d, deadline: time.Now().Add(d), steps: steps}
}

func (b *modelBudget) spent() bool {
	return !b.failing && (b.taken >= b.steps || !time.Now().Before(b.deadline))
}

// replaying reports whether rapid was told which sequence to run (a seed
// or a fail file): then one rapid.Check runs it.
func replaying() bool {
	for _, name := range []string{"rapid.seed", "rapid.failfile"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			return true
		}
	}
	return false
}

// testModel runs rapid's sequences against the reference model until the
// budget is spent.
func testModel[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	cfg := idem.Config{Clock: clk.Now, Retention: modelRetention, Lease: modelLease, WaitBound: modelWait,
		ReadFirst: idem.ReadFirstNever}
	e := setup(t, b, cfg)
	cfg.Table, cfg.ReadFirst = e.Table, idem.ReadFirstAlways
	readsFirst, err := idem.New(e.Driver, cfg)
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", b.Name, err)
	}
	budget := newModelBudget(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Until(budget.deadline)+CaseTimeout)
	defer cancel()
	stores := []modelStore[TTx]{{"store", e.Store}, {"store reading first", readsFirst}}
	sequences := 0
	for {
		rapid.Check(t, func(rt *rapid.T) {
			if budget.spent() {
				return
			}
			sequences++
			r := &modelRun[TTx]{t: rt, ctx: ctx, e: e, clk: clk, stores: stores, m: newRefModel(), budget: budget}
			r.reset()
			rt.Repeat(map[string]func(*rapid.T){
				"Do":            r.do,
				"ClaimInTx":     r.claimInTx,
				"Lease":         r.lease,
				"Extend":        r.extend,
				"RecordStep":    r.recordStep,
				"LeaseComplete": r.leaseComplete,
				"Release":       r.release,
				"Resume":        r.resume,
				"Delete":        r.delete,
				"ForceDelete":   r.forceDelete,
				"Purge":         r.purge,
				"MoveClock":     r.moveClock,
				"":              r.check,
			})
		})
		if t.Failed() || budget.spent() || replaying() {
			break
		}
	}
	t.Logf("[%s] model: %d sequences, %d steps checked (bounds: %s and %d steps, set by %s and %s)",
		b.Name, sequences, budget.taken, budget.time, budget.steps, ModelTimeEnv, ModelStepsEnv)
}

type modelStore[TTx any] struct {
	name  string
	store *idem.Store[TTx]
}

// modelRun is one sequence: the store under test, the reference, and the
// lease holders made so far (stale ones included: they keep calling).
type modelRun[TTx any] struct {
	t       *rapid.T
	ctx     context.Context
	e       *env[TTx]
	clk     *clock
	stores  []modelStore[TTx]
	m       *refModel
	holders []*modelHolder[TTx]
	budget  *modelBudget
	step    int
	labels  int
	// holderSeq numbers the lease claims won in this sequence.
	holderSeq int
}

// modelHolder is a lease some step won, held or long lost.
type modelHolder[TTx any] struct {
	id        int
	name      string
	slot      slot
	lease     *idem.Lease[TTx]
	intention int
	// ended: this holder completed or released its lease itself.
	ended bool
}

var (
	modelSlots  = []slot{{"model-a", "k1"}, {"model-a", "k2"}, {"model-b", "k1"}}
	modelBodies = []string{"x", "y"}
	modelSteps  = []string{"charged", "shipped"}
)

// maxModelHolders bounds the holders a sequence keeps.
const maxModelHolders = 6

// reset empties the table, its token floor and the effects, and winds the
// clock back, so every sequence starts from nothing.
func (r *modelRun[TTx]) reset() {
	pool := r.e.Driver.Pool()
	for _, stmt := range []string{
		"DELETE FROM " + r.e.Table,
		"DELETE FROM " + r.e.effects,
		"UPDATE " + r.e.Table + "_fence SET max_deleted_token = 0 WHERE id = 1",
	} {
		if _, err := pool.Exec(r.ctx, stmt); err != nil {
			r.fail("reset: %s: %v", stmt, err)
		}
	}
	r.clk.set(t0)
}

// fail stops the sequence; from then on the budget stops nothing, so the
// shrinking that follows replays every sequence it tries.
func (r *modelRun[TTx]) fail(format string, args ...any) {
	r.t.Helper()
	r.budget.failing = true
	r.t.Fatalf("[%s] step %d: %s", r.e.Backend, r.step, fmt.Sprintf(format, args...))
}

// did logs a step as a line a person can read and replay.
func (r *modelRun[TTx]) did(format string, args ...any) {
	r.step++
	r.budget.taken++
	r.t.Logf("step %d: %s", r.step, fmt.Sprintf(format, args...))
}

func (r *modelRun[TTx]) drawSlot(t *rapid.T) slot {
	return rapid.SampledFrom(modelSlots).Draw(t, "key")
}

func (r *modelRun[TTx]) drawBody(t *rapid.T) string {
	return rapid.SampledFrom(modelBodies).Draw(t, "body")
}

func (r *modelRun[TTx]) drawStore(t *rapid.T) modelStore[TTx] {
	return r.stores[rapid.IntRange(0, len(r.stores)-1).Draw(t, "store")]
}

// drawResponse draws a response to store: with headers and a body, empty,
// or with no status; unstored adds one Config.StoreStatus refuses.
func (r *modelRun[TTx]) drawResponse(t *rapid.T, unstored bool) idem.Response {
	r.labels++
	choices := []idem.Response{
		{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}, "X-Model": {"a", "b"}},
			Body: fmt.Appendf(nil, `{"n":%d}`, r.labels)},
		{Status: http.StatusOK, Body: []byte{}},
		{Status: idem.NoStatus, Body: fmt.Appendf(nil, "done %d", r.labels)},
	}
	if unstored {
		choices = append(choices, idem.Response{Status: http.StatusServiceUnavailable, Body: []byte("try later")})
	}
	return choices[rapid.IntRange(0, len(choices)-1).Draw(t, "response")]
}

// drawHolder draws one of the sequence's holders, or skips the step when
// there is none.
func (r *modelRun[TTx]) drawHolder(t *rapid.T) *modelHolder[TTx] {
	if len(r.holders) == 0 {
		t.Skip("no lease holder yet")
	}
	return r.holders[rapid.IntRange(0, len(r.holders)-1).Draw(t, "holder")]
}

func modelRequest(s slot, body string) idem.Request {
	return idem.Request{Scope: s.scope, Key: s.key, Fingerprint: fingerprintOf(body)}
}

// nextIntention is the number of the next intention the model would
// start, which names its effect row.
func (r *modelRun[TTx]) nextIntention() int { return r.m.intentions + 1 }

// do runs Store.Do with a function that writes the intention's effect row
// in its transaction and then answers, fails, fails retryably once, or
// answers with a status the store does not keep.
func (r *modelRun[TTx]) do(t *rapid.T) {
	s, body, st := r.drawSlot(t), r.drawBody(t), r.drawStore(t)
	kind := rapid.SampledFrom([]string{"answers", "fails", "fails retryably once", "answers 503"}).Draw(t, "function")
	resp := r.drawResponse(t, false)
	if kind == "answers 503" {
		resp = idem.Response{Status: http.StatusServiceUnavailable, Body: []byte("later")}
	}
	now := r.clk.Now()
	want, _ := r.m.claimOutcome(s, body, now, false)
	label := fmt.Sprintf("i%d", r.nextIntention())
	calls := 0
	fn := func(ctx context.Context, tx TTx) (idem.Response, error) {
		calls++
		if err := r.e.effect(ctx, tx, label); err != nil {
			return idem.Response{}, err
		}
		switch {
		case kind == "fails":
			return idem.Response{}, errModelFunc
		case kind == "fails retryably once" && calls == 1:
			return idem.Response{}, fmt.Errorf("conformance model: %w", idem.ErrDeadlock)
		}
		return resp, nil
	}
	res, err := st.store.Do(r.ctx, modelRequest(s, body), fn)
	r.did("Do %s body %q, function %s %s, on the %s: %v committed=%v, function ran %d times, err %v",
		s, body, kind, describeResponse(resp), st.name, res.Outcome, res.Committed, calls, err)
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
	case "answers 503":
		if err != nil || res.Outcome != idem.Won || res.Committed || !sameResponse(res.Response, resp) {
			r.fail("Do on %s: %+v, %v, want Won, not committed, with the 503", s, res, err)
		}
	default:
		if err != nil || res.Outcome != idem.Won || !res.Committed || !sameResponse(res.Response, resp) {
			r.fail("Do on %s: %+v, %v, want Won and committed with the function's response", s, res, err)
		}
		r.m.newIntention(s, body, now, modelRetention, 0, 0)
		r.m.complete(s, resp, now, modelRetention)
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
	if want == idem.Replay && !sameResponse(res.Response, r.m.rows[s].response) {
		r.fail("%s on %s replayed %s, want the winner's stored %s", op, s, describeResponse(res.Response), describeResponse(r.m.rows[s].response))
	}
}

// claimInTx claims in the caller's own transaction, writes the effect,
// completes (or not) and commits or rolls back. While the transaction is
// open, the records seen from outside are still the model's: the claim is
// not visible before COMMIT.
func (r *modelRun[TTx]) claimInTx(t *rapid.T) {
	s, body := r.drawSlot(t), r.drawBody(t)
	finish := rapid.SampledFrom([]string{"complete and commit", "complete and roll back", "roll back"}).Draw(t, "finish")
	resp := r.drawResponse(t, false)
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
	r.did("Claim %s body %q in the caller's transaction, then %s %s: %v", s, body, finish, describeResponse(resp), cl.Outcome)
	if want != idem.Won {
		r.lost("Claim", s, want, cl.Result, nil)
		return
	}
	if cl.Outcome != idem.Won {
		r.fail("Claim on %s: %v, the model says Won (record: %s)", s, cl.Outcome, r.describeModel(s))
	}
	label := fmt.Sprintf("i%d", r.nextIntention())
	if err := r.e.effect(r.ctx, tx.Native(), label); err != nil {
		r.fail("effect: %v", err)
	}
	if finish != "roll back" {
		if err := cl.Complete(r.ctx, resp); err != nil {
			r.fail("Complete on %s: %v", s, err)
		}
	}
	r.checkRecords("while the caller's transaction is open")
	if finish != "complete and commit" {
		if err := tx.Rollback(r.ctx); err != nil {
			r.fail("Rollback: %v", err)
		}
		return
	}
	if err := tx.Commit(r.ctx); err != nil {
		r.fail("Commit on %s: %v", s, err)
	}
	r.m.newIntention(s, body, now, modelRetention, 0, 0)
	r.m.complete(s, resp, now, modelRetention)
	r.m.effects[label] = 1
}

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
	step := rapid.SampledFrom(modelSteps).Draw(t, "step")
	data := rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "data")
	fails := rapid.Bool().Draw(t, "function fails")
	r.labels++
	label := fmt.Sprintf("i%d/%s%d", h.intention, step, r.labels)
	ran := false
	err := h.lease.RecordStep(r.ctx, step, data, func(ctx context.Context, tx TTx) error {
		ran = true
		if err := r.e.effect(ctx, tx, label); err != nil {
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
	resp := r.drawResponse(t, true)
	label := fmt.Sprintf("i%d", h.intention)
	ran := false
	res, err := h.lease.Complete(r.ctx, resp, func(ctx context.Context, tx TTx) error {
		ran = true
		return r.e.effect(ctx, tx, label)
	})
	r.did("Complete by %s with %s: committed=%v err %v", h.name, describeResponse(resp), res.Committed, err)
	if !r.holds(h) {
		r.refused("Complete", h, err, ran)
		return
	}
	stored := idem.DefaultStoreStatus(resp.Status)
	if err != nil || res.Outcome != idem.Won || res.Committed != stored || ran != stored {
		r.fail("Complete by %s: %+v, %v, its function ran: %v; want Won, committed and run: %v", h.name, res, err, ran, stored)
	}
	h.ended = true
	now := r.clk.Now()
	if !stored {
		r.m.rows[h.slot].leaseUntil = now // released
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
	r.m.rows[h.slot].leaseUntil = r.clk.Now()
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
	if err != nil || res.Deleted != want {
		r.fail("Purge: deleted %d, %v; the model deletes %d", res.Deleted, err, want)
	}
}

// moveClock moves the store's clock: within a lease, past one, past the
// retention.
func (r *modelRun[TTx]) moveClock(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{time.Second, modelLease / 2, modelLease, modelLease + time.Second,
		modelRetention / 2, modelRetention + time.Second}).Draw(t, "by")
	r.clk.add(d)
	r.did("the clock moves %s, to %s", d, r.clk.Now().Format(time.RFC3339Nano))
}

// check runs after every step: each key's record and the effect rows are
// the model's.
func (r *modelRun[TTx]) check(*rapid.T) {
	r.checkRecords("")
	r.checkEffects()
}

// checkRecords compares every key's live record, read outside any
// transaction, with the model's. A pending record seen there always holds
// a lease: a claim made in one transaction is never seen pending.
func (r *modelRun[TTx]) checkRecords(when string) {
	r.t.Helper()
	now := r.clk.Now()
	for _, s := range modelSlots {
		got, err := r.stores[0].store.Lookup(r.ctx, s.scope, s.key)
		want := r.m.live(s, now)
		if want == nil {
			if !errors.Is(err, idem.ErrNotFound) {
				r.fail("Lookup %s %s: %+v, %v; the model has no live record", s, when, got, err)
			}
			continue
		}
		if err != nil {
			r.fail("Lookup %s %s: %v; the model has %s", s, when, err, r.describeModel(s))
		}
		if !got.Completed && got.LeaseUntil.IsZero() {
			r.fail("Lookup %s %s: pending without a lease, outside the transaction that claimed it", s, when)
		}
		same := got.Fingerprint == want.fingerprint && got.Completed == want.completed &&
			got.CreatedAt.Equal(want.created) && got.ExpiresAt.Equal(want.expires) && got.Token == want.token &&
			got.LeaseUntil.Equal(want.leaseUntil) && got.LeaseExpired == want.leaseEnded(now) &&
			got.Step == want.step && string(got.StepData) == string(want.stepData) &&
			(!want.completed || sameResponse(got.Response, want.response))
		if !same {
			r.fail("Lookup %s %s:\n  store: %s fingerprint ok %v\n  model: %s", s, when,
				describeRecord(got.Completed, got.Response.Status, got.Response.Body, got.Token, got.CreatedAt, got.ExpiresAt, got.LeaseUntil, got.Step),
				got.Fingerprint == want.fingerprint, r.describeModel(s))
		}
	}
}

// checkEffects compares the committed effect rows with the model's: each
// intention's at most once, exactly once when it completed, and nothing a
// refused or rolled-back call wrote.
func (r *modelRun[TTx]) checkEffects() {
	r.t.Helper()
	rows, err := r.e.Driver.Pool().Query(r.ctx, "SELECT k, COUNT(*) FROM "+r.e.effects+" GROUP BY k")
	if err != nil {
		r.fail("read effects: %v", err)
	}
	got := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			r.fail("read effects: %v", err)
		}
		got[k] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		r.fail("read effects: %v", err)
	}
	for k, n := range got {
		if r.m.effects[k] != n {
			r.fail("effect %q committed %d times; the model says %d", k, n, r.m.effects[k])
		}
	}
	for k, n := range r.m.effects {
		if got[k] != n {
			r.fail("effect %q committed %d times; the model says %d", k, got[k], n)
		}
	}
}

// describeModel is the model's record of s, for a failure message.
func (r *modelRun[TTx]) describeModel(s slot) string {
	rec := r.m.rows[s]
	if rec == nil {
		return "none"
	}
	live := "live"
	if !rec.live(r.clk.Now()) {
		live = "retention passed"
	}
	return fmt.Sprintf("body %q, %s, %s, token floor %d", rec.body, live,
		describeRecord(rec.completed, rec.response.Status, rec.response.Body, rec.token, rec.created, rec.expires, rec.leaseUntil, rec.step), r.m.floor)
}

func describeResponse(resp idem.Response) string {
	return fmt.Sprintf("%d %q", resp.Status, resp.Body)
}
