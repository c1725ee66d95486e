package conformance

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// A statement of the caller's function that fails, and that the function
// handles (a unique violation answered 409, a deadlock it swallows): where
// the database aborts the whole transaction then
// (Capabilities.FailedStatementAborts, PostgreSQL), nothing can be stored
// and a client error is returned unstored; elsewhere the answer is stored
// with the rest of the work. Either way an answer is stored only with the
// work it answers for.

// answer returns the Response with status whose body names it.
func answer(status int) idem.Response {
	return idem.Response{Status: status, Body: fmt.Appendf(nil, "answer %d", status)}
}

// duplicateInsert runs, in tx, an INSERT that a unique index refuses: the
// key is already in the table. It returns the statement's error, which the
// function then handles.
func (e *env[TTx]) duplicateInsert(ctx context.Context, tx TTx, unique string) error {
	q, err := e.Driver.Wrap(tx)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, "INSERT INTO "+unique+" (k) VALUES ('order-7')")
	if err == nil {
		return errors.New("conformance: the duplicate INSERT succeeded: the unique index did not hold")
	}
	if !errors.Is(e.Driver.Dialect().Classify(err), idem.ErrUniqueViolation) {
		return fmt.Errorf("conformance: the duplicate INSERT failed with %v, want a unique violation", err)
	}
	return nil
}

// uniqueTaken makes a table whose unique column already holds 'order-7'.
func (e *env[TTx]) uniqueTaken() string {
	unique := e.CreateTable("uq", "k VARCHAR(64) NOT NULL UNIQUE")
	e.Exec(e.Driver.Pool(), "INSERT INTO "+unique+" (k) VALUES ('order-7')")
	return unique
}

// testAnswerAfterFailedStatement: the function writes its effect, runs an
// INSERT that a unique index refuses, handles the error and answers: 409
// (the usual "already exists"), or 201 (work it claims was done). Where the
// failure aborts the transaction, Do rolls back and stores nothing: the 409
// comes back unstored (Committed false, NotStored matching ErrTxAborted)
// and a retry runs the function again; the 201 is an error matching
// ErrTxAborted that Do does not retry. Elsewhere both are stored with the
// effect and replayed.
func testAnswerAfterFailedStatement[TTx any](t *testing.T, b Backend[TTx]) {
	for _, status := range []int{http.StatusConflict, http.StatusCreated} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e := setup(t, b, idem.Config{})
			aborts := e.Driver.Dialect().Capabilities().FailedStatementAborts
			unique := e.uniqueTaken()
			req := request(fmt.Sprintf("failed-then-%d", status), "x")
			calls := 0
			fn := func(ctx context.Context, tx TTx) (idem.Response, error) {
				calls++
				if err := e.effect(ctx, tx, req.Key); err != nil {
					return idem.Response{}, err
				}
				if err := e.duplicateInsert(ctx, tx, unique); err != nil {
					return idem.Response{}, err
				}
				return answer(status), nil
			}
			res, err := e.Store.Do(e.Ctx, req, fn)
			if !aborts {
				if err != nil || res.Outcome != idem.Won || !res.Committed || res.NotStored != nil {
					e.Fatalf(req.Key, "Do whose function answered %d after a failed statement: %+v, %v; want won and committed (the database keeps the transaction usable: Capabilities.FailedStatementAborts is false)", status, res, err)
				}
				if n := e.effectCount(req.Key); n != 1 {
					e.Fatalf(req.Key, "effects = %d, want 1", n)
				}
				if r := e.do(e.Store, req, fn); r.Outcome != idem.Replay || r.Response.Status != status || calls != 1 {
					e.Fatalf(req.Key, "retry: %v %d after %d calls, want a replay of %d", r.Outcome, r.Response.Status, calls, status)
				}
				return
			}
			if status == http.StatusConflict {
				if err != nil || res.Outcome != idem.Won || res.Committed || res.Response.Status != status {
					e.Fatalf(req.Key, "Do whose function answered 409 after a failed statement: %+v, %v; want the 409, won and not committed", res, err)
				}
				if !errors.Is(res.NotStored, idem.ErrTxAborted) {
					e.Errorf(req.Key, "Result.NotStored = %v, want an error matching ErrTxAborted", res.NotStored)
				}
			} else {
				if err == nil || !errors.Is(err, idem.ErrTxAborted) {
					e.Fatalf(req.Key, "Do whose function answered 201 after a failed statement: %+v, %v; want an error matching ErrTxAborted: the work it answers for was rolled back", res, err)
				}
				if idem.Retryable(err) {
					e.Errorf(req.Key, "Retryable(%v) = true, want false", err)
				}
			}
			if calls != 1 {
				e.Errorf(req.Key, "the function ran %d times, want once: an aborted transaction is not retried", calls)
			}
			if n := e.effectCount(req.Key); n != 0 {
				e.Fatalf(req.Key, "effects = %d, want 0: the aborted transaction rolled back", n)
			}
			if _, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
				e.Fatalf(req.Key, "Lookup: %v, want ErrNotFound: nothing was stored", err)
			}
			// Nothing was kept: a retry runs the function again.
			if _, _ = e.Store.Do(e.Ctx, req, fn); calls != 2 {
				e.Fatalf(req.Key, "the function ran %d times after a retry, want 2", calls)
			}
		})
	}
}

// testLeaseAnswerAfterFailedStatement: Lease.Complete with final writes
// that meet a failed statement the function handles. Where that aborts the
// transaction, a 409 comes back unstored and the lease is released, so a
// retry resumes the work at once; elsewhere it is stored.
func testLeaseAnswerAfterFailedStatement[TTx any](t *testing.T, b Backend[TTx]) {
	e, _ := leaseEnv(t, b, idem.Config{})
	aborts := e.Driver.Dialect().Capabilities().FailedStatementAborts
	unique := e.uniqueTaken()
	req := request("lease-failed-then-409", "x")
	l := e.acquire(e.Store, req, idem.Won)
	res, err := l.Complete(e.Ctx, answer(http.StatusConflict), func(ctx context.Context, tx TTx) error {
		if err := e.effect(ctx, tx, req.Key); err != nil {
			return err
		}
		return e.duplicateInsert(ctx, tx, unique)
	})
	if !aborts {
		if err != nil || !res.Committed || res.NotStored != nil {
			e.Fatalf(req.Key, "Complete whose final writes met a failed statement: %+v, %v; want committed", res, err)
		}
		return
	}
	if err != nil || res.Outcome != idem.Won || res.Committed || !errors.Is(res.NotStored, idem.ErrTxAborted) || res.Response.Status != http.StatusConflict {
		e.Fatalf(req.Key, "Complete whose final writes met a failed statement: %+v, %v; want the 409 unstored, NotStored matching ErrTxAborted", res, err)
	}
	if n := e.effectCount(req.Key); n != 0 {
		e.Fatalf(req.Key, "effects = %d, want 0", n)
	}
	again := e.acquire(e.Store, req, idem.Won)
	if !again.Resumed() {
		e.Fatalf(req.Key, "the retry's lease did not resume the released one")
	}
}

// testDeadlockSwallowedInFunction: two functions lock two rows in opposite
// order; the database aborts one of them (the victim) and the function
// swallows the error and answers 409, where the other answers 201 once it
// has both rows. Whatever the database does with the victim's transaction
// (PostgreSQL aborts it, MySQL rolls it back and goes on outside any
// transaction), no answer is stored without the work it answers for: the
// victim's 409 is never committed, its effect never kept.
func testDeadlockSwallowedInFunction[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	if e.Driver.Dialect().Capabilities().DatabaseWriteLock {
		t.Skipf("[%s] writers wait on the whole database: two transactions never hold row locks at once, so no deadlock can be provoked", e.Backend)
	}
	rows := e.CreateTable("lk", "k VARCHAR(8) NOT NULL PRIMARY KEY, n INTEGER NOT NULL")
	e.Exec(e.Driver.Pool(), "INSERT INTO "+rows+" (k, n) VALUES ('a', 0), ('b', 0)")
	locked := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	swallowed := [2]chan error{make(chan error, 1), make(chan error, 1)}
	var calls [2]atomic.Int32
	update := func(ctx context.Context, tx TTx, row string) error {
		q, err := e.Driver.Wrap(tx)
		if err != nil {
			return err
		}
		_, err = q.Exec(ctx, "UPDATE "+rows+" SET n = n + 1 WHERE k = '"+row+"'")
		return err
	}
	req := [2]idem.Request{request("swallow-0", "x"), request("swallow-1", "x")}
	work := func(i int, first, second string) idem.Func[TTx] {
		return func(ctx context.Context, tx TTx) (idem.Response, error) {
			if err := e.effect(ctx, tx, req[i].Key); err != nil {
				return idem.Response{}, err
			}
			if err := update(ctx, tx, first); err != nil {
				return idem.Response{}, err
			}
			attempt := calls[i].Add(1)
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
				if attempt == 1 {
					swallowed[i] <- err
				}
				return answer(http.StatusConflict), nil // the error is handled, not returned
			}
			return answer(http.StatusCreated), nil
		}
	}
	ch := [2]<-chan outcome{
		e.goDo(e.Ctx, e.Store, req[0], work(0, "a", "b")),
		e.goDo(e.Ctx, e.Store, req[1], work(1, "b", "a")),
	}
	victims := 0
	for i := range 2 {
		o := e.await(req[i].Key, ch[i], time.Minute, "the database did not detect the deadlock")
		var met error
		select {
		case met = <-swallowed[i]:
			victims++
		default:
		}
		effects := e.effectCount(req[i].Key)
		rec, lerr := e.Store.Lookup(e.Ctx, req[i].Scope, req[i].Key)
		stored := lerr == nil && rec.Completed
		switch {
		case met == nil && (o.err != nil || !o.res.Committed || effects != 1 || !stored):
			e.Errorf(req[i].Key, "the transaction that got both rows: %+v, %v, %d effects, stored %v; want committed with its effect", o.res, o.err, effects, stored)
		case met != nil && (o.res.Committed || effects != 0 || stored):
			e.Errorf(req[i].Key, "the deadlock victim, whose function swallowed %v and answered 409: %+v, %v, %d effects, record stored %v; want nothing committed or stored: the database rolled its work back", met, o.res, o.err, effects, stored)
		case met != nil && o.err == nil && (o.res.Outcome != idem.Won || o.res.NotStored == nil):
			e.Errorf(req[i].Key, "the deadlock victim: %+v; an answer returned without an error must be the function's, with NotStored saying why it was not stored", o.res)
		}
	}
	if victims != 1 {
		e.Errorf("swallow-*", "%d functions met an error on their second row, want exactly 1: no deadlock, the case proves nothing", victims)
	}
}
