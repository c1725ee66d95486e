package conformance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// The cases of Store.DoBatch: many keys in one transaction, decided key by
// key, the effects of the won keys committed with their records or not at
// all.

// BatchCases are the cases of Store.DoBatch, which Run runs with the
// others: for a suite that runs them alone, such as one over a dialect that
// hides its batch abilities to prove the key-by-key fallback
// (dialect.ClaimBatch, dialect.CompleteBatch).
func BatchCases[TTx any]() []Case[TTx] {
	return []Case[TTx]{
		{"BatchDecidesPerKey", testBatchDecidesPerKey[TTx]},
		{"BatchInvalid", testBatchInvalid[TTx]},
		{"BatchFuncErrorRollsBack", testBatchFuncErrorRollsBack[TTx]},
		{"BatchRefusedStatusRollsBack", testBatchRefusedStatusRollsBack[TTx]},
		{"BatchLoserWaitsThenReplays", testBatchLoserWaitsThenReplays[TTx]},
		{"BatchWaitBound", testBatchWaitBound[TTx]},
		{"BatchWaitBoundOnlyForClaim", testBatchWaitBoundOnlyForClaim[TTx]},
		{"BatchRacesShareKeys", testBatchRacesShareKeys[TTx]},
	}
}

// batchWork returns a BatchFunc that writes one effect per won request,
// labelled by its key, and answers created(prefix+key) for each. It
// records the keys it was given in got, when got is not nil.
func (e *env[TTx]) batchWork(prefix string, got *[]string) idem.BatchFunc[TTx] {
	return func(ctx context.Context, tx TTx, won []idem.Request) ([]idem.Response, error) {
		resps := make([]idem.Response, len(won))
		for i, r := range won {
			if err := e.effectIn(ctx, tx, r.Scope, r.Key); err != nil {
				return nil, err
			}
			if got != nil {
				*got = append(*got, r.Key)
			}
			resps[i] = created(prefix + r.Key)
		}
		return resps, nil
	}
}

// doBatch runs store.DoBatch and fails the case on error.
func (e *env[TTx]) doBatch(reqs []idem.Request, fn idem.BatchFunc[TTx]) []idem.Result {
	e.T.Helper()
	res, err := e.Store.DoBatch(e.Ctx, reqs, fn)
	if err != nil {
		e.Fatalf(reqs[0].Key, "DoBatch: %v", err)
	}
	if len(res) != len(reqs) {
		e.Fatalf(reqs[0].Key, "DoBatch returned %d results for %d requests", len(res), len(reqs))
	}
	return res
}

// testBatchDecidesPerKey: one batch meets a new key, a completed one
// (replay), one claimed with another body (mismatch), one whose claim was
// committed without completion (in flight) and an expired one (taken
// over). The function gets exactly the new and the expired key, in key
// order; each result is at its request's index; one effect per won key.
func testBatchDecidesPerKey[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	expired := request("b-expired", "x")
	e.do(e.Store, expired, e.work("b-expired", created("old")))
	clk.add(lifetime) // b-expired's retention passes
	replay, mismatch := request("b-replay", "x"), request("b-mismatch", "x")
	e.do(e.Store, replay, e.work("b-replay", created("stored")))
	e.do(e.Store, mismatch, e.work("b-mismatch", created("first")))
	inflight := request("b-inflight", "x")
	txn := e.Begin()
	if c, err := e.Store.Claim(e.Ctx, txn.Native(), inflight); err != nil || c.Outcome != idem.Won {
		txn.Rollback(e.Ctx)
		e.Fatalf(inflight.Key, "Claim: %+v, %v", c, err)
	}
	if err := txn.Commit(e.Ctx); err != nil { // committed without completion
		e.Fatalf(inflight.Key, "Commit: %v", err)
	}

	reqs := []idem.Request{request("b-new", "x"), replay, request("b-mismatch", "other body"), inflight, expired}
	var got []string
	res := e.doBatch(reqs, e.batchWork("batch ", &got))
	want := []idem.Outcome{idem.Won, idem.Replay, idem.Mismatch, idem.InFlight, idem.Won}
	for i, r := range res {
		if r.Outcome != want[i] {
			e.Fatalf(reqs[i].Key, "result %d: %v, want %v", i, r.Outcome, want[i])
		}
	}
	if !slices.Equal(got, []string{"b-expired", "b-new"}) {
		e.Fatalf("b-new", "the function got %q, want the won keys in key order [b-expired b-new]", got)
	}
	for _, i := range []int{0, 4} {
		if !res[i].Committed || string(res[i].Response.Body) != "batch "+reqs[i].Key {
			e.Fatalf(reqs[i].Key, "won: committed %v, body %q", res[i].Committed, res[i].Response.Body)
		}
	}
	if string(res[1].Response.Body) != "stored" || res[1].Response.Status != http.StatusCreated {
		e.Fatalf(replay.Key, "replay: %d %q, want the stored 201 \"stored\"", res[1].Response.Status, res[1].Response.Body)
	}
	if res[3].Record.Key != inflight.Key || res[3].Record.Completed {
		e.Fatalf(inflight.Key, "in flight: record %+v, want its pending record", res[3].Record)
	}
	for key, n := range map[string]int64{"b-new": 1, "b-expired": 2, "b-replay": 1, "b-mismatch": 1, "b-inflight": 0} {
		if c := e.effectCount(key); c != n {
			e.Fatalf(key, "effects = %d, want %d", c, n)
		}
	}
	// A retry of the whole batch replays what it stored.
	again := e.doBatch(reqs, e.batchWork("again ", nil))
	for _, i := range []int{0, 4} {
		if again[i].Outcome != idem.Replay || string(again[i].Response.Body) != "batch "+reqs[i].Key {
			e.Fatalf(reqs[i].Key, "retry of the batch: %v %q, want replay of the batch's response", again[i].Outcome, again[i].Response.Body)
		}
	}
	if c := e.effectCount("b-new"); c != 1 {
		e.Fatalf("b-new", "effects after the retry = %d, want 1", c)
	}
}

// testBatchInvalid: a batch with a key twice, or too many requests, or a
// bad key, is refused before anything is claimed.
func testBatchInvalid[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	never := func(context.Context, TTx, []idem.Request) ([]idem.Response, error) {
		e.Errorf("", "the function ran for an invalid batch")
		return nil, errors.New("must not run")
	}
	dup := []idem.Request{request("inv-1", "x"), request("inv-2", "x"), request("inv-1", "y")}
	if _, err := e.Store.DoBatch(e.Ctx, dup, never); !errors.Is(err, idem.ErrInvalidBatch) || !errors.Is(err, idem.ErrInvalidKey) {
		e.Fatalf("inv-1", "a key twice: %v, want ErrInvalidBatch and ErrInvalidKey", err)
	}
	// The same key in another scope is another key. The other scope lies
	// on DefaultScope's shard of a keyspace split in two by Vitess's
	// xxhash, so that the batch is one transaction there too (a batch
	// across shards is the model's, Backend.CrossShard).
	other := request("inv-1", "x")
	other.Scope = "tenant-b POST /orders"
	if _, err := e.Store.DoBatch(e.Ctx, []idem.Request{request("inv-1", "x"), other}, e.batchWork("", nil)); err != nil {
		e.Fatalf("inv-1", "one key in two scopes: %v, want no error", err)
	}
	many := make([]idem.Request, idem.MaxBatch+1)
	for i := range many {
		many[i] = request(fmt.Sprintf("many-%d", i), "x")
	}
	if _, err := e.Store.DoBatch(e.Ctx, many, never); !errors.Is(err, idem.ErrInvalidBatch) {
		e.Fatalf("many-0", "%d requests: %v, want ErrInvalidBatch", len(many), err)
	}
	bad := []idem.Request{request("inv-3", "x"), request("", "x")}
	if _, err := e.Store.DoBatch(e.Ctx, bad, never); !errors.Is(err, idem.ErrInvalidKey) {
		e.Fatalf("inv-3", "an empty key: %v, want ErrInvalidKey", err)
	}
	if n := e.Records(); n != 2 {
		e.Fatalf("inv-1", "records = %d, want only the 2 of the valid batch", n)
	}
	if res, err := e.Store.DoBatch(e.Ctx, nil, never); err != nil || len(res) != 0 {
		e.Fatalf("", "empty batch: %v, %v, want no results and no error", res, err)
	}
}

// testBatchFuncErrorRollsBack: the function's error rolls every won key
// back, effects and records, and comes back unchanged; a retry does the
// work.
func testBatchFuncErrorRollsBack[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	reqs := []idem.Request{request("fe-1", "x"), request("fe-2", "x"), request("fe-3", "x")}
	boom := errors.New("boom")
	res, err := e.Store.DoBatch(e.Ctx, reqs, func(ctx context.Context, tx TTx, won []idem.Request) ([]idem.Response, error) {
		for _, r := range won {
			if err := e.effect(ctx, tx, r.Key); err != nil {
				return nil, err
			}
		}
		return nil, boom
	})
	if !errors.Is(err, boom) || res != nil {
		e.Fatalf("fe-1", "DoBatch: %v, %v, want the function's error and no results", res, err)
	}
	if n := e.Records(); n != 0 {
		e.Fatalf("fe-1", "records = %d, want 0", n)
	}
	for _, r := range reqs {
		if c := e.effectCount(r.Key); c != 0 {
			e.Fatalf(r.Key, "effects = %d, want 0", c)
		}
	}
	for _, r := range e.doBatch(reqs, e.batchWork("", nil)) {
		if r.Outcome != idem.Won || !r.Committed {
			e.Fatalf("fe-1", "retry after the error: %+v, want won", r)
		}
	}
}

// testBatchRefusedStatusRollsBack: one response Config.StoreStatus refuses
// rolls the whole batch back: every won result keeps its response,
// uncommitted, and no key keeps a record or an effect.
func testBatchRefusedStatusRollsBack[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	reqs := []idem.Request{request("rs-1", "x"), request("rs-2", "x"), request("rs-3", "x")}
	res := e.doBatch(reqs, func(ctx context.Context, tx TTx, won []idem.Request) ([]idem.Response, error) {
		resps := make([]idem.Response, len(won))
		for i, r := range won {
			if err := e.effect(ctx, tx, r.Key); err != nil {
				return nil, err
			}
			resps[i] = created(r.Key)
			if r.Key == "rs-2" {
				resps[i] = idem.Response{Status: http.StatusServiceUnavailable, Body: []byte("later")}
			}
		}
		return resps, nil
	})
	for i, r := range res {
		if r.Outcome != idem.Won || r.Committed {
			e.Fatalf(reqs[i].Key, "result %d: %+v, want won and not committed", i, r)
		}
	}
	if res[1].Response.Status != http.StatusServiceUnavailable || string(res[0].Response.Body) != "rs-1" {
		e.Fatalf("rs-1", "responses %d %q, want each item's own", res[1].Response.Status, res[0].Response.Body)
	}
	if n := e.Records(); n != 0 {
		e.Fatalf("rs-1", "records = %d, want 0: the batch rolled back", n)
	}
	for _, r := range reqs {
		if c := e.effectCount(r.Key); c != 0 {
			e.Fatalf(r.Key, "effects = %d, want 0", c)
		}
	}
}

// testBatchLoserWaitsThenReplays: a batch meets a key another transaction
// holds, waits for it within the bound, and once it commits replays that
// key and does the others.
func testBatchLoserWaitsThenReplays[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	held := request("bw-held", "x")
	claim, finish := e.holdClaim(held, "bw-held")
	reqs := []idem.Request{request("bw-a", "x"), held, request("bw-z", "x")}
	type answer struct {
		res []idem.Result
		err error
		end time.Time
	}
	ch := make(chan answer, 1)
	go func() {
		res, err := e.Store.DoBatch(e.Ctx, reqs, e.batchWork("batch ", nil))
		ch <- answer{res, err, time.Now()}
	}()
	time.Sleep(hold)
	select {
	case a := <-ch:
		e.Fatalf(held.Key, "the batch answered while the key was held: %+v, %v", a.res, a.err)
	default:
	}
	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(held.Key, "Complete: %v", err)
	}
	released := finish(true)
	var a answer
	select {
	case a = <-ch:
	case <-time.After(time.Minute):
		e.Fatalf(held.Key, "the batch did not answer within a minute; likely cause: %s", causeAfterCommit)
	}
	if a.err != nil {
		e.Fatalf(held.Key, "DoBatch: %v", a.err)
	}
	if a.end.Before(released) {
		e.Fatalf(held.Key, "the batch answered before the holder let go")
	}
	if r := a.res[1]; r.Outcome != idem.Replay || string(r.Response.Body) != "winner" {
		e.Fatalf(held.Key, "held key: %v %q, want replay of the winner", r.Outcome, r.Response.Body)
	}
	for _, i := range []int{0, 2} {
		if r := a.res[i]; r.Outcome != idem.Won || !r.Committed {
			e.Fatalf(reqs[i].Key, "free key: %+v, want won", r)
		}
	}
	for _, r := range reqs {
		if c := e.effectCount(r.Key); c != 1 {
			e.Fatalf(r.Key, "effects = %d, want 1", c)
		}
	}
}

// testBatchWaitBound: a batch whose key another transaction holds past the
// wait bound answers InFlight for the keys it could not decide within
// twice the bound, answers the keys with committed records from them, and
// does no work; after the holder commits, the batch replays the held key
// and does the rest.
func testBatchWaitBound[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 500 * time.Millisecond
	e := setup(t, b, idem.Config{WaitBound: bound})
	done := request("wb-done", "x")
	e.do(e.Store, done, e.work("wb-done", created("done")))
	held := request("wb-held", "x")
	claim, finish := e.holdClaim(held, "wb-held")
	reqs := []idem.Request{request("wb-free", "x"), held, done}
	start := time.Now()
	res, err := e.Store.DoBatch(e.Ctx, reqs, e.batchWork("batch ", nil))
	elapsed := time.Since(start)
	if err != nil {
		e.Fatalf(held.Key, "DoBatch: %v", err)
	}
	if res[1].Outcome != idem.InFlight || res[0].Outcome != idem.InFlight {
		e.Fatalf(held.Key, "held and free key past the bound: %v and %v, want in-flight", res[1].Outcome, res[0].Outcome)
	}
	if res[2].Outcome != idem.Replay || string(res[2].Response.Body) != "done" {
		e.Fatalf(done.Key, "completed key: %v %q, want replay", res[2].Outcome, res[2].Response.Body)
	}
	if elapsed < bound/2 || elapsed > 2*bound+6*time.Second {
		e.Fatalf(held.Key, "the batch gave up after %v, want between the bound %v and twice it (whole seconds on InnoDB)", elapsed, bound)
	}
	if err := claim.Complete(e.Ctx, created("winner")); err != nil {
		e.Fatalf(held.Key, "Complete: %v", err)
	}
	finish(true)
	res = e.doBatch(reqs, e.batchWork("batch ", nil))
	if res[0].Outcome != idem.Won || res[1].Outcome != idem.Replay || string(res[1].Response.Body) != "winner" {
		e.Fatalf(held.Key, "after the holder committed: %v and %v %q, want won and replay", res[0].Outcome, res[1].Outcome, res[1].Response.Body)
	}
	for key, n := range map[string]int64{"wb-free": 1, "wb-held": 1, "wb-done": 1} {
		if c := e.effectCount(key); c != n {
			e.Fatalf(key, "effects = %d, want %d", c, n)
		}
	}
}

// testBatchRacesShareKeys: workers run batches over the same keys, each in
// an order of its own, at once. Every key gets exactly one effect, every
// batch ends without error (deadlocks and serialization failures retried),
// and every answer for a key is the winner's response.
func testBatchRacesShareKeys[TTx any](t *testing.T, b Backend[TTx]) {
	const (
		workers = 4
		rounds  = 3
		keys    = 24
		size    = 12
	)
	e := setup(t, b, idem.Config{MaxAttempts: 40})
	ctx, cancel := context.WithTimeout(e.Ctx, 2*time.Minute)
	defer cancel()
	all := make([]idem.Request, keys)
	for i := range all {
		all[i] = request(fmt.Sprintf("race-%02d", i), "x")
	}
	type answer struct {
		worker int
		req    idem.Request
		res    idem.Result
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		errs    = make(chan error, workers*rounds)
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 35))
			for range rounds {
				reqs := slices.Clone(all)
				rng.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
				reqs = reqs[:size]
				res, err := e.Store.DoBatch(ctx, reqs, e.batchWork(fmt.Sprintf("w%d ", w), nil))
				if err != nil {
					errs <- fmt.Errorf("worker %d: %w", w, err)
					return
				}
				mu.Lock()
				for i, r := range res {
					answers = append(answers, answer{w, reqs[i], r})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.Fatalf("race-00", "%v", err)
	}
	winner := map[string]string{}
	for _, a := range answers {
		if a.res.Outcome == idem.Won {
			if !a.res.Committed {
				e.Fatalf(a.req.Key, "worker %d won without committing: %+v", a.worker, a.res)
			}
			if prev, ok := winner[a.req.Key]; ok {
				e.Fatalf(a.req.Key, "two winners: %q and %q", prev, a.res.Response.Body)
			}
			winner[a.req.Key] = string(a.res.Response.Body)
		}
	}
	inflight := 0
	for _, a := range answers {
		switch a.res.Outcome {
		case idem.Won:
		case idem.Replay:
			if w, ok := winner[a.req.Key]; !ok || string(a.res.Response.Body) != w {
				e.Fatalf(a.req.Key, "worker %d replayed %q, want the winner's %q", a.worker, a.res.Response.Body, w)
			}
		case idem.InFlight:
			inflight++
		default:
			e.Fatalf(a.req.Key, "worker %d: %v", a.worker, a.res.Outcome)
		}
	}
	counts, err := e.effectCounts()
	if err != nil {
		e.Fatalf("race-00", "effect counts: %v", err)
	}
	for _, r := range all {
		want := int64(0)
		if _, ok := winner[r.Key]; ok {
			want = 1
		}
		if counts[r.Key] != want {
			e.Fatalf(r.Key, "effects = %d, want %d (winner %q)", counts[r.Key], want, winner[r.Key])
		}
	}
	if inflight > len(answers)/4 {
		e.Fatalf("race-00", "%d of %d answers in flight: the batches did not wait for each other", inflight, len(answers))
	}
}

// testBatchWaitBoundOnlyForClaim: the wait bound of a batch's claim, which
// inserts a new key and takes an expired one over, does not leak into the
// function's statements: one that waits for a row lock longer than the
// bound still waits, and the batch commits once the lock is released.
func testBatchWaitBoundOnlyForClaim[TTx any](t *testing.T, b Backend[TTx]) {
	const bound = 200 * time.Millisecond
	clk := newClock(t0)
	e := setup(t, b, idem.Config{WaitBound: bound, Retention: retention, Clock: clk.Now})
	if e.Driver.Dialect().Capabilities().DatabaseWriteLock {
		t.Skipf("[%s] writers wait on the whole database: no row lock to wait for after the claim", e.Backend)
	}
	expired := request("bs-expired", "x")
	e.do(e.Store, expired, e.work("bs-old", created("old")))
	clk.add(lifetime)
	e.Exec(e.Driver.Pool(), e.effectInsert(DefaultScope, "row-lock"))
	lockRow := rowLock(e.effects)
	holder := e.Begin()
	defer holder.Rollback(e.Ctx)
	hq, err := e.Driver.Wrap(holder.Native())
	if err != nil {
		e.T.Fatal(err)
	}
	e.Exec(hq, lockRow)

	reqs := []idem.Request{request("bs-new", "x"), expired}
	type answer struct {
		res     []idem.Result
		err     error
		elapsed time.Duration
	}
	ch := make(chan answer, 1)
	go func() {
		start := time.Now()
		res, err := e.Store.DoBatch(e.Ctx, reqs, func(ctx context.Context, tx TTx, won []idem.Request) ([]idem.Response, error) {
			q, err := e.Driver.Wrap(tx)
			if err != nil {
				return nil, err
			}
			if _, err := q.Exec(ctx, lockRow); err != nil { // waits for holder
				return nil, err
			}
			return e.batchWork("", nil)(ctx, tx, won)
		})
		ch <- answer{res, err, time.Since(start)}
	}()
	select {
	case a := <-ch:
		e.Fatalf("bs-new", "the function's statement stopped waiting after %v (%+v, %v): the batch claim's wait bound %v leaked into it", a.elapsed, a.res, a.err, bound)
	case <-time.After(5 * bound):
	}
	if err := holder.Rollback(e.Ctx); err != nil {
		e.Fatalf("bs-new", "holder's Rollback: %v", err)
	}
	var a answer
	select {
	case a = <-ch:
	case <-time.After(time.Minute):
		e.Fatalf("bs-new", "the batch did not answer within a minute; likely cause: %s", causeAfterCommit)
	}
	if a.err != nil {
		e.Fatalf("bs-new", "DoBatch after the lock was released: %v", a.err)
	}
	for i, r := range a.res {
		if r.Outcome != idem.Won || !r.Committed {
			e.Fatalf(reqs[i].Key, "after the lock was released: %+v, want won", r)
		}
	}
}
