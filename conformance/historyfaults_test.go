package conformance

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/dialect"
)

// fakeBreaker breaks the connection of the next COMMIT once armed.
type fakeBreaker struct {
	armed  atomic.Bool
	broken atomic.Int64
}

func (b *fakeBreaker) breaker() *CommitBreaker[any] {
	return &CommitBreaker[any]{Arm: func() { b.armed.Store(true) }, Broken: func() int { return int(b.broken.Load()) }}
}

// fakeCommitTx is a transaction whose Commit is commit.
type fakeCommitTx struct {
	dialect.Tx[any]
	commit func(ctx context.Context) error
}

func (tx fakeCommitTx) Commit(ctx context.Context) error { return tx.commit(ctx) }
func (fakeCommitTx) Rollback(context.Context) error      { return nil }

// commitProbe counts the COMMITs inside fakeCommitTx.Commit at once.
type commitProbe struct {
	in, most, arrived atomic.Int64
}

// enter counts a COMMIT in, then as arrived: one that waits for the other
// to arrive must find it already counted in, or it may leave before the
// other is (the probe would see one at a time while both overlapped).
func (p *commitProbe) enter() func() {
	n := p.in.Add(1)
	for {
		m := p.most.Load()
		if n <= m || p.most.CompareAndSwap(m, n) {
			break
		}
	}
	p.arrived.Add(1)
	return func() { p.in.Add(-1) }
}

var errFakeBroken = dialect.Classified(dialect.ErrCommitUnknown, errors.New("connection broken after COMMIT left"))

// TestCommitFaultsTurns: COMMITs run at once while the breaker is not
// armed; one that arms it runs alone, and so does the next while an armed
// breaker broke nothing yet, so each break is told to its own operation.
func TestCommitFaultsTurns(t *testing.T) {
	none := faultRates{}
	broken := faultRates{unknown: 1, breaks: 1}

	t.Run("unarmed COMMITs run at once", func(t *testing.T) {
		fb := &fakeBreaker{}
		f := &commitFaults[any]{breaker: fb.breaker()}
		var probe commitProbe
		tx := fakeCommitTx{commit: func(context.Context) error {
			defer probe.enter()()
			// Wait, briefly, for the other COMMIT to be in too.
			for deadline := time.Now().Add(time.Second); probe.arrived.Load() < 2 && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			return nil
		}}
		var wg sync.WaitGroup
		for i := range 2 {
			wg.Go(func() {
				if err := f.commit(t.Context(), tx, newFaultPlan(1, uint64(i), none, true)); err != nil {
					t.Errorf("commit %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		if got := probe.most.Load(); got != 2 {
			t.Errorf("at most %d COMMITs in flight at once, want 2 (unarmed COMMITs take turns)", got)
		}
	})

	t.Run("an armed COMMIT runs alone", func(t *testing.T) {
		fb := &fakeBreaker{}
		f := &commitFaults[any]{breaker: fb.breaker()}
		var probe commitProbe
		armedIn, release := make(chan struct{}), make(chan struct{})
		commit := func(ctx context.Context) error {
			defer probe.enter()()
			if fb.armed.CompareAndSwap(true, false) {
				close(armedIn)
				<-release
				fb.broken.Add(1)
				return errFakeBroken
			}
			return nil
		}
		breaking, plain := newFaultPlan(1, 0, broken, true), newFaultPlan(1, 1, none, true)
		var wg sync.WaitGroup
		wg.Go(func() { _ = f.commit(t.Context(), fakeCommitTx{commit: commit}, breaking) })
		<-armedIn
		wg.Go(func() {
			if err := f.commit(t.Context(), fakeCommitTx{commit: commit}, plain); err != nil {
				t.Errorf("the unarmed COMMIT: %v", err)
			}
		})
		time.Sleep(50 * time.Millisecond)
		close(release)
		wg.Wait()
		if got := probe.most.Load(); got != 1 {
			t.Errorf("%d COMMITs in flight with the breaker armed, want 1", got)
		}
		if got := f.breaks.Load(); got != 1 {
			t.Errorf("%d breaks told, want 1", got)
		}
		if notes := strings.Join(breaking.take(), "; "); !strings.Contains(notes, "broken") {
			t.Errorf("the breaking COMMIT's notes %q do not tell the break", notes)
		}
		if notes := plain.take(); len(notes) > 0 {
			t.Errorf("the unarmed COMMIT's notes %q, want none", notes)
		}
	})

	t.Run("an armed breaker's leftover break is told to the COMMIT that met it", func(t *testing.T) {
		fb := &fakeBreaker{}
		f := &commitFaults[any]{breaker: fb.breaker()}
		// The armed COMMIT never reaches the wire: the breaker stays armed.
		lost := dialect.Classified(dialect.ErrUnavailable, errors.New("connection refused before COMMIT was sent"))
		breaking, plain := newFaultPlan(1, 0, broken, true), newFaultPlan(1, 1, none, true)
		_ = f.commit(t.Context(), fakeCommitTx{commit: func(context.Context) error { return lost }}, breaking)
		if !f.armed.Load() {
			t.Fatal("the breaker is not known to be armed after a COMMIT that broke nothing")
		}
		err := f.commit(t.Context(), fakeCommitTx{commit: func(context.Context) error {
			if fb.armed.CompareAndSwap(true, false) {
				fb.broken.Add(1)
				return errFakeBroken
			}
			return nil
		}}, plain)
		if !errors.Is(err, dialect.ErrCommitUnknown) {
			t.Fatalf("the COMMIT that met the armed breaker: %v, want an unknown outcome", err)
		}
		if notes := strings.Join(plain.take(), "; "); !strings.Contains(notes, "broken") {
			t.Errorf("the COMMIT that met the break: notes %q do not tell it", notes)
		}
		if f.armed.Load() {
			t.Error("the breaker is still known as armed after it broke a connection")
		}
	})
}
