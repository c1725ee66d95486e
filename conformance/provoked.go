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
)

// Errors provoked through the backend, so that the dialect's Classify meets
// the driver's real errors rather than errors a case made up: a unique
// violation and a deadlock in the caller's function, a claim in a read-only
// transaction, and a COMMIT whose connection breaks.

// testUniqueViolationInFunction: a unique violation raised by the caller's
// own statement is the caller's error: Do returns it unchanged and does not
// retry (the function runs once). A dialect that maps unique violations to a
// retryable meaning would run the function again and again, and end in a
// *RetryError.
func testUniqueViolationInFunction[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{MaxAttempts: 3})
	// UNIQUE inline: a CREATE INDEX after the CREATE TABLE may run on a
	// cluster node that has not applied the table yet.
	unique := e.CreateTable("uq", "k VARCHAR(64) NOT NULL UNIQUE")
	req := request("unique-in-fn", "x")
	calls := 0
	var dupErr error
	_, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		calls++
		if err := e.effect(ctx, tx, "unique-in-fn"); err != nil {
			return idem.Response{}, err
		}
		q, err := e.Driver.Wrap(tx)
		if err != nil {
			return idem.Response{}, err
		}
		insert := "INSERT INTO " + unique + " (k) VALUES ('order-7')"
		if _, err := q.Exec(ctx, insert); err != nil {
			return idem.Response{}, fmt.Errorf("first insert: %w", err)
		}
		_, dupErr = q.Exec(ctx, insert)
		if dupErr == nil {
			return created("no error"), nil
		}
		return idem.Response{}, dupErr
	})
	if dupErr == nil {
		e.Fatalf(req.Key, "the duplicate INSERT succeeded: the unique index did not hold (Do: %v)", err)
	}
	if calls != 1 {
		e.Errorf(req.Key, "the function ran %d times, want once: Classify(%v) = %v makes a unique violation retryable", calls, dupErr, e.Driver.Dialect().Classify(dupErr))
	}
	if err != dupErr {
		e.Errorf(req.Key, "Do returned %v, want the function's error unchanged: %v", err, dupErr)
	}
	if got := e.Driver.Dialect().Classify(dupErr); !errors.Is(got, idem.ErrUniqueViolation) || !errors.Is(got, dupErr) {
		e.Errorf(req.Key, "Classify(%v) = %v, want ErrUniqueViolation wrapping the driver's error", dupErr, got)
	}
	if n := e.Records() + e.effectCount("unique-in-fn") + e.Count("SELECT COUNT(*) FROM "+unique); n != 0 {
		e.Errorf(req.Key, "rows after the function's error = %d, want 0 (rolled back)", n)
	}
	if r := e.do(e.Store, req, e.work("unique-in-fn", created("ok"))); r.Outcome != idem.Won || !r.Committed {
		e.Fatalf(req.Key, "Do afterwards: %v, want won", r.Outcome)
	}
}

// testDeadlockRetried: two Do calls whose functions lock two rows in
// opposite order deadlock; the database aborts one of them, and Do retries
// it, so both end committed with exactly one effect each. A dialect that
// does not classify the database's deadlock error as retryable returns it
// to the caller instead.
func testDeadlockRetried[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{MaxAttempts: 5})
	if e.Driver.Dialect().Capabilities().DatabaseWriteLock {
		t.Skipf("[%s] writers wait on the whole database: two transactions never hold row locks at once, so no deadlock can be provoked", e.Backend)
	}
	// A primary key, so that each UPDATE locks its one row (without an
	// index, InnoDB at REPEATABLE READ locks every row it scans).
	rows := e.CreateTable("lk", "k VARCHAR(8) NOT NULL PRIMARY KEY, n INTEGER NOT NULL")
	e.Exec(e.Driver.Pool(), "INSERT INTO "+rows+" (k, n) VALUES ('a', 0), ('b', 0)")
	var (
		calls  [2]atomic.Int32
		locked = [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		mu     sync.Mutex
		seen   []error // errors the functions' statements met
	)
	update := func(ctx context.Context, tx TTx, row string) error {
		q, err := e.Driver.Wrap(tx)
		if err != nil {
			return err
		}
		_, err = q.Exec(ctx, "UPDATE "+rows+" SET n = n + 1 WHERE k = '"+row+"'")
		if err != nil {
			mu.Lock()
			seen = append(seen, err)
			mu.Unlock()
		}
		return err
	}
	work := func(i int, first, second string) idem.Func[TTx] {
		label := fmt.Sprintf("deadlock-%d", i)
		return func(ctx context.Context, tx TTx) (idem.Response, error) {
			attempt := calls[i].Add(1)
			if err := e.effect(ctx, tx, label); err != nil {
				return idem.Response{}, err
			}
			if err := update(ctx, tx, first); err != nil {
				return idem.Response{}, err
			}
			if attempt == 1 {
				// Both hold their first row before either asks for its
				// second: a deadlock, not a wait.
				close(locked[i])
				select {
				case <-locked[1-i]:
				case <-time.After(gateTimeout):
					return idem.Response{}, errors.New("conformance: the other transaction never locked its first row")
				}
			}
			if err := update(ctx, tx, second); err != nil {
				return idem.Response{}, err
			}
			return created(label), nil
		}
	}
	req := [2]idem.Request{request("deadlock-0", "x"), request("deadlock-1", "x")}
	ch := [2]<-chan outcome{
		e.goDo(e.Ctx, e.Store, req[0], work(0, "a", "b")),
		e.goDo(e.Ctx, e.Store, req[1], work(1, "b", "a")),
	}
	for i := range 2 {
		o := e.await(req[i].Key, ch[i], time.Minute, "the database did not detect the deadlock, or Do did not retry its victim")
		if o.err != nil || o.res.Outcome != idem.Won || !o.res.Committed {
			e.Errorf(req[i].Key, "Do in the deadlock: %+v, %v, want won and committed after a retry (errors met: %v)", o.res, o.err, seen)
		}
	}
	if calls[0].Load()+calls[1].Load() < 3 {
		e.Errorf("deadlock-*", "the functions ran %d and %d times: no deadlock happened, the case proves nothing", calls[0].Load(), calls[1].Load())
	}
	deadlocked := false
	for _, err := range seen {
		got := e.Driver.Dialect().Classify(err)
		if !retryable(got) {
			e.Errorf("deadlock-*", "Classify(%v) = %v, want a retryable meaning (ErrDeadlock)", err, got)
		}
		deadlocked = deadlocked || errors.Is(got, idem.ErrDeadlock) || errors.Is(got, idem.ErrSerialization)
	}
	if !deadlocked {
		e.Errorf("deadlock-*", "no statement met an error classified as ErrDeadlock or ErrSerialization (errors met: %v)", seen)
	}
	for i := range 2 {
		if n := e.effectCount(fmt.Sprintf("deadlock-%d", i)); n != 1 {
			e.Errorf(req[i].Key, "effects = %d, want exactly 1", n)
		}
	}
	if n := e.Count("SELECT SUM(n) FROM " + rows); n != 4 {
		e.Errorf("deadlock-*", "the locked rows were updated %d times in all, want 4 (two committed transactions, two rows each)", n)
	}
}

// testClaimInReadOnlyTransaction: LookupTx works in a transaction that
// refuses writes; a claim there fails with ErrBadTx and ErrReadOnly (the
// transaction is of the wrong kind, a retry cannot help), and nothing is
// written.
func testClaimInReadOnlyTransaction[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	if b.BeginReadOnly == nil {
		t.Fatalf("[%s] Backend.BeginReadOnly is nil: set it to begin a read-only transaction on the driver's database "+
			"(calling t.Skip in it if the database has none), so the suite can check that a claim there fails with ErrBadTx and ErrReadOnly", e.Backend)
	}
	done := request("read-only-done", "x")
	e.do(e.Store, done, e.work("read-only-done", created("stored")))
	req := request("read-only", "x")
	tx := b.BeginReadOnly(t, e.Driver)
	if rec, err := e.Store.LookupTx(e.Ctx, tx, done.Scope, done.Key); err != nil || !rec.Completed || string(rec.Response.Body) != "stored" {
		e.Fatalf(done.Key, "LookupTx in a read-only transaction: %+v, %v, want the completed record", rec, err)
	}
	c, err := e.Store.Claim(e.Ctx, tx, req)
	if !errors.Is(err, idem.ErrBadTx) || !errors.Is(err, idem.ErrReadOnly) {
		e.Fatalf(req.Key, "Claim in a read-only transaction: %+v, %v, want ErrBadTx and ErrReadOnly (Classify must map the database's read-only error to ErrReadOnly)", c, err)
	}
	if _, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "after the refused claim, Lookup: %v, want ErrNotFound", err)
	}
}

// testCommitConnectionLost: when the connection breaks right after COMMIT
// left, Do reports ErrCommitUnknown and does not run the function again on
// its own; a retry with the same key then replays or redoes the work, never
// both. It needs Backend.BreakCommit; an in-process database has no
// connection to lose.
func testCommitConnectionLost[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	if b.BreakCommit == nil {
		t.Skipf("[%s] Backend.BreakCommit is nil, so the suite cannot break a connection during COMMIT "+
			"(an in-process database such as SQLite has none to lose); a backend that talks to a server "+
			"should set it, so the suite can check ErrCommitUnknown", e.Backend)
	}
	br := b.BreakCommit(t)
	store, err := idem.New(br.Driver, idem.Config{Table: e.Table, WaitBound: e.Store.Config().WaitBound})
	if err != nil {
		t.Fatalf("[%s] idem.New on the breaking driver: %v", e.Backend, err)
	}
	req := request("commit-lost", "x")
	calls := 0
	before := br.Broken()
	_, err = store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		calls++
		q, err := br.Driver.Wrap(tx)
		if err != nil {
			return idem.Response{}, err
		}
		if _, err := q.Exec(ctx, e.effectInsert(DefaultScope, "commit-lost")); err != nil {
			return idem.Response{}, err
		}
		br.Arm()
		return created("done"), nil
	})
	if n := br.Broken() - before; n != 1 {
		e.Fatalf(req.Key, "BreakCommit broke %d connections, want 1 (was COMMIT seen?); Do: %v", n, err)
	}
	if !errors.Is(err, idem.ErrCommitUnknown) {
		e.Errorf(req.Key, "Do whose COMMIT lost its connection: %v, want ErrCommitUnknown", err)
	}
	if calls != 1 {
		e.Errorf(req.Key, "the function ran %d times, want once: a commit whose outcome is unknown is not retried by Do", calls)
	}
	res := e.do(e.Store, req, e.work("commit-lost", created("done")))
	if (res.Outcome != idem.Replay && res.Outcome != idem.Won) || string(res.Response.Body) != "done" {
		e.Fatalf(req.Key, "retry after the lost commit: %+v, want a replay or a redo", res)
	}
	if n := e.effectCount("commit-lost"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want exactly 1", n)
	}
}
