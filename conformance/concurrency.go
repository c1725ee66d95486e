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

// outcome is what a background Do returned, and when.
type outcome struct {
	res     idem.Result
	err     error
	elapsed time.Duration
	end     time.Time
}

// Contention is proven, not hoped for: the cases below make the winner hold
// the key until its losers are waiting inside their claims (an Observer on
// the store's driver sees them), hold a little longer, and afterwards check
// that they still waited when it let go, and answered only afterwards.
const (
	// hold is how long a winner keeps the key once its losers wait: a loser
	// that is not blocked by the winner returns well within it.
	hold = 150 * time.Millisecond
	// gateTimeout bounds how long a winner waits for its losers to be
	// inside their claims before the case fails as a race that did not
	// happen.
	gateTimeout = 30 * time.Second
)

// goDo runs store.Do in the background and reports on the returned channel.
func (e *env[TTx]) goDo(ctx context.Context, store *idem.Store[TTx], req idem.Request, fn idem.Func[TTx]) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		start := time.Now()
		res, err := store.Do(ctx, req, fn)
		ch <- outcome{res, err, time.Since(start), time.Now()}
	}()
	return ch
}

// Likely causes named when a background Do does not return in time.
const (
	// causeAfterCommit: the winner has committed or rolled back, yet the
	// loser still waits.
	causeAfterCommit = "the loser still waits although the winner's transaction ended: " +
		"does the claim wait on something besides the key's row (a lock an earlier statement left, a session setting not restored)?"
	// causeUnbounded: the winner still holds the key and the loser should
	// have given up at the wait bound.
	causeUnbounded = "the claim's wait is not bounded by ClaimArgs.WaitBound: " +
		"PostgreSQL's lock_timeout 0 means wait forever (use at least 1ms), InnoDB's innodb_lock_wait_timeout counts whole seconds, " +
		"SQLite's busy_timeout must be set on the connection BEGIN IMMEDIATE runs on"
	// causeCancel: the loser's context was cancelled.
	causeCancel = "a claim waiting for the key does not stop when its context is cancelled: run every statement with the caller's ctx"
)

// await waits for a background Do, failing the case after limit with the
// likely cause.
func (e *env[TTx]) await(key string, ch <-chan outcome, limit time.Duration, cause string) outcome {
	e.T.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(limit):
		e.Fatalf(key, "background Do did not return within %v; likely cause: %s", limit, cause)
	}
	return outcome{}
}

// waitingLosers starts n Do calls of req on ctx, as clients 0..n-1 (client
// i runs work(i)), while a holder keeps the key. It returns once all n are
// waiting inside their claims (inside Begin where writers wait on the whole
// database) and still are hold later, and fails the case otherwise.
func (e *env[TTx]) waitingLosers(ctx context.Context, n int, req idem.Request, work func(i int) idem.Func[TTx]) ([]Wait, []<-chan outcome) {
	e.T.Helper()
	e.obs.reset()
	chs := make([]<-chan outcome, n)
	for i := range n {
		chs[i] = e.goDo(AsClient(ctx, i), e.Store, req, work(i))
	}
	waits, err := e.obs.AwaitWaiting(n, gateTimeout)
	if err != nil {
		e.Fatalf(req.Key, "%v", err)
	}
	time.Sleep(hold)
	for i, ch := range chs {
		select {
		case o := <-ch:
			e.Fatalf(req.Key, "loser %d returned while the holder kept the key: %+v, err %v", i, o.res, o.err)
		default:
		}
	}
	if err := e.obs.StillWaiting(waits); err != nil {
		e.Fatalf(req.Key, "%v", err)
	}
	return waits, chs
}

// answeredAfter fails the case unless a loser's answer came after released,
// when the holder let go.
func (e *env[TTx]) answeredAfter(key string, o outcome, released time.Time) {
	e.T.Helper()
	if o.end.Before(released) {
		e.Fatalf(key, "the loser answered %v %v before the holder let go", o.res.Outcome, released.Sub(o.end))
	}
}

// contend races n Do calls of req (client i runs work(i), with opts) and
// proves the race: the first client whose function runs (the winner) holds
// the key, its function blocked, until k of the others are waiting inside
// their claims (inside Begin where writers wait on the whole database), and
// then hold longer. The case fails when they do not get there within
// gateTimeout, or when they do not all still wait at the end of the hold.
// Afterwards it checks that each of those losers answered after the winner
// let go, and that every client's retries follow the backend's rules
// (Observer.CheckRetries).
func (e *env[TTx]) contend(n, k int, req idem.Request, work func(i int) idem.Func[TTx], opts ...idem.Option) []outcome {
	e.T.Helper()
	e.obs.reset()
	var (
		first   atomic.Bool
		waits   []Wait
		gateErr error
		release time.Time
	)
	results := make([]outcome, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			fn := work(i)
			t0 := time.Now()
			res, err := e.Store.Do(AsClient(e.Ctx, i), req, func(ctx context.Context, tx TTx) (idem.Response, error) {
				if first.CompareAndSwap(false, true) {
					waits, gateErr = e.obs.AwaitWaiting(k, gateTimeout)
					if gateErr == nil {
						time.Sleep(hold)
						gateErr = e.obs.StillWaiting(waits)
					}
					release = time.Now()
				}
				return fn(ctx, tx)
			}, opts...)
			results[i] = outcome{res, err, time.Since(t0), time.Now()}
		})
	}
	close(start)
	wg.Wait()
	if gateErr != nil {
		e.Fatalf(req.Key, "%v", gateErr)
	}
	e.oneWinner(req.Key, results)
	for _, w := range waits {
		if o := results[w.Client]; o.err == nil && o.end.Before(release) {
			e.Errorf(req.Key, "client %d answered %v %v before the winner let go", w.Client, o.res.Outcome, release.Sub(o.end))
		}
	}
	if err := e.obs.CheckRetries(waits); err != nil {
		e.Fatalf(req.Key, "%v", err)
	}
	begins := make([]int, n)
	for i := range n {
		begins[i] = e.obs.Begins(i)
	}
	e.T.Logf("[%s] %d clients, %d of them waited inside their claims through the winner's hold of %v; transactions begun per client: %v",
		e.Backend, n, len(waits), hold, begins)
	return results
}

// oneWinner checks that exactly one client of a race won and every other
// one replayed the winner's response byte for byte.
func (e *env[TTx]) oneWinner(key string, results []outcome) {
	e.T.Helper()
	var winner *idem.Response
	won := 0
	for i, o := range results {
		if o.err != nil {
			e.Errorf(key, "client %d: %v", i, o.err)
			continue
		}
		if o.res.Outcome == idem.Won {
			won++
			winner = &o.res.Response
		}
	}
	if won != 1 {
		e.Fatalf(key, "%d clients won, want exactly 1", won)
	}
	for i, o := range results {
		if o.err == nil && o.res.Outcome != idem.Won && (o.res.Outcome != idem.Replay || !sameResponse(o.res.Response, *winner)) {
			e.Errorf(key, "client %d: %v %q, want a replay of %q", i, o.res.Outcome, o.res.Response.Body, winner.Body)
		}
	}
}

// holdClaim begins a transaction, wins req's claim in it and writes the
// winner's effect, leaving the transaction open. finish ends it and returns
// when it did.
func (e *env[TTx]) holdClaim(req idem.Request, label string) (*idem.Claimed, func(commit bool) time.Time) {
	e.T.Helper()
	txn := e.Begin()
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Won {
		txn.Rollback(e.Ctx)
		e.Fatalf(req.Key, "winner's Claim: %+v, %v", claim, err)
	}
	if err := e.effect(e.Ctx, txn.Native(), label); err != nil {
		txn.Rollback(e.Ctx)
		e.Fatalf(req.Key, "winner's effect: %v", err)
	}
	var (
		once     sync.Once
		released time.Time
	)
	finish := func(commit bool) time.Time {
		once.Do(func() {
			released = time.Now()
			if !commit {
				if err := txn.Rollback(e.Ctx); err != nil {
					e.Errorf(req.Key, "winner's Rollback: %v", err)
				}
				return
			}
			if err := txn.Commit(e.Ctx); err != nil {
				e.Errorf(req.Key, "winner's Commit: %v", err)
			}
		})
		return released
	}
	e.T.Cleanup(func() { finish(false) })
	return claim, finish
}

func testLoserWaitsThenReplays[TTx any](t *testing.T, b Backend[TTx]) {
	loserWaitsThenReplays(setupObserved(t, b, idem.Config{}), "race-commit")
}

// loserWaitsThenReplays: a loser waits inside its claim while the winner
// holds the key, and replays the winner's response once it commits, not
// before. One effect.
func loserWaitsThenReplays[TTx any](e *env[TTx], key string) {
	e.T.Helper()
	req := request(key, "x")
	claim, finish := e.holdClaim(req, key)
	_, losers := e.waitingLosers(e.Ctx, 1, req, func(int) idem.Func[TTx] { return e.work(key, created("loser")) })
	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	released := finish(true)
	o := e.await(req.Key, losers[0], time.Minute, causeAfterCommit)
	if o.err != nil {
		e.Fatalf(req.Key, "loser: %v", o.err)
	}
	if o.res.Outcome != idem.Replay || string(o.res.Response.Body) != "winner" {
		e.Fatalf(req.Key, "loser after commit: %v %q, want replay of the winner", o.res.Outcome, o.res.Response.Body)
	}
	e.answeredAfter(req.Key, o, released)
	if n := e.effectCount(key); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

func testWinnerRollsBackLoserWins[TTx any](t *testing.T, b Backend[TTx]) {
	e := setupObserved(t, b, idem.Config{})
	req := request("race-rollback", "x")
	_, finish := e.holdClaim(req, "race-rollback")
	_, losers := e.waitingLosers(e.Ctx, 1, req, func(int) idem.Func[TTx] { return e.work("race-rollback", created("loser")) })
	released := finish(false)
	o := e.await(req.Key, losers[0], time.Minute, causeAfterCommit)
	if o.err != nil {
		e.Fatalf(req.Key, "loser: %v", o.err)
	}
	if o.res.Outcome != idem.Won || !o.res.Committed || string(o.res.Response.Body) != "loser" {
		e.Fatalf(req.Key, "loser after the winner rolled back: %+v, want won", o.res)
	}
	e.answeredAfter(req.Key, o, released)
	if n := e.effectCount("race-rollback"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want exactly 1", n)
	}
}

// testThirtyTwoClaims: 32 clients race for one key; the winner holds it
// until 16 losers wait, and every loser replays its answer. Where writers
// wait on the whole database (SQLite) the losers queue at BEGIN, so the
// race exercises the queue (one winner, replays after it, no retries) but
// never two claim statements at once, nor a wait on the key's row.
func testThirtyTwoClaims[TTx any](t *testing.T, b Backend[TTx]) {
	const n, waiting = 32, 16 // at most 16: two such races fit a pool of 40 connections
	e := setupObserved(t, b, idem.Config{MaxAttempts: 40})
	req := request("race-32", "x")
	e.contend(n, waiting, req, func(i int) idem.Func[TTx] { return e.work("race-32", created(fmt.Sprintf("winner-%d", i))) })
	if c := e.effectCount("race-32"); c != 1 {
		e.Fatalf(req.Key, "effects = %d, want exactly 1", c)
	}
}

func testWaitBound[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 500 * time.Millisecond
	e := setup(t, b, idem.Config{WaitBound: bound})
	req := request("bound-1", "x")
	claim, finish := e.holdClaim(req, "bound-1")

	o := e.await(req.Key, e.goDo(e.Ctx, e.Store, req, e.work("bound-1", created("loser"))), time.Minute, causeUnbounded)
	if o.err != nil {
		e.Fatalf(req.Key, "loser: %v", o.err)
	}
	if o.res.Outcome != idem.InFlight {
		e.Fatalf(req.Key, "loser past the wait bound: %v, want in-flight", o.res.Outcome)
	}
	if o.elapsed < bound/2 || o.elapsed > bound+3*time.Second {
		e.Fatalf(req.Key, "loser gave up after %v, want about the bound %v", o.elapsed, bound)
	}

	if !e.Driver.Dialect().Capabilities().DatabaseWriteLock {
		// The manual path reports the same, and the transaction can be
		// rolled back cleanly afterwards.
		txn := e.Begin()
		c, err := e.Store.Claim(e.Ctx, txn.Native(), req)
		if err != nil || c.Outcome != idem.InFlight {
			e.Fatalf(req.Key, "manual loser: %+v, %v, want in-flight", c, err)
		}
		if err := txn.Rollback(e.Ctx); err != nil {
			e.Fatalf(req.Key, "rollback after in-flight: %v", err)
		}
	}

	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	finish(true)
	// Connections are usable afterwards: the key replays, a new key wins.
	if r := e.do(e.Store, req, e.work("bound-1", created("late"))); r.Outcome != idem.Replay || string(r.Response.Body) != "winner" {
		e.Fatalf(req.Key, "after the winner committed: %v %q, want replay", r.Outcome, r.Response.Body)
	}
	other := request("bound-2", "x")
	if r := e.do(e.Store, other, e.work("bound-2", created("ok"))); r.Outcome != idem.Won {
		e.Fatalf(other.Key, "new key after a timeout: %v, want won", r.Outcome)
	}
	if n := e.effectCount("bound-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

// testContextCancelled: a loser waiting inside its claim stops when its
// context is cancelled, and leaves no transaction or lock behind.
func testContextCancelled[TTx any](t *testing.T, b Backend[TTx]) {
	e := setupObserved(t, b, idem.Config{WaitBound: time.Minute})
	req := request("cancel-1", "x")
	claim, finish := e.holdClaim(req, "cancel-1")

	ctx, cancel := context.WithCancel(e.Ctx)
	defer cancel()
	_, losers := e.waitingLosers(ctx, 1, req, func(int) idem.Func[TTx] { return e.work("cancel-1", created("loser")) })
	cancelled := time.Now()
	cancel()
	o := e.await(req.Key, losers[0], 30*time.Second, causeCancel)
	e.answeredAfter(req.Key, o, cancelled)
	if since := time.Since(cancelled); since > 3*time.Second {
		e.Fatalf(req.Key, "loser returned %v after its context was cancelled", since)
	}
	if !errors.Is(o.err, context.Canceled) {
		e.Fatalf(req.Key, "loser with cancelled context: %+v, err %v, want context.Canceled", o.res, o.err)
	}

	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	finish(true)
	// No leaked transaction or lock: both of these finish promptly.
	ctx, cancel = context.WithTimeout(e.Ctx, 10*time.Second)
	defer cancel()
	if r, err := e.Store.Do(ctx, req, e.work("cancel-1", created("late"))); err != nil || r.Outcome != idem.Replay {
		e.Fatalf(req.Key, "after cancel: %v, %v, want replay", r.Outcome, err)
	}
	other := request("cancel-2", "x")
	if r, err := e.Store.Do(ctx, other, e.work("cancel-2", created("ok"))); err != nil || r.Outcome != idem.Won {
		e.Fatalf(other.Key, "new key after cancel: %v, %v, want won", r.Outcome, err)
	}
	if n := e.effectCount("cancel-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

func testRetryExhaustion[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{MaxAttempts: 3})
	req := request("retry-1", "x")
	calls := 0
	_, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		calls++
		if err := e.effect(ctx, tx, "retry-1"); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{}, fmt.Errorf("conflict on the orders row: %w", idem.ErrSerialization)
	})
	var rerr *idem.RetryError
	if !errors.As(err, &rerr) || rerr.Attempts != 3 || !errors.Is(err, idem.ErrRetriesExhausted) || !errors.Is(err, idem.ErrSerialization) {
		e.Fatalf(req.Key, "Do: %v, want *RetryError after 3 attempts wrapping ErrSerialization", err)
	}
	if calls != 3 {
		e.Fatalf(req.Key, "function ran %d times, want 3", calls)
	}
	if n := e.effectCount("retry-1") + e.Records(); n != 0 {
		e.Fatalf(req.Key, "rows after exhaustion = %d, want 0", n)
	}
}

func testRetryThenSucceed[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{MaxAttempts: 3})
	req := request("retry-2", "x")
	calls := 0
	res, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		calls++
		if err := e.effect(ctx, tx, "retry-2"); err != nil {
			return idem.Response{}, err
		}
		if calls < 3 {
			return idem.Response{}, fmt.Errorf("victim: %w", idem.ErrDeadlock)
		}
		return created("third time"), nil
	})
	if err != nil || res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "Do: %+v, %v, want won on the third attempt", res, err)
	}
	if n := e.effectCount("retry-2"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want exactly 1", n)
	}
}

// testClaimAfterEarlierRead: the caller's transaction read before it
// claimed, so its snapshot predates the winner's commit. The claim must still
// see the winner's record (or ask for a retry), never win a second time.
// Where conflicts are found at COMMIT (Capabilities.ConflictsAtCommit:
// Galera, whose node may not yet have applied the winner's commit, and which
// waits for nothing inside a transaction), the claim may win; the database
// must then refuse that transaction with an error worth retrying. Either
// way a retry replays the winner.
func testClaimAfterEarlierRead[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	caps := e.Driver.Dialect().Capabilities()
	if caps.DatabaseWriteLock {
		t.Skip("writers hold the whole database from BEGIN: no snapshot can predate another writer's commit")
	}
	req := request("snapshot-1", "x")
	txn := e.Begin()
	defer txn.Rollback(e.Ctx)
	q, err := e.Driver.Wrap(txn.Native())
	if err != nil {
		e.Fatalf(req.Key, "Wrap: %v", err)
	}
	rows, err := q.Query(e.Ctx, "SELECT COUNT(*) FROM "+e.Table)
	if err != nil {
		e.Fatalf(req.Key, "read before claim: %v", err)
	}
	for rows.Next() {
	}
	rows.Close()

	e.do(e.Store, req, e.work("snapshot-1", created("winner"))) // another transaction wins and commits

	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	switch {
	case err != nil && (errors.Is(err, idem.ErrSerialization) || errors.Is(err, idem.ErrDeadlock)):
		// The database asks for a retry of the whole transaction: correct.
	case err != nil:
		e.Fatalf(req.Key, "Claim after an earlier read: %v", err)
	case claim.Outcome == idem.Won && caps.ConflictsAtCommit:
		e.refusedAtCommit(req, txn, claim)
	case claim.Outcome != idem.Replay || string(claim.Response.Body) != "winner":
		e.Fatalf(req.Key, "Claim after an earlier read: %v %q, want a replay of the committed winner", claim.Outcome, claim.Response.Body)
	}
	if err := txn.Rollback(e.Ctx); err != nil {
		e.Fatalf(req.Key, "rollback after the claim: %v", err)
	}
	if n := e.effectCount("snapshot-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
	if r := e.do(e.Store, req, e.work("snapshot-1", created("retry"))); r.Outcome != idem.Replay || string(r.Response.Body) != "winner" {
		e.Fatalf(req.Key, "retry after the claim: %v %q, want a replay of the committed winner", r.Outcome, r.Response.Body)
	}
}

// refusedAtCommit: a claim that won after another transaction committed
// the key, on a backend that finds such conflicts at COMMIT, does its work
// and completes; the database must refuse the transaction, at one of those
// statements or at COMMIT, with an error classified as worth retrying.
func (e *env[TTx]) refusedAtCommit(req idem.Request, txn dialect.Tx[TTx], claim *idem.Claimed) {
	e.T.Helper()
	err := e.effect(e.Ctx, txn.Native(), "snapshot-1")
	if err == nil {
		err = claim.Complete(e.Ctx, created("second winner"))
	}
	if err == nil {
		err = txn.Commit(e.Ctx)
	}
	switch err = e.Driver.Dialect().Classify(err); {
	case err == nil:
		e.Fatalf(req.Key, "a claim won after the winner committed, and its COMMIT succeeded: two winners")
	case !errors.Is(err, idem.ErrDeadlock) && !errors.Is(err, idem.ErrSerialization):
		e.Fatalf(req.Key, "a claim won after the winner committed; its transaction was refused with %v, want an error classified ErrDeadlock or ErrSerialization", err)
	}
	e.T.Logf("[%s] key %q: the claim won before its node had the winner's commit; the database refused it: %v", e.Backend, req.Key, err)
}
