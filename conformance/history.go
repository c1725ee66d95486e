package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// The History case: a few workers run a seeded mix of Do and lease work on
// a few keys while COMMITs fail (historyfaults.go), every operation's call
// and return is recorded, and the history is checked for linearizability
// against the idempotent register (historymodel.go); then the database is
// checked for exactly-once effects per intention.

const (
	// historyWorkers run operations at once.
	historyWorkers = 4
	// historyDefaultOps is the history's length unless IDEM_HISTORY_OPS
	// says otherwise (a soak).
	historyDefaultOps = 240
	// historyRound is how many operations each worker runs on one set of
	// keys before moving to the next.
	historyRound = 6
	// historyKeys is how many keys a round shares out.
	historyKeys = 3
	// historyCheckTimeout bounds porcupine's search; an Unknown answer is
	// logged, not failed.
	historyCheckTimeout = 20 * time.Second
	// historyStep is the step a lease holder records, with an effect.
	historyStep = "charged"
)

// The chances that a COMMIT is cut before it is sent, or its outcome made
// unknown (and then, where the wrapper simulates it, rolled back or
// committed). Do's COMMITs meet unknown outcomes more often, most of them
// rolled back: a Do that reports such a COMMIT as its win is refused only
// when the COMMIT did not commit, and a history has some twenty of them.
// With one in five of those rolled back, it meets one in nearly every run.
var (
	historyFaults   = faultRates{cut: 0.12, unknown: 0.08, rolledBack: 0.5}
	historyDoFaults = faultRates{cut: 0.12, unknown: 0.24, rolledBack: 0.8}
)

// historyConfig: a short wait bound so losers answer InFlight quickly, a
// lease of four bounds, so an abandoned lease blocks its key briefly, and a
// retention the run never reaches. The database's clock decides.
func historyConfig() idem.Config {
	return idem.Config{
		WaitBound:     250 * time.Millisecond,
		Lease:         time.Second,
		Retention:     time.Hour,
		CommitTimeout: 10 * time.Second,
	}
}

// historyRun is one history being recorded.
type historyRun[TTx any] struct {
	*env[TTx]
	seed    uint64
	start   time.Time
	breaker bool

	mu  sync.Mutex
	ops []porcupine.Operation
	// unknown indexes the operations that return at the history's end.
	unknown []int
	// unexpected collects errors no operation should meet.
	unexpected []string
	keys       map[string]bool
	// failedLast says, per worker, whether its last operation failed or
	// ended unknown: it waits for a restart under way before its next.
	failedLast [historyWorkers]bool

	// restarts, on a Backend with Restart, restarts the server when
	// opsStarted reaches its schedule.
	restarts   *historyRestarts
	opsStarted atomic.Int64
}

// testHistory: concurrent Do and lease work under injected COMMIT faults is
// linearizable against an idempotent register per key, and every intention
// has exactly one effect when completed, none otherwise.
func testHistory[TTx any](t *testing.T, b Backend[TTx]) {
	seed, n := historySeed(t), historyOps(t)
	var br *CommitBreaker[TTx]
	if b.BreakCommit != nil {
		c := b.BreakCommit(t)
		br = &c
	} else {
		t.Logf("[%s] Backend.BreakCommit is nil: commit-unknown is simulated by the wrapper only "+
			"(a COMMIT that committed reporting an unknown outcome, or one rolled back reporting it); no connection is broken", b.Name)
	}
	var fl *commitFaults[TTx]
	f := NewFixture(t, b, FixtureOptions[TTx]{Config: historyConfig(), Wrap: func(d dialect.Driver[TTx]) dialect.Driver[TTx] {
		fl = &commitFaults[TTx]{Driver: d, breaker: br}
		if br != nil {
			fl.Driver = br.Driver
		}
		return fl
	}})
	h := &historyRun[TTx]{
		env:     &env[TTx]{Fixture: f, effects: f.CreateTable("fx", "k VARCHAR(255) NOT NULL")},
		seed:    seed,
		breaker: br != nil,
		keys:    map[string]bool{},
	}
	t.Logf("[%s] history seed %d, %d operations by %d workers (IDEM_HISTORY_SEED=%d repeats the choices; IDEM_HISTORY_OPS raises the count)",
		b.Name, seed, n, historyWorkers, seed)
	if b.Restart != nil {
		h.restarts = newHistoryRestarts(seed, n, b.Restart)
		t.Logf("[%s] the server restarts %d times, when operations %v start", b.Name, len(h.restarts.at), h.restarts.at)
	} else {
		t.Logf("[%s] no database restart is injected: Backend.Restart is nil (the server is shared, or there is none to restart)", b.Name)
	}

	h.start = time.Now()
	var wg sync.WaitGroup
	for w := range historyWorkers {
		wg.Go(func() { h.worker(w, n/historyWorkers+boolInt(w < n%historyWorkers)) })
	}
	wg.Wait()
	h.settle()
	ran := time.Since(h.start)
	for _, line := range h.restartReport() {
		t.Logf("[%s] %s", b.Name, line)
	}
	if fl.breaks.Load() > 0 {
		// A server may still be finishing a COMMIT whose connection broke.
		time.Sleep(300 * time.Millisecond)
	}
	h.finish()

	began := time.Now()
	model := historyModel()
	res, info := porcupine.CheckOperationsVerbose(model, h.ops, historyCheckTimeout)
	t.Logf("[%s] %d operations in %v (%s); faults: %d cut before COMMIT, %d connections broken after COMMIT, %d replies lost after committing, %d unknown outcomes rolled back; "+
		"COMMITs that failed on their own: %d unknown, %d known failures; check %v in %v",
		b.Name, len(h.ops), ran.Round(time.Millisecond), h.tally(), fl.cuts.Load(), fl.breaks.Load(), fl.repliesLost.Load(), fl.unknownRolledBack.Load(),
		fl.ownUnknown.Load(), fl.ownFailed.Load(), res, time.Since(began).Round(time.Millisecond))
	if br == nil && fl.cuts.Load() == 0 {
		t.Logf("[%s] no fault was injected in this history", b.Name)
	}
	var failures []string
	switch res {
	case porcupine.Illegal:
		failures = append(failures, "the history is not linearizable against the idempotent-register model "+
			"(a replay of another response, two stored responses for a key, a win after a completion, a completion under a lost lease...) on keys "+
			strings.Join(h.illegalKeys(model), ", "))
	case porcupine.Unknown:
		t.Logf("[%s] porcupine gave up after %v: linearizability unknown (not a failure)", b.Name, historyCheckTimeout)
	}
	failures = append(failures, h.unexpected...)
	failures = append(failures, h.invariants()...)
	if len(failures) > 0 {
		where := h.visualize(model, info)
		t.Errorf("[%s] history with seed %d (IDEM_HISTORY_SEED=%d to repeat): %s\nvisualisation: %s",
			b.Name, seed, seed, strings.Join(failures, "\n  "), where)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// historySeed is IDEM_HISTORY_SEED, or a fresh one.
func historySeed(t *testing.T) uint64 {
	if s := os.Getenv("IDEM_HISTORY_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("IDEM_HISTORY_SEED=%q: %v", s, err)
		}
		return v
	}
	return rand.Uint64() >> 1
}

// historyOps is IDEM_HISTORY_OPS, or historyDefaultOps.
func historyOps(t *testing.T) int {
	if s := os.Getenv("IDEM_HISTORY_OPS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("IDEM_HISTORY_OPS=%q: want a positive count", s)
		}
		return v
	}
	return historyDefaultOps
}

func (h *historyRun[TTx]) now() int64 { return int64(time.Since(h.start)) }

// record adds an operation; one whose outcome is unknown returns at the
// history's end.
func (h *historyRun[TTx]) record(client int, in histInput, call int64, out histOutput, plan *faultPlan, err error) {
	ret := h.now()
	meta := plan.take()
	if err != nil {
		meta = append(meta, err.Error())
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.keys[in.Key] = true
	if client < historyWorkers {
		h.failedLast[client] = out.Result == resFailed || out.Result == resUnknown
	}
	if out.Result == resUnknown {
		h.unknown = append(h.unknown, len(h.ops))
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret, Metadata: strings.Join(meta, "; ")})
}

func (h *historyRun[TTx]) unexpectedf(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unexpected = append(h.unexpected, fmt.Sprintf(format, args...))
}

// classify is the result of an operation that failed with err.
func (h *historyRun[TTx]) classify(op string, in histInput, err error) histResult {
	switch {
	case errors.Is(err, idem.ErrCommitUnknown):
		return resUnknown
	case errors.Is(err, idem.ErrLeaseLost) && in.Kind == histComplete:
		return resLost
	case errors.Is(err, idem.ErrRetriesExhausted), errors.Is(err, idem.ErrUnavailable), errors.Is(err, idem.ErrLockTimeout):
		// Nothing commits before a COMMIT succeeds, and none did.
		return resFailed
	}
	h.unexpectedf("%s on key %q: unexpected error %v", op, in.Key, err)
	return resUnknown
}

// historyOutcome is how an outcome appears in the history.
func historyOutcome(o idem.Outcome) histResult {
	return map[idem.Outcome]histResult{idem.Won: resWon, idem.Replay: resReplay, idem.Mismatch: resMismatch, idem.InFlight: resInFlight}[o]
}

// historyResp is how a response appears in the history.
func historyResp(r idem.Response) string { return fmt.Sprintf("%d:%s", r.Status, r.Body) }

// effectLabel names an intention's effect: its key, its body and where
// it was written (do, step or final).
func effectLabel(key string, body int, where string) string {
	return fmt.Sprintf("%s/b%d/%s", key, body, where)
}

// worker runs its share of the history's operations.
func (h *historyRun[TTx]) worker(w, n int) {
	rng := rand.New(rand.NewPCG(h.seed, uint64(w)))
	for j := range n {
		h.mu.Lock()
		failed := h.failedLast[w]
		h.mu.Unlock()
		if failed {
			h.awaitServer(h.Ctx)
		}
		h.started(h.opsStarted.Add(1))
		key := fmt.Sprintf("h%d-%d", j/historyRound, rng.IntN(historyKeys))
		body := 0
		if rng.IntN(4) == 0 {
			body = 1
		}
		stream := uint64(w)<<32 | uint64(j)
		resp := idem.Response{Status: 201, Body: fmt.Appendf(nil, "w%d-op%d", w, j)}
		req := request(key, fmt.Sprintf("b%d", body))
		if rng.IntN(2) == 0 {
			plan := newFaultPlan(h.seed^0x5eed, stream, historyDoFaults, h.breaker)
			h.do(withFaultPlan(h.Ctx, plan), w, key, body, req, resp, plan)
			continue
		}
		plan := newFaultPlan(h.seed^0x5eed, stream, historyFaults, h.breaker)
		h.leaseWork(withFaultPlan(h.Ctx, plan), w, rng, key, body, req, resp, plan)
	}
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
	out := histOutput{Result: resFailed}
	switch {
	case err != nil:
		out.Result = h.classify("Do", in, err)
	case res.Outcome == idem.Won && !res.Committed:
		h.unexpectedf("Do on key %q: won but not committed", key)
		out.Result = resUnknown
	default:
		out.Result = historyOutcome(res.Outcome)
		if out.Result == resWon || out.Result == resReplay {
			out.Resp = historyResp(res.Response)
		}
	}
	h.record(w, in, call, out, plan, err)
}

// leaseWork claims the key in lease mode and, on winning, maybe records a
// step (with its effect, unless an earlier holder recorded it), then
// completes (with a final effect), releases or abandons the lease.
func (h *historyRun[TTx]) leaseWork(ctx context.Context, w int, rng *rand.Rand, key string, body int, req idem.Request, resp idem.Response, plan *faultPlan) {
	l := h.acquire(ctx, w, key, body, req, plan)
	if l == nil {
		return
	}
	if rng.IntN(2) == 0 {
		if step, _ := l.Step(); step == "" {
			err := l.RecordStep(ctx, historyStep, []byte(key), func(ctx context.Context, tx TTx) error {
				return h.effect(ctx, tx, effectLabel(key, body, "step"))
			})
			if err != nil {
				if r := h.classify("RecordStep", histInput{Kind: histComplete, Key: key}, err); r == resFailed {
					h.release(ctx, l, key)
				}
				return // abandoned: a takeover resumes it
			}
		}
	}
	switch c := rng.IntN(20); {
	case c < 11:
		h.complete(ctx, w, l, key, body, resp, plan)
	case c < 15:
		h.release(ctx, l, key)
	case c < 17:
		h.lapse(ctx, w, l, key, body, req, resp, plan)
	default:
		// Abandoned: the lease expires and a retry takes it over.
	}
}

// acquire claims the key in lease mode, as an operation of the history,
// and returns the lease when it was won.
func (h *historyRun[TTx]) acquire(ctx context.Context, w int, key string, body int, req idem.Request, plan *faultPlan) *idem.Lease[TTx] {
	in := histInput{Kind: histLease, Key: key, Body: body}
	call := h.now()
	l, err := h.Store.Lease(ctx, req)
	out := histOutput{}
	if err != nil {
		out.Result = h.classify("Lease", in, err)
	} else {
		out.Result = historyOutcome(l.Outcome)
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
		out.Result = h.classify("Complete", in, err)
	case !res.Committed:
		h.unexpectedf("Complete on key %q: not committed", key)
		out.Result = resUnknown
	}
	h.record(w, in, call, out, plan, err)
	if out.Result == resFailed {
		h.release(ctx, l, key)
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

// release ends a lease; its failures only delay the key's takeover.
func (h *historyRun[TTx]) release(ctx context.Context, l *idem.Lease[TTx], key string) {
	if err := l.Release(ctx); err != nil && !errors.Is(err, idem.ErrLeaseLost) && !idem.Retryable(err) {
		h.unexpectedf("Release on key %q: %v", key, err)
	}
}

// finish ends the operations whose outcome is unknown at the history's
// end and reads every key's record, as the history's last operations.
func (h *historyRun[TTx]) finish() {
	end := h.now()
	for _, i := range h.unknown {
		h.ops[i].Return = end
	}
	keys := make([]string, 0, len(h.keys))
	for k := range h.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		call := h.now()
		var rec historyRecord
		err := h.again(func() (err error) { rec, err = h.readKey(k); return err })
		if err != nil {
			h.unexpectedf("Lookup of key %q after the history: %v", k, err)
			continue
		}
		h.ops = append(h.ops, porcupine.Operation{ClientId: historyWorkers, Input: histInput{Kind: histRead, Key: k}, Call: call,
			Output: histOutput{Result: resRead, Rec: rec.state}, Return: h.now()})
	}
}

// historyRecord is a key's record as the history sees it.
type historyRecord struct {
	state histState
	step  string
}

func (h *historyRun[TTx]) readKey(key string) (historyRecord, error) {
	rec, err := h.Store.Lookup(h.Ctx, request(key, "").Scope, key)
	if errors.Is(err, idem.ErrNotFound) {
		return historyRecord{}, nil
	}
	if err != nil {
		return historyRecord{}, err
	}
	body := -1
	for b := range 2 {
		if request(key, fmt.Sprintf("b%d", b)).Fingerprint == rec.Fingerprint {
			body = b
		}
	}
	if body < 0 {
		return historyRecord{}, fmt.Errorf("the record's fingerprint is neither body's")
	}
	r := historyRecord{state: histState{Phase: phasePending, Body: body, Token: rec.Token}, step: rec.Step}
	if rec.Completed {
		r.state = histState{Phase: phaseDone, Body: body, Resp: historyResp(rec.Response)}
	}
	return r, nil
}

// invariants checks the database after the history: per key and body, one
// effect written with the completion when the record is completed for that
// body and none otherwise, one step effect when the record holds the step
// and none otherwise; every replay answered the stored response; at most
// one completion was acknowledged, and the stored response is its own.
func (h *historyRun[TTx]) invariants() []string {
	var effects map[string]int64
	if err := h.again(func() (err error) { effects, err = h.effectCounts(); return err }); err != nil {
		h.T.Fatalf("[%s] count effects: %v", h.Backend, err)
	}
	var bad []string
	answered := map[string][]porcupine.Operation{}
	for _, op := range h.ops {
		in, out := op.Input.(histInput), op.Output.(histOutput)
		if in.Kind != histRead && (out.Result == resReplay || out.Result == resWon && in.Kind != histLease) {
			answered[in.Key] = append(answered[in.Key], op)
		}
	}
	for _, op := range h.ops {
		in := op.Input.(histInput)
		if in.Kind != histRead {
			continue
		}
		var rec historyRecord
		err := h.again(func() (err error) { rec, err = h.readKey(in.Key); return err })
		if err != nil {
			bad = append(bad, fmt.Sprintf("key %q: %v", in.Key, err))
			continue
		}
		for b := range 2 {
			completion := effects[effectLabel(in.Key, b, "do")] + effects[effectLabel(in.Key, b, "final")]
			want := int64(boolInt(rec.state.Phase == phaseDone && rec.state.Body == b))
			if completion != want {
				bad = append(bad, fmt.Sprintf("key %q body b%d: %d completion effects, want %d (record: %v)", in.Key, b, completion, want, rec.state))
			}
			step := effects[effectLabel(in.Key, b, "step")]
			want = int64(boolInt(rec.state.Phase != phaseNone && rec.state.Body == b && rec.step == historyStep))
			if step != want {
				bad = append(bad, fmt.Sprintf("key %q body b%d: %d step effects, want %d (record: %v, step %q)", in.Key, b, step, want, rec.state, rec.step))
			}
		}
		wins := 0
		for _, op := range answered[in.Key] {
			oi, oo := op.Input.(histInput), op.Output.(histOutput)
			stored := oi.Resp
			if oo.Result == resReplay {
				stored = oo.Resp
			} else {
				wins++
			}
			if rec.state.Phase != phaseDone || stored != rec.state.Resp {
				bad = append(bad, fmt.Sprintf("key %q: %s answered %q, the record holds %v", in.Key, describeHistOp(oi, oo), stored, rec.state))
			}
		}
		if wins > 1 {
			bad = append(bad, fmt.Sprintf("key %q: %d completions acknowledged, want at most 1", in.Key, wins))
		}
	}
	return bad
}

// effectCounts counts the effect table's rows by label.
func (h *historyRun[TTx]) effectCounts() (map[string]int64, error) {
	rows, err := h.Driver.Pool().Query(h.Ctx, "SELECT k, COUNT(*) FROM "+h.effects+" GROUP BY k")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		counts[k] = n
	}
	return counts, rows.Err()
}

// again runs read, a read after the history, once more after an error
// while the server was restarted during the history: the pool may still
// hold connections the restart broke. Three tries at most.
func (h *historyRun[TTx]) again(read func() error) error {
	err := read()
	for try := 1; err != nil && h.restarts != nil && try < 3; try++ {
		select {
		case <-h.Ctx.Done():
			return err
		case <-time.After(historyServerPoll):
		}
		err = read()
	}
	return err
}

// illegalKeys names the keys whose own operations are not linearizable.
func (h *historyRun[TTx]) illegalKeys(model porcupine.Model) []string {
	var bad []string
	for _, part := range model.Partition(h.ops) {
		if porcupine.CheckOperationsTimeout(model, part, historyCheckTimeout) == porcupine.Illegal {
			bad = append(bad, fmt.Sprintf("%q (%d operations)", part[0].Input.(histInput).Key, len(part)))
		}
	}
	return bad
}

// tally counts the history's results.
func (h *historyRun[TTx]) tally() string {
	counts := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(histInput), op.Output.(histOutput)
		if in.Kind != histRead {
			counts[in.Kind.String()+" "+out.Result.String()]++
		}
	}
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, counts[k])
	}
	return b.String()
}

// visualize writes porcupine's HTML visualisation of the history to a
// file that outlives the test, and returns its path (or why there is none).
func (h *historyRun[TTx]) visualize(model porcupine.Model, info porcupine.LinearizationInfo) string {
	dir, err := os.MkdirTemp("", "idem-history-")
	if err != nil {
		return fmt.Sprintf("none (%v)", err)
	}
	name := strings.NewReplacer("/", "-", " ", "-").Replace(h.Backend)
	path := filepath.Join(dir, fmt.Sprintf("%s-seed%d.html", name, h.seed))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return fmt.Sprintf("none (%v)", err)
	}
	return path
}
