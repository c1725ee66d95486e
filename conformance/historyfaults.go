package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/idemkit/idem/dialect"
)

// commitFaults wraps a store's driver so that the COMMIT of a transaction
// fails on the seeded schedule of the operation that began it (a
// faultPlan in Begin's context; transactions begun without one commit
// untouched):
//
//   - cut: the transaction is rolled back and COMMIT fails as unavailable,
//     as when the connection is lost before COMMIT is sent: the server
//     never committed, and Do retries;
//   - break: on a Backend with BreakCommit, the breaker is armed so the
//     COMMIT reaches the server and its connection breaks once it left:
//     the outcome is truly unknown;
//   - reply lost: the transaction commits and COMMIT then reports an
//     unknown outcome (the server committed, the reply was lost);
//   - unknown, rolled back: the transaction is rolled back and COMMIT
//     reports an unknown outcome (the server never saw COMMIT).
//
// COMMITs run at once, except while the breaker is armed: the COMMIT that
// arms it runs alone, and so does every later one until a connection
// breaks (the armed COMMIT may never reach the wire; the next one to do so
// breaks). So a connection the breaker broke is always the COMMIT's that
// ran alone while it was armed, and the operation it belongs to is told.
type commitFaults[TTx any] struct {
	dialect.Driver[TTx]
	breaker *CommitBreaker[TTx]

	// turns lets unarmed COMMITs share it (RLock) and makes each COMMIT
	// under an armed breaker take it alone (Lock).
	turns sync.RWMutex
	// armed says the breaker is armed and broke no connection yet; it is
	// written with turns held alone.
	armed atomic.Bool
	// inFlight counts the COMMITs under way; maxInFlight is its peak.
	inFlight, maxInFlight atomic.Int64

	cuts, breaks, repliesLost, unknownRolledBack atomic.Int64
	// ownUnknown and ownFailed count the COMMITs that failed with no fault
	// injected (a database restart): with an outcome the dialect reports
	// as unknown, or as a known failure.
	ownUnknown, ownFailed atomic.Int64
}

// Errors the wrapper's COMMIT fails with.
var (
	errCutBeforeCommit = errors.New("conformance: the connection was cut before COMMIT (rolled back)")
	errReplyLost       = errors.New("conformance: COMMIT's reply was lost (it committed)")
	errUnknownNoCommit = errors.New("conformance: COMMIT's reply was lost (it never reached the server)")
)

type commitFault uint8

const (
	faultNone commitFault = iota
	faultCut
	faultBreak
	faultReplyLost
	faultUnknownRolledBack
)

func (f commitFault) String() string {
	return [...]string{"none", "cut", "break", "reply-lost", "unknown-rolled-back"}[f]
}

// faultPlan is one operation's fault schedule: each COMMIT of its
// transactions draws from its own seeded source. It records what
// happened, for the history's notes.
type faultPlan struct {
	mu     sync.Mutex
	rng    *rand.Rand
	rates  faultRates
	real   bool // a CommitBreaker is there to break connections
	events []string
}

// faultRates are the chances of an operation's faults at each COMMIT.
type faultRates struct {
	// cut is the chance a COMMIT is cut before it is sent.
	cut float64
	// unknown is the chance a COMMIT's outcome is made unknown.
	unknown float64
	// breaks is the share of the unknown outcomes that are real breaks,
	// where a CommitBreaker is there.
	breaks float64
	// rolledBack is the share, among the unknown outcomes the wrapper
	// simulates, of the COMMITs rolled back (the rest commit, their reply
	// lost).
	rolledBack float64
}

func newFaultPlan(seed, stream uint64, rates faultRates, breaker bool) *faultPlan {
	return &faultPlan{rng: rand.New(rand.NewPCG(seed, stream)), rates: rates, real: breaker}
}

// next draws the fault of the operation's next COMMIT.
func (p *faultPlan) next() commitFault {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.rng.Float64()
	switch {
	case u < p.rates.cut:
		return faultCut
	case u < p.rates.cut+p.rates.unknown:
		// A real break in its share where a breaker is there; else the
		// simulated ones, in their shares.
		if p.real && p.rng.Float64() < p.rates.breaks {
			return faultBreak
		}
		if p.rng.Float64() < p.rates.rolledBack {
			return faultUnknownRolledBack
		}
		return faultReplyLost
	}
	return faultNone
}

func (p *faultPlan) note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, fmt.Sprintf(format, args...))
}

// take returns what happened to the operation's commits since the last
// take.
func (p *faultPlan) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	events := p.events
	p.events = nil
	return events
}

type faultPlanKey struct{}

// withFaultPlan makes the transactions begun with ctx follow p.
func withFaultPlan(ctx context.Context, p *faultPlan) context.Context {
	return context.WithValue(ctx, faultPlanKey{}, p)
}

// Begin begins on the wrapped driver; a transaction begun under a
// faultPlan commits through it.
func (f *commitFaults[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	tx, err := f.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	plan, _ := ctx.Value(faultPlanKey{}).(*faultPlan)
	if plan == nil {
		return tx, nil
	}
	return &WrappedTx[TTx]{Tx: tx, OnCommit: func(ctx context.Context, tx dialect.Tx[TTx]) error {
		return f.commit(ctx, tx, plan)
	}}, nil
}

func (f *commitFaults[TTx]) commit(ctx context.Context, tx dialect.Tx[TTx], plan *faultPlan) error {
	fault := plan.next()
	if fault == faultBreak && f.breaker == nil {
		fault = faultReplyLost
	}
	switch fault {
	case faultCut:
		_ = tx.Rollback(ctx)
		f.cuts.Add(1)
		plan.note("COMMIT cut before it was sent")
		return dialect.Classified(dialect.ErrUnavailable, errCutBeforeCommit)
	case faultUnknownRolledBack:
		_ = tx.Rollback(ctx)
		f.unknownRolledBack.Add(1)
		plan.note("COMMIT reported unknown, rolled back")
		return dialect.Classified(dialect.ErrCommitUnknown, errUnknownNoCommit)
	}
	if f.breaker == nil {
		return f.commitShared(ctx, tx, plan, fault)
	}
	if fault != faultBreak {
		f.turns.RLock()
		if !f.armed.Load() {
			defer f.turns.RUnlock()
			return f.commitShared(ctx, tx, plan, fault)
		}
		f.turns.RUnlock()
	}
	return f.commitAlone(ctx, tx, plan, fault)
}

// commitAlone commits while no other COMMIT runs: it arms the breaker for
// a break, or meets the breaker an earlier COMMIT armed, and tells whether
// its own connection broke.
func (f *commitFaults[TTx]) commitAlone(ctx context.Context, tx dialect.Tx[TTx], plan *faultPlan, fault commitFault) error {
	f.turns.Lock()
	defer f.turns.Unlock()
	defer f.running()()
	before := f.breaker.Broken()
	if fault == faultBreak {
		f.breaker.Arm()
		f.armed.Store(true)
	}
	err := tx.Commit(ctx)
	if f.breaker.Broken() > before {
		f.armed.Store(false)
		f.breaks.Add(1)
		plan.note("COMMIT's connection broken after it left (%v): %v", fault, err)
		return err
	}
	if fault == faultBreak {
		plan.note("breaker armed, but this COMMIT did not break a connection")
	}
	return f.outcome(plan, fault, err)
}

// commitShared commits while the breaker is not armed, as other COMMITs
// may at the same time.
func (f *commitFaults[TTx]) commitShared(ctx context.Context, tx dialect.Tx[TTx], plan *faultPlan, fault commitFault) error {
	defer f.running()()
	return f.outcome(plan, fault, tx.Commit(ctx))
}

// running counts a COMMIT under way until the function it returns is
// called.
func (f *commitFaults[TTx]) running() func() {
	n := f.inFlight.Add(1)
	for {
		m := f.maxInFlight.Load()
		if n <= m || f.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	return func() { f.inFlight.Add(-1) }
}

// outcome is what a COMMIT that broke no connection returns: err, or the
// lost reply the fault asks for.
func (f *commitFaults[TTx]) outcome(plan *faultPlan, fault commitFault, err error) error {
	switch {
	case fault == faultReplyLost && err == nil:
		f.repliesLost.Add(1)
		plan.note("COMMIT committed, reply reported lost")
		return dialect.Classified(dialect.ErrCommitUnknown, errReplyLost)
	case err != nil && errors.Is(err, dialect.ErrCommitUnknown):
		f.ownUnknown.Add(1)
		plan.note("COMMIT failed, outcome unknown: %v", err)
	case err != nil:
		f.ownFailed.Add(1)
		plan.note("COMMIT failed, a known failure: %v", err)
	}
	return err
}
