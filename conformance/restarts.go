package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// The Restarts case: workers run Do and lease work on keys of their own,
// each call writing one effect, while the server restarts under them, round
// after round, up to six times (Backend.Restart: a graceful stop and a
// kill, in turns). Then every outcome is held to what the database holds.
// Nobody else uses a call's key, so its outcome alone decides its effect:
//
//   - a Do that won and committed, a lease that completed: the effect is
//     there, once;
//   - a call that failed with a known failure: the effect is not there;
//   - ErrCommitUnknown: either;
//   - a Replay, Mismatch or InFlight, or ErrLeaseLost: never. Each says
//     the call's own COMMIT committed while the store took it for a failure
//     and tried again (a server that shuts down while a COMMIT runs can end
//     the session right after COMMIT's result).

const (
	restartRounds  = 6
	restartWorkers = 8
	// restartLoad bounds a round's time, restartCalls each worker's calls
	// in a round.
	restartLoad  = 3 * time.Second
	restartCalls = 2000
)

// Restarts is the case "Restarts"; it needs Backend.Restart and lease mode
// (dialect.Leaser), and fails without them. Run it alone, on a server of
// its own, as History:
//
//	conformance.RunCases(t, b, []conformance.Case[TTx]{conformance.Restarts[TTx]()})
func Restarts[TTx any]() Case[TTx] {
	return Case[TTx]{"Restarts", testRestarts[TTx]}
}

// restartOutcome is one call of the Restarts case and how it ended.
type restartOutcome struct {
	key   string
	lease bool
	// outcome is Do's, or a lost Lease's; Won once a lease completed.
	outcome   idem.Outcome
	committed bool
	err       error
	// cut says the round's own deadline ended the call: its failure says
	// nothing of the restart.
	cut bool
}

func testRestarts[TTx any](t *testing.T, b Backend[TTx]) {
	if b.Restart == nil {
		t.Fatalf("[%s] the Restarts case restarts the server: Backend.Restart is nil", b.Name)
	}
	e := setup(t, b, idem.Config{WaitBound: time.Second, Lease: 20 * time.Second, CommitTimeout: 5 * time.Second})
	if _, ok := e.Driver.Dialect().(dialect.Leaser); !ok {
		t.Fatalf("[%s] the Restarts case runs lease work: the dialect is no dialect.Leaser", b.Name)
	}
	var (
		mu    sync.Mutex
		calls []restartOutcome
		seq   atomic.Int64
	)
	rounds := 0
	for rounds < restartRounds {
		// A round takes its load, then at most historyRestartTimeout for
		// the restart and the wait; a case that would run out of time
		// stops early and judges the calls it made.
		if deadline, ok := e.Ctx.Deadline(); ok && time.Until(deadline) < restartLoad+historyRestartTimeout+10*time.Second {
			t.Logf("[%s] %d rounds of %d: the case's time runs short", b.Name, rounds, restartRounds)
			break
		}
		rounds++
		ctx, stop := context.WithTimeout(e.Ctx, restartLoad)
		var wg sync.WaitGroup
		for w := range restartWorkers {
			wg.Go(func() {
				for range restartCalls {
					if ctx.Err() != nil {
						return
					}
					c := e.restartCall(ctx, fmt.Sprintf("r%d", seq.Add(1)), w%2 == 1)
					c.cut = ctx.Err() != nil
					mu.Lock()
					calls = append(calls, c)
					mu.Unlock()
				}
			})
		}
		time.Sleep(restartLoad / 6)
		up, cancel := context.WithTimeout(e.Ctx, historyRestartTimeout)
		err := b.Restart(up)
		wg.Wait()
		stop()
		if err == nil {
			err = e.serverAnswers(up)
		}
		cancel()
		if err != nil {
			t.Fatalf("[%s] restart in round %d: %v", b.Name, rounds, err)
		}
	}
	if rounds < 2 {
		// A graceful stop and a kill take turns: one round is one of them.
		t.Fatalf("[%s] %d rounds of %d ran: too few to judge", b.Name, rounds, restartRounds)
	}
	var effects map[string]int64
	// The pool may still hold connections the last restart broke.
	err := e.readAgain(func() (err error) { effects, err = e.effectCounts(); return err })
	if err != nil {
		t.Fatalf("[%s] read the effects: %v", b.Name, err)
	}
	var won, failed, unknown int
	for _, c := range calls {
		n := effects[c.key]
		what := "Do"
		if c.lease {
			what = "lease"
		}
		switch {
		case errors.Is(c.err, idem.ErrCommitUnknown):
			unknown++
			if n > 1 {
				t.Errorf("[%s] key %s: %s's outcome unknown, and %d effects", b.Name, c.key, what, n)
			}
		case errors.Is(c.err, idem.ErrLeaseLost):
			t.Errorf("[%s] key %s: ErrLeaseLost on a lease nobody else could take (%d effects): %v", b.Name, c.key, n, c.err)
		case c.err != nil:
			if !c.cut {
				failed++
			}
			if n != 0 {
				t.Errorf("[%s] key %s: %s failed, yet its work committed (%d effects): %v", b.Name, c.key, what, n, c.err)
			}
		case c.outcome == idem.Won && c.committed:
			won++
			if n != 1 {
				t.Errorf("[%s] key %s: %s won and committed, and %d effects; want 1", b.Name, c.key, what, n)
			}
		default:
			t.Errorf("[%s] key %s: %s answered %v (committed %v) on a key nobody else used (%d effects)", b.Name, c.key, what, c.outcome, c.committed, n)
		}
	}
	t.Logf("[%s] %d calls over %d restarts: %d won, %d failed (not counting those the round's end cut), %d unknown",
		b.Name, len(calls), rounds, won, failed, unknown)
	if won == 0 || failed == 0 {
		t.Errorf("[%s] the restarts met no call (%d won, %d failed before the round's end): the case proved nothing", b.Name, won, failed)
	}
}

// restartCall runs one call on key: Do, or a lease completed at once, each
// writing the effect labelled key.
func (e *env[TTx]) restartCall(ctx context.Context, key string, lease bool) restartOutcome {
	req := request(key, "b")
	resp := idem.Response{Status: 201, Body: []byte(key)}
	c := restartOutcome{key: key, lease: lease}
	if !lease {
		res, err := e.Store.Do(ctx, req, e.work(key, resp))
		c.outcome, c.committed, c.err = res.Outcome, res.Committed, err
		return c
	}
	l, err := e.Store.Lease(ctx, req)
	if err != nil {
		c.err = err
		return c
	}
	if l.Outcome != idem.Won {
		c.outcome = l.Outcome
		return c
	}
	res, err := l.Complete(ctx, resp, func(ctx context.Context, tx TTx) error { return e.effect(ctx, tx, key) })
	c.outcome, c.committed, c.err = idem.Won, res.Committed, err
	return c
}
