package idemqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/idemkit/idem"
)

// BatchHandler does the work of several messages in tx, the one
// transaction that records them all, and returns one optional result per
// message, in the order of ms (or nil for no results at all). ms holds
// only the messages whose keys the batch won, in the store's (scope, key)
// order, never empty: a redelivery of a message already done is
// acknowledged without reaching it. Write their effects with as few
// statements as you can (one multi-row INSERT, say): that is where a
// batch saves.
//
// Returning an error rolls the whole batch back; ProcessBatch then
// processes each of its messages again on its own, so the handler may be
// called once more with one message at a time. Wrap an error that no
// redelivery of one message can cure with Permanent, as with Handler.
type BatchHandler[TTx any] func(ctx context.Context, tx TTx, ms []Message) (results [][]byte, err error)

// ProcessBatch is Process for many messages in one transaction: it claims
// every message's key with one statement where the backend can
// (idem.Store.DoBatch), runs h once with the messages it won, stores each
// one's result with the work and commits once. It returns one Decision per
// message, in the order of ms, with Process's meaning: Ack for a message
// done now or before, Reject for a mismatch or a message without a usable
// key, Retry after InFlightDelay for one whose key another consumer holds
// (ProcessBatch does not wait for it, as Handle does for one delivery).
//
// A batch fails as a whole or not at all. When the database fails idem's
// own statements of the batch (out of reach or read-only, a lock or
// statement timeout, a COMMIT's outcome unknown or out of time, contention
// beyond the store's retries), every message is retried after RetryDelay
// (a redelivery of one whose COMMIT's outcome was unknown finds its
// record); when ctx ends, at once. Any other failure is taken for the
// work's: h returned an error (even one the database gave its own
// statement) or panicked, or its work failed (a result too large to
// store, a statement of h that failed and aborted the transaction
// although h returned, a transaction h ended, a COMMIT that refused the
// work). ProcessBatch then processes each of its messages again on its
// own (Process, with h called on one message), so one poison message is
// rejected or retried alone while the others go through. Nothing of the
// batch committed, unless h committed the transaction itself: its claims
// are then pending, and each message is retried as in flight until they
// expire.
//
// Messages with the same key in one call: the first is processed and the
// others are retried after InFlightDelay (ErrInFlight), so a redelivery
// finds the first one's record. More than idem.MaxBatch messages are
// processed in batches of idem.MaxBatch.
func (c *Consumer[TTx]) ProcessBatch(ctx context.Context, ms []Message, h BatchHandler[TTx]) []Decision {
	out := make([]Decision, len(ms))
	if h == nil {
		for i := range out {
			out[i] = Decision{Action: Reject, Err: errors.New("idemqueue: nil handler")}
		}
		return out
	}
	for lo := 0; lo < len(ms); lo += idem.MaxBatch {
		hi := min(lo+idem.MaxBatch, len(ms))
		c.processBatch(ctx, ms[lo:hi], h, out[lo:hi])
	}
	return out
}

// processBatch decides ms into out (of the same length).
func (c *Consumer[TTx]) processBatch(ctx context.Context, ms []Message, h BatchHandler[TTx], out []Decision) {
	var (
		reqs  []idem.Request
		at    []int // at[j]: the index in ms of reqs[j]
		index = make(map[batchKey]int, len(ms))
	)
	for i, m := range ms {
		req, refused := c.request(ctx, m)
		if refused != nil {
			out[i] = *refused
			continue
		}
		if _, dup := index[batchKey{req.Scope, req.Key}]; dup {
			out[i] = Decision{Action: Retry, Delay: c.cfg.InFlightDelay, Outcome: idem.InFlight,
				Err: fmt.Errorf("%w: key %q in %q: the same message twice in one batch", ErrInFlight, req.Key, m.Queue)}
			continue
		}
		if c.cfg.FormerScopes {
			res, found, err := c.store.Answered(ctx, formerScope(c.cfg.Name, m.Queue), req.Key, req.Fingerprint)
			if err != nil {
				out[i] = c.failed(ctx, m, req.Key, err)
				continue
			}
			if found {
				out[i] = c.decide(m, req.Key, res)
				continue
			}
		}
		index[batchKey{req.Scope, req.Key}] = len(reqs)
		reqs = append(reqs, req)
		at = append(at, i)
	}
	if len(reqs) == 0 {
		return
	}
	results, err := c.store.DoBatch(ctx, reqs, func(ctx context.Context, tx TTx, won []idem.Request) ([]idem.Response, error) {
		wonMsgs := make([]Message, len(won))
		for j, r := range won {
			wonMsgs[j] = ms[at[index[batchKey{r.Scope, r.Key}]]]
		}
		bodies, err := c.runBatch(ctx, tx, wonMsgs, h)
		if err != nil {
			return nil, &handlerError{err}
		}
		resps := make([]idem.Response, len(won))
		for j := range resps {
			resps[j] = idem.Response{Status: idem.NoStatus}
			if bodies != nil {
				resps[j].Body = bodies[j]
			}
		}
		return resps, nil
	})
	switch {
	case err != nil && (ctx.Err() != nil || storeFailure(err)):
		// The consumer is stopping, or the database failed the batch
		// (nothing committed, or for ErrCommitUnknown perhaps all of it):
		// every message is retried, and its redelivery finds its record
		// or does its work. Processing each again now would meet the same
		// database N times over.
		for j, i := range at {
			out[i] = c.failed(ctx, ms[i], reqs[j].Key, err)
		}
	case err != nil:
		// The handler failed the batch, or its work did: a result the
		// store refused, a statement of the handler that failed and
		// aborted the transaction although the handler answered, a COMMIT
		// that refused the work (a deferred constraint). Nothing of it
		// committed: each message on its own, so a poison one fails alone.
		for _, i := range at {
			out[i] = c.Process(ctx, ms[i], func(ctx context.Context, tx TTx, m Message) ([]byte, error) {
				bodies, err := h(ctx, tx, []Message{m})
				if err != nil || bodies == nil {
					return nil, err
				}
				if len(bodies) != 1 {
					return nil, fmt.Errorf("idemqueue: batch handler returned %d results for 1 message", len(bodies))
				}
				return bodies[0], nil
			})
		}
	default:
		for j, res := range results {
			out[at[j]] = c.decide(ms[at[j]], reqs[j].Key, res)
		}
	}
}

// handlerError marks the handler's own error in what DoBatch returns, so
// that it is told apart from the store's whatever it wraps; DoBatch
// returns its last attempt's error, so the mark is never an earlier
// attempt's.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// storeFailure reports whether err, failing a whole batch, is the
// database's or the store's rather than the work's: the database out of
// reach or read-only, a lock or statement timeout, a COMMIT whose outcome
// is unknown or that ran out of time, contention that outlasted the
// store's retries, a claim lost in a cluster, a store misconfigured. Every
// message of the batch would meet it again on its own. Never one: the
// handler's own errors, whatever they wrap, a statement of the handler
// that aborted the transaction, a transaction the handler ended, and any
// error idem cannot place (a COMMIT's deferred constraint, say): a poison
// message must fail alone, and processing each message again costs one
// Process per message (with its own retries).
func storeFailure(err error) bool {
	var he *handlerError
	if errors.As(err, &he) || errors.Is(err, idem.ErrTxAborted) {
		return false // the work's: ErrTxAborted also matches ErrBadTx
	}
	for _, target := range []error{
		idem.ErrUnavailable, idem.ErrReadOnly, idem.ErrCommitUnknown, idem.ErrCommitTimeout,
		idem.ErrRetriesExhausted, idem.ErrSerialization, idem.ErrDeadlock, idem.ErrLockTimeout,
		idem.ErrNotClaimed, idem.ErrInvalidConfig, idem.ErrSchemaNewer,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// batchKey is a request's scope and key: what tells a batch's requests
// apart (the same id on two queues is two messages).
type batchKey struct{ scope, key string }

// runBatch runs h on ms, turning a panic into a *PanicError and checking
// that it returned one result per message (or none).
func (c *Consumer[TTx]) runBatch(ctx context.Context, tx TTx, ms []Message, h BatchHandler[TTx]) (bodies [][]byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			bodies, err = nil, &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	bodies, err = h(ctx, tx, ms)
	if err == nil && bodies != nil && len(bodies) != len(ms) {
		return nil, fmt.Errorf("idemqueue: batch handler returned %d results for %d messages", len(bodies), len(ms))
	}
	return bodies, err
}

// HandleBatch is Handle for many deliveries: it processes their messages
// together (ProcessBatch: one transaction, one decision per message) and
// then settles each delivery as decided, each within
// Config.SettleTimeout, so no message is acknowledged before the commit
// that holds its work. It returns the decisions and the errors of
// settling them, both in the order of ds (settleErrs[i] is nil when ds[i]
// settled; as in Handle, a failed Ack is harmless). A delivery whose Message fails is decided as in Handle and
// left out of the batch.
//
// Deliveries that are Extenders are extended while the batch works.
// Unlike Handle, HandleBatch does not wait for a message whose key is in
// flight elsewhere: it is retried after InFlightDelay.
func (c *Consumer[TTx]) HandleBatch(ctx context.Context, ds []Delivery, h BatchHandler[TTx]) (decisions []Decision, settleErrs []error) {
	out := make([]Decision, len(ds))
	msgs := make([]Message, len(ds))
	var (
		batch []Message
		at    []int
	)
	for i, d := range ds {
		m, err := d.Message()
		msgs[i] = m
		if err != nil {
			out[i] = c.unreadable(m, err)
			continue
		}
		batch = append(batch, m)
		at = append(at, i)
	}
	if len(batch) > 0 {
		var stops []func()
		for _, i := range at {
			if e, ok := ds[i].(Extender); ok && e.ExtendEvery() > 0 {
				stops = append(stops, c.keepAlive(ctx, msgs[i], e))
			}
		}
		decided := func() []Decision {
			defer func() {
				for _, stop := range stops {
					stop()
				}
			}()
			return c.ProcessBatch(ctx, batch, h)
		}()
		for j, i := range at {
			out[i] = decided[j]
		}
	}
	settleErrs = make([]error, len(ds))
	for i, d := range ds {
		settleErrs[i] = c.settle(ctx, d, msgs[i], out[i])
	}
	return out, settleErrs
}
