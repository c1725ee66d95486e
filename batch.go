package idem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemkit/idem/dialect"
)

// MaxBatch is the most requests one DoBatch takes. A larger batch holds its
// keys' locks longer and makes one statement too big for some servers;
// split it.
const MaxBatch = 1000

// ErrInvalidBatch reports a batch DoBatch refuses before it claims
// anything: more than MaxBatch requests, or the same key twice in one
// scope (that error also matches ErrInvalidKey).
var ErrInvalidBatch = errors.New("idem: invalid batch")

// BatchFunc is the work DoBatch protects. It runs once, in the transaction
// that holds the claims of won: the batch's requests this call won, in
// (Scope, Key) order, never empty. It returns one Response per won request,
// in the same order, each stored with its key. Returning an error rolls the
// whole batch back and stores nothing, so a retry of the batch does the
// work.
type BatchFunc[TTx any] func(ctx context.Context, tx TTx, won []Request) ([]Response, error)

// DoBatch is Do for many keys in one transaction, decided key by key. It
// begins one transaction, claims every key of reqs (with one statement
// where the backend can: dialect.BatchClaimer), runs fn once with the
// requests it won, stores each won request's response (with one statement
// where the backend can: dialect.BatchCompleter) and commits the responses
// with fn's effects. The results are in the order of reqs: Won for the
// requests fn did, and Replay, Mismatch or InFlight for the others, with
// the same meaning as Do's. An empty reqs returns no results and runs
// nothing.
//
// The keys are claimed in (Scope, Key) order, so two batches sharing keys
// wait for each other instead of deadlocking. Before anything is claimed,
// DoBatch refuses (ErrInvalidBatch) more than MaxBatch requests and the
// same key twice in one scope, and any request Validate refuses.
//
// All won requests share one transaction, so they commit or roll back
// together; no effect ever commits without its record:
//
//   - fn's error rolls the batch back and is returned unchanged, with no
//     results (a retryable one retries the batch, as in Do);
//   - when Config.StoreStatus refuses any one of fn's responses, the whole
//     batch rolls back: every won request's Result has Outcome Won, its
//     response and Committed false, and its key is free for a retry;
//   - when a statement of fn failed and aborted the transaction
//     (PostgreSQL, ErrTxAborted), nothing can be stored: if every response
//     is a client error (4xx) each won Result carries it with NotStored
//     set, else DoBatch returns an error matching ErrTxAborted.
//
// A claim waits at most Config.WaitBound for each transaction holding one
// of its keys. When a wait runs out the transaction rolls back
// and each key is answered from its committed record, as Do answers after
// its wait: Replay, Mismatch, or InFlight for a pending record. The keys
// that have no committed record (held by a claim not committed yet, or
// free) are claimed once more in a new transaction; those that wait out
// that bound too are InFlight (Busy where writers take the whole database).
// WaitBound bounds each lock wait, so a batch that meets one holder waits
// about twice WaitBound, more when holders of several of its keys come and
// go.
//
// Retryable errors (ErrSerialization, ErrDeadlock, ErrUnavailable) retry
// the batch's transaction up to Config.MaxAttempts times, as in Do, and
// the completion and COMMIT run within Config.CommitTimeout once fn has
// returned; a ctx that ended before the completion began rolls the batch
// back and DoBatch returns its error. DoBatch does not read first (Config.ReadFirst) and calls no
// DoObserver; an Observer sees each key's claim and stored response.
func (s *Store[TTx]) DoBatch(ctx context.Context, reqs []Request, fn BatchFunc[TTx], opts ...Option) ([]Result, error) {
	sorted, err := sortBatch(reqs)
	if err != nil {
		return nil, err
	}
	if fn == nil {
		return nil, fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	if len(reqs) == 0 {
		return []Result{}, nil
	}
	b := &batch[TTx]{store: s, fn: fn, o: newCallOptions(opts), reqs: make([]Request, len(sorted)), res: make([]Result, len(sorted))}
	for i, at := range sorted {
		b.reqs[i] = reqs[at]
	}
	open := make([]int, len(sorted))
	for i := range open {
		open[i] = i
	}
	// Two rounds: the second claims what the first's wait could not
	// decide (keys without a committed record).
	for round := 0; round < 2 && len(open) > 0; round++ {
		var waited bool
		err := s.retry(ctx, b.reqs[open[0]], func() error {
			var err error
			waited, err = b.attempt(ctx, open)
			var ferr fnError
			if errors.As(err, &ferr) {
				if classified := s.d.Classify(ferr.err); retryable(classified) {
					return classified
				}
				return ferr.err
			}
			return err
		})
		if err != nil {
			var stopped *stoppedError
			if errors.As(err, &stopped) {
				return nil, fmt.Errorf("idem: retry of a batch of %d keys: %w (last error: %w)", len(open), stopped.ctxErr, stopped.last)
			}
			return nil, err
		}
		if !waited {
			open = nil
			break
		}
		open = b.settleWaited(ctx, open)
	}
	for _, i := range open {
		b.res[i] = Result{Outcome: InFlight, Busy: s.d.Capabilities().DatabaseWriteLock}
		s.claimed(ctx, b.reqs[i], InFlight, time.Time{}, false)
	}
	out := make([]Result, len(reqs))
	for i, at := range sorted {
		out[at] = b.res[i]
	}
	return out, nil
}

// sortBatch validates reqs as one batch and returns their indices in
// (Scope, Key) byte order.
func sortBatch(reqs []Request) ([]int, error) {
	if len(reqs) > MaxBatch {
		return nil, fmt.Errorf("%w: %d requests, at most MaxBatch (%d)", ErrInvalidBatch, len(reqs), MaxBatch)
	}
	order := make([]int, len(reqs))
	for i, r := range reqs {
		if err := r.Validate(); err != nil {
			return nil, fmt.Errorf("idem: batch request %d: %w", i, err)
		}
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return cmp.Or(cmp.Compare(reqs[a].Scope, reqs[b].Scope), cmp.Compare(reqs[a].Key, reqs[b].Key))
	})
	for i := 1; i < len(order); i++ {
		a, b := reqs[order[i-1]], reqs[order[i]]
		if a.Scope == b.Scope && a.Key == b.Key {
			return nil, fmt.Errorf("%w: %w: key %q twice in scope %q (requests %d and %d)",
				ErrInvalidBatch, ErrInvalidKey, a.Key, a.Scope, min(order[i-1], order[i]), max(order[i-1], order[i]))
		}
	}
	return order, nil
}

// batch is one DoBatch call: its requests in (Scope, Key) order and their
// results so far.
type batch[TTx any] struct {
	store *Store[TTx]
	fn    BatchFunc[TTx]
	o     callOptions
	reqs  []Request
	res   []Result
}

// attempt runs one transaction over the requests open (indices into
// b.reqs, ascending). It decides every one of them in b.res, unless the
// claim waited out its bound: then it rolls back and reports waited, and
// the caller answers them from their committed records.
func (b *batch[TTx]) attempt(ctx context.Context, open []int) (waited bool, err error) {
	s := b.store
	txCtx := followContext(ctx)
	defer txCtx.release()
	started := s.startClock()
	tx, err := s.driver.Begin(txCtx, dialect.BeginOptions{Isolation: b.o.isolation, WaitBound: s.cfg.WaitBound})
	if err != nil {
		err = s.d.Classify(err)
		if errors.Is(err, ErrLockTimeout) && ctx.Err() == nil {
			return true, nil
		}
		return false, s.failed(ctx, "begin for the batch of", b.reqs[open[0]], err)
	}
	finished := false
	defer func() {
		if !finished {
			rollback(ctx, tx)
		}
	}()
	end := func() {
		finished = true
		rollback(ctx, tx)
	}

	args := dialect.BatchClaimArgs{
		Keys:      make([]dialect.BatchKey, len(open)),
		Now:       s.now(),
		Retention: claimRetention(s.cfg.Retention),
		WaitBound: s.cfg.WaitBound,
	}
	for j, i := range open {
		args.Keys[j] = dialect.BatchKey{Scope: b.reqs[i].Scope, Key: b.reqs[i].Key, Fingerprint: b.reqs[i].Fingerprint[:]}
	}
	claims, err := dialect.ClaimBatch(ctx, s.d, tx, s.table, args)
	if err != nil {
		err = s.d.Classify(err)
		if errors.Is(err, ErrLockTimeout) && ctx.Err() == nil {
			// Every read through the pool comes after the rollback: the
			// transaction holds a connection, maybe the pool's only one.
			end()
			return true, nil
		}
		return false, s.failed(ctx, "claim in the batch of", b.reqs[open[0]], err)
	}
	var won []int
	for j, i := range open {
		if claims[j].Won {
			won = append(won, i)
			continue
		}
		res, err := s.judge(b.reqs[i], claims[j].Record)
		if err != nil {
			return false, err
		}
		b.res[i] = res
	}
	for j, i := range open {
		outcome := b.res[i].Outcome
		if claims[j].Won {
			outcome = Won
		}
		s.claimed(ctx, b.reqs[i], outcome, started, false)
	}
	if len(won) == 0 {
		return false, nil
	}
	wonReqs := make([]Request, len(won))
	for j, i := range won {
		wonReqs[j] = b.reqs[i]
	}
	resps, err := b.fn(s.markRun(ctx), tx.Native(), wonReqs)
	if err != nil {
		return false, fnError{err}
	}
	if len(resps) != len(won) {
		return false, fmt.Errorf("%w: the batch function returned %d responses for %d won requests", ErrInvalidResponse, len(resps), len(won))
	}
	stored := true
	for j, resp := range resps {
		if err := resp.validate(); err != nil {
			return false, fmt.Errorf("idem: batch response for key %q in scope %q: %w", wonReqs[j].Key, wonReqs[j].Scope, err)
		}
		stored = stored && s.cfg.StoreStatus(resp.Status)
	}
	if !stored {
		// One response is not to be stored, and its effects share the
		// transaction with every other's: roll all of them back.
		b.settleWon(won, resps, false, nil)
		return false, nil
	}
	if !txCtx.detach(s.cfg.CommitTimeout) {
		return false, s.failed(ctx, "complete the batch of", wonReqs[0], ctx.Err())
	}
	completes := make([]dialect.CompleteArgs, len(won))
	sizes := make([][2]int, len(won))
	for j, resp := range resps {
		header, body, err := s.encodeResponse(resp)
		if err != nil {
			return false, fmt.Errorf("idem: batch response for key %q in scope %q: %w", wonReqs[j].Key, wonReqs[j].Scope, err)
		}
		r := wonReqs[j]
		completes[j] = dialect.CompleteArgs{
			Scope: r.Scope, Key: r.Key, Fingerprint: r.Fingerprint[:],
			Status: resp.Status, Header: header, Body: body,
			Now: s.now(), Retention: s.cfg.Retention,
		}
		sizes[j] = [2]int{len(header), len(body)}
	}
	if err := dialect.CompleteBatch(txCtx, s.d, tx, s.table, completes); err != nil {
		err = s.d.Classify(err)
		switch {
		case errors.Is(err, ErrTxDone):
			end()
			return false, s.txEnded(wonReqs[0], err)
		case errors.Is(err, ErrTxAborted):
			end()
			return false, b.unstored(won, resps, s.failed(txCtx, "complete the batch of", wonReqs[0], err))
		}
		return false, s.failed(txCtx, "complete the batch of", wonReqs[0], err)
	}
	finished = true
	if err := tx.Commit(txCtx); err != nil {
		rollback(ctx, tx)
		err = s.d.Classify(err)
		switch {
		case errors.Is(err, ErrTxDone):
			return false, s.txEnded(wonReqs[0], err)
		case errors.Is(err, ErrTxAborted):
			return false, b.unstored(won, resps, s.failed(txCtx, "commit of the batch of", wonReqs[0], err))
		case errors.Is(err, ErrCommitUnknown) && s.observing():
			for _, r := range wonReqs {
				s.emit(ctx, Event{Kind: EventCommitUnknown, Scope: r.Scope, Key: r.Key, Err: err})
			}
		}
		return false, s.failed(txCtx, "commit of the batch of", wonReqs[0], err)
	}
	b.settleWon(won, resps, true, nil)
	if s.observing() {
		for j, r := range wonReqs {
			s.emit(ctx, Event{Kind: EventStored, Scope: r.Scope, Key: r.Key, Status: resps[j].Status, HeaderBytes: sizes[j][0], BodyBytes: sizes[j][1]})
		}
	}
	return false, nil
}

// settleWon records the won requests' results: their responses, committed
// or not, and why not when notStored is set.
func (b *batch[TTx]) settleWon(won []int, resps []Response, committed bool, notStored error) {
	for j, i := range won {
		b.res[i] = Result{Outcome: Won, Response: resps[j], Committed: committed, NotStored: notStored}
	}
}

// unstored is the batch's outcome when a failed statement aborted its
// transaction before fn answered (err matches ErrTxAborted): nothing was
// stored. Client errors (4xx) are fn's own answers to that failure, each
// returned with NotStored; any other answer reports work that did not
// happen, and the batch fails with err.
func (b *batch[TTx]) unstored(won []int, resps []Response, err error) error {
	for _, resp := range resps {
		if resp.Status < 400 || resp.Status >= 500 {
			return fmt.Errorf("idem: a batch of %d won keys: the function answered status %d after a statement of its transaction failed and aborted it; the work was rolled back and nothing stored: %w",
				len(won), resp.Status, err)
		}
	}
	b.settleWon(won, resps, false, err)
	return nil
}

// settleWaited answers the requests open after a claim that waited out its
// bound, from their committed records, read outside any transaction (as
// Do's waitedOut): Replay, Mismatch, or InFlight for a pending record. It
// returns those with no committed record, still undecided. The reads
// together wait at most Config.WaitBound.
func (b *batch[TTx]) settleWaited(ctx context.Context, open []int) []int {
	s := b.store
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WaitBound)
	defer cancel()
	var still []int
	for _, i := range open {
		req := b.reqs[i]
		rec, found, err := s.d.Lookup(ctx, s.pool, s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
		if err != nil || !found {
			still = append(still, i)
			continue
		}
		res, err := s.judge(req, rec)
		if err != nil {
			still = append(still, i)
			continue
		}
		b.res[i] = res
		s.claimed(ctx, req, res.Outcome, time.Time{}, false)
	}
	return still
}
