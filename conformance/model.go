package conformance

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
// MaxBody, MaxAttempts and PurgeBatch are small, so that a step reaches
// their edges.
const (
	modelRetention  = time.Hour
	modelLease      = time.Minute
	modelWait       = 25 * time.Millisecond
	modelMaxBody    = 64
	modelAttempts   = 3
	modelPurgeBatch = 1
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
	// refusedAcross counts the batches refused as transactions on two
	// shards (Backend.CrossShard).
	refusedAcross int
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
// or a fail file, by flag or by rapid's environment variables): then one
// rapid.Check runs it.
func replaying() bool {
	for _, name := range []string{"rapid.seed", "rapid.failfile"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != f.DefValue {
			return true
		}
	}
	if v, err := strconv.ParseUint(os.Getenv("RAPID_SEED"), 0, 64); err == nil && v != 0 {
		return true
	}
	return os.Getenv("RAPID_FAILFILE") != ""
}

// testModel runs rapid's sequences against the reference model until the
// budget is spent.
func testModel[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	cfg := idem.Config{Clock: clk.Now, Retention: modelRetention, Lease: modelLease, WaitBound: modelWait,
		MaxBody: modelMaxBody, MaxAttempts: modelAttempts, PurgeBatch: modelPurgeBatch, ReadFirst: idem.ReadFirstNever}
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
			// A panic of the store under test fails the sequence as a
			// failed check does: the budget must not cut rapid's
			// shrinking short. rapid's own "the draws ran out" panic
			// (a stale fail file, a shrink attempt) is no failure.
			defer func() {
				if p := recover(); p != nil {
					if !rapidInvalidData(p) {
						budget.failing = true
					}
					panic(p)
				}
			}()
			sequences++
			r := &modelRun[TTx]{t: rt, ctx: ctx, e: e, clk: clk, stores: stores, m: newRefModel(), budget: budget, seq: sequences,
				downstream: map[int]string{}, created: map[int]time.Time{},
				crossShard: func(err error) bool { return isCrossShard(b, e.Driver, err) }, shardedScopes: b.CrossShard != nil}
			r.reset()
			rt.Repeat(map[string]func(*rapid.T){
				"Do":            r.do,
				"ClaimInTx":     r.claimInTx,
				"DoBatch":       r.doBatch,
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
				"BadInput":      r.badInput,
				"ExpiredLeases": r.expiredLeases,
				"":              r.check,
			})
		})
		if t.Failed() || replaying() {
			break
		}
		// rapid.Check returned without a failure: whatever started
		// failing was shrunk away or never was, and the budget holds again.
		budget.failing = false
		if budget.spent() {
			break
		}
	}
	t.Logf("[%s] model: %d sequences, %d steps checked (bounds: %s and %d steps, set by %s and %s)",
		b.Name, sequences, budget.taken, budget.time, budget.steps, ModelTimeEnv, ModelStepsEnv)
	if b.CrossShard != nil {
		t.Logf("[%s] model: %d batches over both scopes refused as transactions on two shards", b.Name, budget.refusedAcross)
	}
}

// rapidInvalidData reports whether p is rapid's panic for a draw its data
// cannot serve (rapid recovers it and counts the check as invalid, not
// failed). Its type is unexported, so it is known by name.
func rapidInvalidData(p any) bool {
	t := reflect.TypeOf(p)
	return t != nil && t.PkgPath() == "pgregory.net/rapid" && t.Name() == "invalidData"
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
	// seq numbers the sequence in this run; it prefixes the sequence's
	// effect labels, so that no sequence sees another's effects.
	seq    int
	step   int
	labels int
	// holderSeq numbers the lease claims won in this sequence.
	holderSeq int
	// downstream and created are, per intention, its downstream key for
	// the first step and when it was claimed.
	downstream map[int]string
	created    map[int]time.Time
	// shardedScopes: the backend keeps the two scopes on two shards, and
	// crossShard reports its refusal of a transaction on both
	// (Backend.CrossShard).
	shardedScopes bool
	crossShard    func(error) bool
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

// modelSlots are the keys a sequence uses: two in one scope (the second
// as long as a key may be) and the first again in another scope.
func modelSlots() []slot {
	return []slot{{"model-a", "k1"}, {"model-a", "k2" + strings.Repeat("-", idem.MaxKeyBytes-2)}, {"model-b", "k1"}}
}

// modelScopes are the scopes of modelSlots, in order. On a keyspace split
// in two by Vitess's xxhash (-80 and 80-), each lies on a shard of its own.
func modelScopes() []string {
	var scopes []string
	for _, s := range modelSlots() {
		if !slices.Contains(scopes, s.scope) {
			scopes = append(scopes, s.scope)
		}
	}
	return scopes
}

// modelBodies are the request bodies: two, so that a key is reused with
// another request.
func modelBodies() []string { return []string{"x", "y"} }

// modelSteps are the recovery points a holder records.
func modelSteps() []string { return []string{"charged", "shipped"} }

// maxModelHolders bounds the holders a sequence keeps.
const maxModelHolders = 6

// reset empties the table and its token floor and winds the clock back, so
// every sequence starts from nothing. (The effects stay: each sequence
// labels its own.) Each statement in a transaction of the driver's: a
// cluster node that reads causally applies every earlier commit at its
// BEGIN, so the DELETE meets the records the last sequence committed on
// other nodes. One scope per transaction: a sharded backend keeps the
// scopes on two shards, and the token floor on one.
func (r *modelRun[TTx]) reset() {
	var stmts []string
	for _, scope := range modelScopes() {
		stmts = append(stmts, "DELETE FROM "+r.e.Table+" WHERE scope = "+sqlString(scope))
	}
	stmts = append(stmts, "UPDATE "+r.e.Table+"_fence SET max_deleted_token = 0 WHERE id = 1")
	for _, stmt := range stmts {
		tx, err := r.e.Driver.Begin(r.ctx, dialect.BeginOptions{})
		if err != nil {
			r.fail("reset: begin: %v", err)
		}
		if _, err := tx.Exec(r.ctx, stmt); err != nil {
			_ = tx.Rollback(r.ctx)
			r.fail("reset: %s: %v", stmt, err)
		}
		if err := tx.Commit(r.ctx); err != nil {
			r.fail("reset: %s: commit: %v", stmt, err)
		}
	}
	if n := r.e.Records(); n != 0 {
		r.fail("reset: %d records left after the reset", n)
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

// label is an effect row's label, within this sequence's.
func (r *modelRun[TTx]) label(format string, args ...any) string {
	return r.labelPrefix() + fmt.Sprintf(format, args...)
}

func (r *modelRun[TTx]) labelPrefix() string { return fmt.Sprintf("m%d:", r.seq) }

// did logs a step as a line a person can read and replay.
func (r *modelRun[TTx]) did(format string, args ...any) {
	r.step++
	r.budget.taken++
	r.t.Logf("step %d: %s", r.step, fmt.Sprintf(format, args...))
}

func (r *modelRun[TTx]) drawSlot(t *rapid.T) slot {
	return rapid.SampledFrom(modelSlots()).Draw(t, "key")
}

func (r *modelRun[TTx]) drawBody(t *rapid.T) string {
	return rapid.SampledFrom(modelBodies()).Draw(t, "body")
}

func (r *modelRun[TTx]) drawStore(t *rapid.T) modelStore[TTx] {
	return r.stores[rapid.IntRange(0, len(r.stores)-1).Draw(t, "store")]
}

// drawResponse draws a response the store keeps: with headers and a body,
// empty, with no status, or with a body of exactly Config.MaxBody.
func (r *modelRun[TTx]) drawResponse(t *rapid.T) idem.Response {
	r.labels++
	choices := []idem.Response{
		{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}, "X-Model": {"b", "a"}},
			Body: fmt.Appendf(nil, `{"n":%d}`, r.labels)},
		{Status: http.StatusOK, Body: []byte{}},
		{Status: idem.NoStatus, Body: fmt.Appendf(nil, "done %d", r.labels)},
		{Status: http.StatusAccepted, Body: []byte(strings.Repeat("m", modelMaxBody))},
	}
	return choices[rapid.IntRange(0, len(choices)-1).Draw(t, "response")]
}

// drawUnstored draws a response whose status the store, by default, does
// not keep: the work is to be done again.
func (r *modelRun[TTx]) drawUnstored(t *rapid.T) idem.Response {
	status := rapid.SampledFrom([]int{500, 503, 408, 425, 429, 400, 422}).Draw(t, "status")
	return idem.Response{Status: status, Body: []byte("try later")}
}

// modelStores is the model's own rule for which statuses are kept (the
// default Config.StoreStatus), so that a change of the default shows.
func modelStores(status int) bool {
	return status < 500 && status != 400 && status != 408 && status != 422 && status != 425 && status != 429
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

// check runs after every step: each key's record and the effect rows are
// the model's.
func (r *modelRun[TTx]) check(*rapid.T) {
	r.checkRecords("")
	r.checkEffects()
}

// checkRecords compares every key's live record, read outside any
// transaction, with the model's. A pending record seen there holds a lease,
// unless the model knows its claim was committed without its response.
func (r *modelRun[TTx]) checkRecords(when string) {
	r.t.Helper()
	if when != "" {
		when = " " + when
	}
	now := r.clk.Now()
	for _, s := range modelSlots() {
		got, err := r.stores[0].store.Lookup(r.ctx, s.scope, s.key)
		want := r.m.live(s, now)
		if want == nil {
			if !errors.Is(err, idem.ErrNotFound) {
				r.fail("Lookup %s%s: %+v, %v; the model has no live record", s, when, got, err)
			}
			continue
		}
		if err != nil {
			r.fail("Lookup %s%s: %v; the model has %s", s, when, err, r.describeModel(s))
		}
		if !got.Completed && got.LeaseUntil.IsZero() && !want.abandoned {
			r.fail("Lookup %s%s: pending without a lease, outside the transaction that claimed it", s, when)
		}
		if diff := recordDiff(got, want, now); diff != "" {
			r.fail("Lookup %s%s differs from the model (%s):%s", s, when, r.describeModel(s), diff)
		}
	}
}

// recordDiff lists the fields of got that differ from the model's record.
func recordDiff(got idem.Record, want *refRecord, now time.Time) string {
	var b strings.Builder
	field := func(name string, same bool, g, w any) {
		if !same {
			fmt.Fprintf(&b, "\n  %s: store %v, model %v", name, g, w)
		}
	}
	field("fingerprint", got.Fingerprint == want.fingerprint, "", "another request's")
	field("completed", got.Completed == want.completed, got.Completed, want.completed)
	field("created", got.CreatedAt.Equal(want.created), got.CreatedAt, want.created)
	field("expires", got.ExpiresAt.Equal(want.expires), got.ExpiresAt, want.expires)
	field("token", got.Token == want.token, got.Token, want.token)
	field("lease until", got.LeaseUntil.Equal(want.leaseUntil), got.LeaseUntil, want.leaseUntil)
	field("lease expired", got.LeaseExpired == want.leaseEnded(now), got.LeaseExpired, want.leaseEnded(now))
	field("step", got.Step == want.step, got.Step, want.step)
	field("step data", bytes.Equal(got.StepData, want.stepData), got.StepData, want.stepData)
	if want.completed {
		field("response", sameResponse(got.Response, want.response), describeFullResponse(got.Response), describeFullResponse(want.response))
	}
	return b.String()
}

// checkEffects compares the committed effect rows with the model's: each
// intention's at most once, exactly once when it completed, and nothing a
// refused or rolled-back call wrote.
func (r *modelRun[TTx]) checkEffects() {
	r.t.Helper()
	rows, err := r.e.Driver.Pool().Query(r.ctx, "SELECT k, COUNT(*) FROM "+r.e.effects+" WHERE k LIKE '"+r.labelPrefix()+"%' GROUP BY k")
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

// describeFullResponse is a response with its header, for a record's
// difference.
func describeFullResponse(resp idem.Response) string {
	return fmt.Sprintf("%s header %v", describeResponse(resp), resp.Header)
}

// describeResponse is a response for a step's line: its status and body,
// a long body by its length.
func describeResponse(resp idem.Response) string {
	if len(resp.Body) > 24 {
		return fmt.Sprintf("%d with %d bytes", resp.Status, len(resp.Body))
	}
	return fmt.Sprintf("%d %q", resp.Status, resp.Body)
}
