package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// testSlowWinnerNotOvertaken: a winner that runs longer than the retention
// is not overtaken by a retry that waited for it. Completion moves the
// expiry to the completion time plus the retention, so the waiting retry
// replays instead of taking the record over and doing the work again.
func testSlowWinnerNotOvertaken[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setupObserved(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	req := request("slow-winner", "x")
	claim, finish := e.holdClaim(req, "slow-winner")
	clk.add(2 * retention) // the winner is still working, far past the retention
	_, losers := e.waitingLosers(e.Ctx, 1, req, func(int) idem.Func[TTx] { return e.work("slow-winner", created("loser")) })
	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	released := finish(true)
	o := e.await(req.Key, losers[0], time.Minute, causeAfterCommit)
	e.answeredAfter(req.Key, o, released)
	if o.err != nil || o.res.Outcome != idem.Replay || string(o.res.Response.Body) != "winner" {
		e.Fatalf(req.Key, "retry that waited for a winner slower than the retention: %+v, %v, want a replay of the winner (completion must restart the retention)", o.res, o.err)
	}
	if n := e.effectCount("slow-winner"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1: the work ran twice", n)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil {
		e.Fatalf(req.Key, "Lookup: %v", err)
	}
	if want := t0.Add(3 * retention); !rec.ExpiresAt.Equal(want) || !rec.CreatedAt.Equal(t0) {
		e.Fatalf(req.Key, "record created %v expires %v, want created %v (the claim) and expiring %v (completion plus retention)", rec.CreatedAt, rec.ExpiresAt, t0, want)
	}
}

// hangUpDriver cancels the caller's context at the moment Do commits, the
// way a client that hangs up at the wrong time does, and gives the
// cancellation time to reach every context derived from the caller's
// before it commits. Its transactions keep every optional ability of the
// backend's (so the production COMMIT path runs). ended reports a
// transaction whose own context (the one Begin got) ended with the
// caller's.
type hangUpDriver[TTx any] struct {
	dialect.Driver[TTx]
	hangUp context.CancelFunc
	ended  *atomic.Bool
}

func (d hangUpDriver[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	txCtx := ctx
	return &WrappedTx[TTx]{Tx: tx, OnCommit: func(ctx context.Context, tx dialect.Tx[TTx]) error {
		d.hangUp()
		// A cancellation reaches derived contexts asynchronously
		// (context.AfterFunc): wait for it, or for long enough.
		select {
		case <-txCtx.Done():
			d.ended.Store(true)
		case <-time.After(100 * time.Millisecond):
		}
		return tx.Commit(ctx)
	}}, nil
}

// testCommitSurvivesHangUp: once the function has returned, the caller's
// context ending (a client hanging up) no longer ends the transaction: the
// commit goes through, within the store's commit timeout, instead of
// failing or ending with an unknown outcome.
func testCommitSurvivesHangUp[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	ctx, hangUp := context.WithCancel(e.Ctx)
	defer hangUp()
	var ended atomic.Bool
	store, err := idem.New(hangUpDriver[TTx]{Driver: e.Driver, hangUp: hangUp, ended: &ended}, e.Store.Config())
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", e.Backend, err)
	}
	req := request("hang-up", "x")
	res, err := store.Do(ctx, req, e.work("hang-up", created("done")))
	if ended.Load() {
		e.Errorf(req.Key, "the transaction's context ended when the caller's did, after the function had returned: the commit must no longer follow the caller")
	}
	if err != nil || res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "Do whose caller hung up during COMMIT: %+v, %v, want won and committed", res, err)
	}
	if ctx.Err() == nil {
		e.Fatalf(req.Key, "the caller's context was not cancelled: the case proves nothing")
	}
	if r := e.do(e.Store, req, e.work("hang-up", created("again"))); r.Outcome != idem.Replay || string(r.Response.Body) != "done" {
		e.Fatalf(req.Key, "retry: %v %q, want a replay of the committed answer", r.Outcome, r.Response.Body)
	}
	if n := e.effectCount("hang-up"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

// testFunctionEndsTransaction: a function that commits or rolls back the
// transaction Do gave it gets a *TxEndedError that says which it was, never
// a claim that the work was rolled back when it was committed.
func testFunctionEndsTransaction[TTx any](t *testing.T, b Backend[TTx]) {
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("commit=%v", commit), func(t *testing.T) {
			e := setup(t, b, idem.Config{})
			req := request(fmt.Sprintf("ends-tx-%v", commit), "x")
			_, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
				if err := e.effect(ctx, tx, req.Key); err != nil {
					return idem.Response{}, err
				}
				if err := endNative(ctx, tx, commit); err != nil {
					return idem.Response{}, err
				}
				return created("done"), nil
			})
			var ended *idem.TxEndedError
			if !errors.As(err, &ended) || !errors.Is(err, idem.ErrTxDone) {
				e.Fatalf(req.Key, "Do whose function ended the transaction: %v, want a *TxEndedError matching ErrTxDone", err)
			}
			if ended.Unknown || ended.ClaimCommitted != commit {
				e.Fatalf(req.Key, "TxEndedError %+v, want ClaimCommitted=%v", ended, commit)
			}
			want := int64(0)
			if commit {
				want = 1
				if !ended.ExpiresAt.After(time.Now().Add(retention - time.Hour)) {
					e.Fatalf(req.Key, "TxEndedError.ExpiresAt %v, want about the retention from now", ended.ExpiresAt)
				}
			}
			if n := e.effectCount(req.Key); n != want {
				e.Fatalf(req.Key, "effects = %d, want %d", n, want)
			}
			// What a retry sees: in flight while the committed claim
			// lives, the work done afresh after a rollback.
			r := e.do(e.Store, req, e.work(req.Key, created("retry")))
			if commit && r.Outcome != idem.InFlight || !commit && (r.Outcome != idem.Won || !r.Committed) {
				e.Fatalf(req.Key, "retry: %v, want %v", r.Outcome, map[bool]idem.Outcome{true: idem.InFlight, false: idem.Won}[commit])
			}
		})
	}
}

// endNative commits or rolls back a native transaction: *sql.Tx and
// pgx.Tx have one of these method sets.
func endNative(ctx context.Context, tx any, commit bool) error {
	switch t := tx.(type) {
	case interface {
		Commit() error
		Rollback() error
	}:
		if commit {
			return t.Commit()
		}
		return t.Rollback()
	case interface {
		Commit(context.Context) error
		Rollback(context.Context) error
	}:
		if commit {
			return t.Commit(ctx)
		}
		return t.Rollback(ctx)
	}
	return fmt.Errorf("conformance: cannot commit or roll back a %T", tx)
}

// lateCommitDriver holds every COMMIT back until the context Commit gets
// has ended: the store's commit timeout passes after the function returned
// and before COMMIT is sent. Its transactions keep every optional ability
// of the backend's (so the production COMMIT path runs).
type lateCommitDriver[TTx any] struct{ dialect.Driver[TTx] }

func (d lateCommitDriver[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &WrappedTx[TTx]{Tx: tx, OnCommit: func(ctx context.Context, tx dialect.Tx[TTx]) error {
		select {
		case <-ctx.Done():
		case <-time.After(gateTimeout):
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return errors.New("conformance: the commit timeout never ended the context COMMIT runs on")
		}
		return tx.Commit(ctx)
	}}, nil
}

// testCommitTimeoutBeforeCommit: when the store's commit timeout passes
// before COMMIT is sent, nothing was committed and the store knows it: the
// error matches ErrCommitTimeout and context.DeadlineExceeded, never
// ErrCommitUnknown (the transaction's Commit must say a COMMIT it did not
// send failed) nor context.Canceled (the caller's context is live), no
// commit of unknown outcome is reported, Retryable says a retry is worth
// it, and the retry does the work once.
func testCommitTimeoutBeforeCommit[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	events := &eventLog{}
	cfg := e.Store.Config()
	cfg.CommitTimeout, cfg.Observer = 100*time.Millisecond, events
	store, err := idem.New[TTx](lateCommitDriver[TTx]{e.Driver}, cfg)
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", e.Backend, err)
	}
	req := request("late-commit", "x")
	res, err := store.Do(e.Ctx, req, e.work("late-commit", created("done")))
	if e.Ctx.Err() != nil {
		e.Fatalf(req.Key, "the case's context ended: %v", e.Ctx.Err())
	}
	switch {
	case err == nil:
		e.Fatalf(req.Key, "Do whose commit timeout passed before COMMIT: %+v, want an error", res)
	case errors.Is(err, idem.ErrCommitUnknown):
		e.Errorf(req.Key, "Do: %v, want a known failure: COMMIT was never sent, yet it is reported with an unknown outcome (see dialect.Tx.Commit)", err)
	case !errors.Is(err, idem.ErrCommitTimeout) || !errors.Is(err, context.DeadlineExceeded):
		e.Errorf(req.Key, "Do: %v, want it to match idem.ErrCommitTimeout and context.DeadlineExceeded", err)
	case errors.Is(err, context.Canceled):
		e.Errorf(req.Key, "Do: %v matches context.Canceled, but the caller's context is live: the commit timeout ended the transaction", err)
	}
	if !idem.Retryable(err) {
		e.Errorf(req.Key, "Retryable(%v) = false, want true: a retry may well commit", err)
	}
	if n := len(events.of(idem.EventCommitUnknown)); n != 0 {
		e.Errorf(req.Key, "%d commits of unknown outcome reported, want none: COMMIT was never sent", n)
	}
	if n := e.effectCount("late-commit"); n != 0 {
		e.Fatalf(req.Key, "effects = %d after a COMMIT that was never sent, want 0", n)
	}
	if r := e.do(e.Store, req, e.work("late-commit", created("again"))); r.Outcome != idem.Won || !r.Committed {
		e.Fatalf(req.Key, "retry: %+v, want won and committed", r)
	}
	if n := e.effectCount("late-commit"); n != 1 {
		e.Fatalf(req.Key, "effects = %d after the retry, want 1", n)
	}
}
