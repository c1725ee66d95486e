package conformance

import (
	"fmt"
	"math/rand/v2"
	"os"
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
// a few keys (historyops.go) while COMMITs fail (historyfaults.go) and,
// where the Backend allows, the server restarts (historyrestart.go); every
// operation's call and return is recorded, and the history is checked for
// linearizability against the idempotent register (historymodel.go); then
// the database is checked for exactly-once effects per intention
// (historycheck.go).

// HistorySeedEnv and HistoryOpsEnv steer the History case: the seed its
// choices are drawn from (a failure names it; the same seed draws the same
// operations, keys, bodies and faults again), and the number of operations
// of the history (a soak raises it). Both are unsigned decimal numbers.
const (
	HistorySeedEnv = "IDEM_HISTORY_SEED"
	HistoryOpsEnv  = "IDEM_HISTORY_OPS"
)

const (
	// historyWorkers run operations at once.
	historyWorkers = 4
	// historyDefaultOps is the history's length unless HistoryOpsEnv says
	// otherwise (a soak).
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

// historyFaults are the chances that a lease operation's COMMIT is cut
// before it is sent, or its outcome made unknown (and then, where the
// wrapper simulates it, rolled back or committed; two in three are real
// breaks where a CommitBreaker is there).
func historyFaults() faultRates {
	return faultRates{cut: 0.12, unknown: 0.08, breaks: 2.0 / 3, rolledBack: 0.5}
}

// historyDoFaults are the chances for Do's COMMITs: unknown outcomes more
// often, most of them rolled back. A Do that reports such a COMMIT as its
// win is refused only when the COMMIT did not commit, and a history has
// some twenty of them; with one in five of those rolled back, it meets one
// in nearly every run.
func historyDoFaults() faultRates {
	return faultRates{cut: 0.12, unknown: 0.24, breaks: 2.0 / 3, rolledBack: 0.8}
}

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
	// failedLast says, per worker, whether its last operation (or the
	// step or release that followed it) failed or ended unknown: it waits
	// for a restart under way before its next.
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
		env:     &env[TTx]{Fixture: f, effects: createEffects(f)},
		seed:    seed,
		breaker: br != nil,
		keys:    map[string]bool{},
	}
	t.Logf("[%s] history seed %d, %d operations by %d workers, plan %016x (%s=%d repeats the choices and the plan; %s raises the count)",
		b.Name, seed, n, historyWorkers, historyPlanDigest(seed, n), HistorySeedEnv, seed, HistoryOpsEnv)
	if b.Restart != nil {
		h.restarts = newHistoryRestarts(f.Ctx, seed, n, b.Restart, h.serverAnswers, h.now)
		t.Logf("[%s] the server restarts %d times, when operations %v start", b.Name, len(h.restarts.at), h.restarts.at)
	} else {
		t.Logf("[%s] no database restart is injected: Backend.Restart is nil (the server is shared, or there is none to restart)", b.Name)
	}

	h.start = time.Now()
	var wg sync.WaitGroup
	for w := range historyWorkers {
		wg.Go(func() { h.worker(w, historyWorkerOps(n, w)) })
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
		"COMMITs that failed on their own: %d unknown, %d known failures; at most %d COMMITs in flight at once; check %v in %v",
		b.Name, len(h.ops), ran.Round(time.Millisecond), h.tally(), fl.cuts.Load(), fl.breaks.Load(), fl.repliesLost.Load(), fl.unknownRolledBack.Load(),
		fl.ownUnknown.Load(), fl.ownFailed.Load(), fl.maxInFlight.Load(), res, time.Since(began).Round(time.Millisecond))
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
		t.Errorf("[%s] history with seed %d (%s=%d to repeat): %s\nvisualisation: %s",
			b.Name, seed, HistorySeedEnv, seed, strings.Join(failures, "\n  "), where)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// historyWorkerOps is worker w's share of n operations.
func historyWorkerOps(n, w int) int {
	return n/historyWorkers + boolInt(w < n%historyWorkers)
}

// historySeed is HistorySeedEnv, or a fresh one.
func historySeed(t *testing.T) uint64 {
	if s := os.Getenv(HistorySeedEnv); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", HistorySeedEnv, s, err)
		}
		return v
	}
	return rand.Uint64() >> 1
}

// historyOps is HistoryOpsEnv, or historyDefaultOps.
func historyOps(t *testing.T) int {
	if s := os.Getenv(HistoryOpsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("%s=%q: want a positive count", HistoryOpsEnv, s)
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
	h.endedLocked(client, out.Result)
	if out.Result == resUnknown {
		h.unknown = append(h.unknown, len(h.ops))
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret, Metadata: strings.Join(meta, "; ")})
}

// ended notes how worker w's last piece of work ended (an operation of
// the history, or a step or release that is none): after a failure or an
// unknown outcome it waits for a restart under way before its next.
func (h *historyRun[TTx]) ended(w int, r histResult) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.endedLocked(w, r)
}

func (h *historyRun[TTx]) endedLocked(w int, r histResult) {
	if w < historyWorkers {
		h.failedLast[w] = r == resFailed || r == resUnknown
	}
}

func (h *historyRun[TTx]) unexpectedf(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unexpected = append(h.unexpected, fmt.Sprintf(format, args...))
}
