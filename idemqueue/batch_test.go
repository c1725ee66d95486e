package idemqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/sqlite"
)

// batchCalls records what a batch handler was called with.
type batchCalls struct {
	mu    sync.Mutex
	calls [][]string // the ids of each call
}

func (b *batchCalls) add(ms []idemqueue.Message) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	b.calls = append(b.calls, ids)
}

// handleBatch inserts every message's order with one statement and returns
// each one's order text; a message whose data is "poison" fails the
// batch with a permanent error, one whose data is "panic" panics.
func (o *orders) handleBatch(calls *batchCalls) idemqueue.BatchHandler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		calls.add(ms)
		var (
			q    strings.Builder
			args []any
		)
		q.WriteString(`INSERT INTO orders (msg, data) VALUES `)
		for i, m := range ms {
			switch string(m.Data) {
			case "poison":
				return nil, idemqueue.Permanent(fmt.Errorf("message %s is malformed", m.ID))
			case "panic":
				panic("message " + m.ID)
			}
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?)")
			args = append(args, m.Queue+"/"+m.ID, m.Data)
		}
		q.WriteString(` RETURNING id, msg`)
		rows, err := tx.QueryContext(ctx, q.String(), args...)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		byMsg := map[string]int64{}
		for rows.Next() {
			var (
				id  int64
				msg string
			)
			if err := rows.Scan(&id, &msg); err != nil {
				return nil, err
			}
			byMsg[msg] = id
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
		o.runs.Add(int64(len(ms)))
		results := make([][]byte, len(ms))
		for i, m := range ms {
			results[i] = fmt.Appendf(nil, "order %d", byMsg[m.Queue+"/"+m.ID])
		}
		return results, nil
	}
}

func actions(ds []idemqueue.Decision) string {
	var s []string
	for _, d := range ds {
		s = append(s, fmt.Sprintf("%v/%v", d.Action, d.Outcome))
	}
	return strings.Join(s, " ")
}

// TestProcessBatch: a batch's new messages run in one call of the handler
// and commit; a redelivered batch acks the done ones with their stored
// results and hands the handler only the new ones.
func TestProcessBatch(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	calls := &batchCalls{}
	first := []idemqueue.Message{msg("q", "m-3", "c"), msg("q", "m-1", "a"), msg("q", "m-2", "b")}
	ds := c.ProcessBatch(t.Context(), first, o.handleBatch(calls))
	for i, d := range ds {
		if d.Action != idemqueue.Ack || d.Outcome != idem.Won || d.Err != nil || !strings.HasPrefix(string(d.Result), "order ") {
			t.Fatalf("first delivery of %s: %+v; want Ack, Won with its order", first[i].ID, d)
		}
	}
	results := map[string]string{}
	for i, d := range ds {
		results[first[i].ID] = string(d.Result)
	}
	again := append([]idemqueue.Message{msg("q", "m-4", "d")}, first...)
	ds = c.ProcessBatch(t.Context(), again, o.handleBatch(calls))
	for i, d := range ds[1:] {
		if d.Action != idemqueue.Ack || d.Outcome != idem.Replay || string(d.Result) != results[first[i].ID] {
			t.Errorf("redelivery of %s: %+v; want Ack, Replay with %q", first[i].ID, d, results[first[i].ID])
		}
	}
	if ds[0].Action != idemqueue.Ack || ds[0].Outcome != idem.Won {
		t.Errorf("new m-4 beside redeliveries: %+v; want Ack, Won", ds[0])
	}
	want := [][]string{{"m-1", "m-2", "m-3"}, {"m-4"}}
	if !slices.EqualFunc(calls.calls, want, slices.Equal) {
		t.Errorf("handler calls %v; want %v (one per batch, only the won messages)", calls.calls, want)
	}
	if n := o.count(t); n != 4 {
		t.Errorf("%d orders; want 4", n)
	}
}

// TestProcessBatchPerMessage: the messages of one batch are decided one by
// one: a mismatch is rejected, a message without an id is rejected, a
// message twice in one batch is retried once, and the rest commit.
func TestProcessBatchPerMessage(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: 7 * time.Millisecond})
	calls := &batchCalls{}
	if ds := c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "used", "first")}, o.handleBatch(calls)); ds[0].Action != idemqueue.Ack {
		t.Fatalf("setup: %+v", ds[0])
	}
	ms := []idemqueue.Message{
		msg("q", "used", "other data"),
		msg("q", "", "no id"),
		msg("q", "twice", "x"),
		msg("q", "twice", "x"),
		msg("q", "fresh", "y"),
	}
	ds := c.ProcessBatch(t.Context(), ms, o.handleBatch(calls))
	checks := []struct {
		action  idemqueue.Action
		outcome idem.Outcome
		err     error
	}{
		{idemqueue.Reject, idem.Mismatch, idemqueue.ErrMismatch},
		{idemqueue.Reject, 0, idem.ErrInvalidKey},
		{idemqueue.Ack, idem.Won, nil},
		{idemqueue.Retry, idem.InFlight, idemqueue.ErrInFlight},
		{idemqueue.Ack, idem.Won, nil},
	}
	for i, want := range checks {
		d := ds[i]
		if d.Action != want.action || d.Outcome != want.outcome || (want.err == nil) != (d.Err == nil) || (want.err != nil && !errors.Is(d.Err, want.err)) {
			t.Errorf("message %d (%s %q): %v/%v %v; want %v/%v %v", i, ms[i].ID, ms[i].Data, d.Action, d.Outcome, d.Err, want.action, want.outcome, want.err)
		}
	}
	if ds[3].Delay != 7*time.Millisecond {
		t.Errorf("the second of one key: delay %v; want InFlightDelay", ds[3].Delay)
	}
	if n := o.count(t); n != 3 {
		t.Errorf("%d orders; want 3 (used, twice, fresh)", n)
	}
}

// TestProcessBatchPoison: a batch that fails as a whole (the handler's
// permanent error or panic for one message) commits nothing, and each of
// its messages is processed on its own: the poison one is rejected (or
// retried, for a panic) alone and the others commit, once.
func TestProcessBatchPoison(t *testing.T) {
	for _, poison := range []string{"poison", "panic"} {
		t.Run(poison, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			c := newConsumer(t, o, idemqueue.Config{RetryDelay: func(int) time.Duration { return time.Millisecond }})
			calls := &batchCalls{}
			ms := []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", poison), msg("q", "c", "z")}
			ds := c.ProcessBatch(t.Context(), ms, o.handleBatch(calls))
			if got := actions(ds); got != "ack/won reject/none ack/won" && got != "ack/won retry/none ack/won" {
				t.Fatalf("decisions %s; want the good ones acked and the %s one alone refused", got, poison)
			}
			var perr *idemqueue.PanicError
			switch poison {
			case "poison":
				if ds[1].Action != idemqueue.Reject || !idemqueue.IsPermanent(ds[1].Err) {
					t.Errorf("poison: %+v; want Reject with the permanent error", ds[1])
				}
			case "panic":
				if ds[1].Action != idemqueue.Retry || !errors.As(ds[1].Err, &perr) {
					t.Errorf("panic: %+v; want Retry with a *PanicError (first delivery)", ds[1])
				}
			}
			want := [][]string{{"a", "b", "c"}, {"a"}, {"b"}, {"c"}}
			if !slices.EqualFunc(calls.calls, want, slices.Equal) {
				t.Errorf("handler calls %v; want %v (the batch, then one by one)", calls.calls, want)
			}
			if n := o.count(t); n != 2 {
				t.Errorf("%d orders; want 2: the failed batch committed nothing", n)
			}
		})
	}
}

// TestProcessBatchResultCount: a handler that returns another number of
// results than messages fails the batch; nothing is committed for it.
func TestProcessBatchResultCount(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{RetryDelay: func(int) time.Duration { return time.Millisecond }})
	h := func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		for _, m := range ms {
			if _, err := tx.ExecContext(ctx, `INSERT INTO orders (msg, data) VALUES (?, ?)`, m.ID, m.Data); err != nil {
				return nil, err
			}
		}
		return [][]byte{[]byte("one"), []byte("too many")}, nil
	}
	ds := c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", "y"), msg("q", "c", "z")}, h)
	for i, d := range ds {
		if d.Action != idemqueue.Retry || d.Err == nil || !strings.Contains(d.Err.Error(), "results for 1 message") {
			t.Errorf("message %d: %+v; want Retry naming the result count", i, d)
		}
	}
	if n := o.count(t); n != 0 {
		t.Errorf("%d orders; want none", n)
	}
}

// TestProcessBatchStopping: when the context has ended, every message is
// retried at once and nothing runs.
func TestProcessBatchStopping(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	calls := &batchCalls{}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ds := c.ProcessBatch(ctx, []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", "y")}, o.handleBatch(calls))
	for i, d := range ds {
		if d.Action != idemqueue.Retry || d.Delay != 0 || !errors.Is(d.Err, context.Canceled) {
			t.Errorf("message %d: %+v; want an immediate Retry", i, d)
		}
	}
	if len(calls.calls) != 0 || o.count(t) != 0 {
		t.Errorf("calls %v, %d orders; want none", calls.calls, o.count(t))
	}
}

// TestBatchRedeliveryStorm: consumers processing overlapping batches of
// the same messages at once, in different orders, do each message's work
// exactly once, and every delivery ends acknowledged.
func TestBatchRedeliveryStorm(t *testing.T) {
	const messages, consumers, size = 40, 4, 10
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: time.Millisecond, RetryDelay: func(int) time.Duration { return time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := &batchCalls{}
	var wg sync.WaitGroup
	var acks atomic.Int64
	for w := range consumers {
		wg.Go(func() {
			var pending []idemqueue.Message
			for i := range messages {
				pending = append(pending, msg("q", fmt.Sprintf("m-%d", (i*(w+1)+w*7)%messages), "x"))
			}
			for round := 0; len(pending) > 0 && round < 500; round++ {
				n := min(size, len(pending))
				ds := c.ProcessBatch(ctx, pending[:n], o.handleBatch(calls))
				var retry []idemqueue.Message
				for i, d := range ds {
					switch d.Action {
					case idemqueue.Ack:
						acks.Add(1)
					case idemqueue.Reject:
						t.Errorf("%s: rejected: %v", pending[i].ID, d.Err)
						return
					default:
						retry = append(retry, pending[i])
					}
				}
				pending = append(retry, pending[n:]...)
				time.Sleep(time.Millisecond)
			}
			if len(pending) > 0 {
				t.Errorf("consumer %d: %d messages never acked", w, len(pending))
			}
		})
	}
	wg.Wait()
	if n := o.count(t); n != messages || acks.Load() != messages*consumers {
		t.Errorf("%d orders, %d acks; want %d orders, %d acks", n, acks.Load(), messages, messages*consumers)
	}
}

// TestHandleBatch: HandleBatch settles every delivery as decided, after
// the batch's commit, and an unreadable delivery alone is rejected.
func TestHandleBatch(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	calls := &batchCalls{}
	ok1 := &delivery{m: msg("q", "a", "x")}
	bad := &delivery{err: errors.New("no metadata")}
	ok2 := &extendingDelivery{delivery: delivery{m: msg("q", "b", "y")}, every: time.Millisecond}
	slow := func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		time.Sleep(20 * time.Millisecond)
		// Nothing is acknowledged before the commit.
		if ok1.settle != "" || ok2.settle != "" {
			return nil, fmt.Errorf("settled before the commit: %q %q", ok1.settle, ok2.settle)
		}
		return o.handleBatch(calls)(ctx, tx, ms)
	}
	ds, errs := c.HandleBatch(t.Context(), []idemqueue.Delivery{ok1, bad, ok2}, slow)
	if len(errs) != 3 || errs[0] != nil || errs[1] == nil || !strings.Contains(errs[1].Error(), "broker gone") || errs[2] != nil {
		t.Errorf("settle errors %v; want the reject's broker error alone", errs)
	}
	if got := actions(ds); got != "ack/won reject/none ack/won" {
		t.Errorf("decisions %s", got)
	}
	if ok1.settle != "ack" || ok2.settle != "ack" || !strings.Contains(bad.settle, "no metadata") {
		t.Errorf("settled %q, %q, %q", ok1.settle, bad.settle, ok2.settle)
	}
	if ok2.extends.Load() == 0 {
		t.Error("the extending delivery was never extended while the batch worked")
	}
	if len(calls.calls) != 1 || len(calls.calls[0]) != 2 {
		t.Errorf("handler calls %v; want one call with a and b", calls.calls)
	}
}

// TestProcessBatchTwoQueues: the same id on two queues is two messages,
// both processed in one batch.
func TestProcessBatchTwoQueues(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	calls := &batchCalls{}
	ds := c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q1", "m-1", "x"), msg("q2", "m-1", "x")}, o.handleBatch(calls))
	if got := actions(ds); got != "ack/won ack/won" {
		t.Errorf("decisions %s; want both acked as won", got)
	}
	if n := o.count(t); n != 2 {
		t.Errorf("%d orders; want 2", n)
	}
}

// TestProcessBatchStoreFailure: when the database fails the batch after
// the handler ran (here its completion loses the connection on every
// attempt), every message is retried and none is processed again on its
// own: the database would fail each of them too. A handler that ends the
// transaction for one poison message, or a result too large to store,
// fails that message only.
func TestProcessBatchStoreFailure(t *testing.T) {
	var (
		fail  atomic.Bool
		after atomic.Int64
	)
	fail.Store(true)
	c := newFailing(t, "complete", &fail, &after, idem.Config{})
	calls := &batchCalls{}
	noop := func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		calls.add(ms)
		return nil, nil
	}
	ds := c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", "y")}, noop)
	if got := actions(ds); got != "retry/none retry/none" || !errors.Is(ds[0].Err, idem.ErrUnavailable) {
		t.Errorf("decisions %s (%v); want both retried with the database's error", got, ds[0].Err)
	}
	for _, call := range calls.calls {
		if len(call) != 2 {
			t.Errorf("handler calls %v: a message was processed again on its own after a store failure", calls.calls)
			break
		}
	}
	if after.Load() == 0 {
		t.Error("no completion failed: the test did not reach the store failure")
	}

	o := newOrders(t, idem.Config{})
	c = newConsumer(t, o, idemqueue.Config{RetryDelay: func(int) time.Duration { return time.Millisecond }})
	calls = &batchCalls{}
	ends := o.handleBatch(calls)
	rollsBack := func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		for _, m := range ms {
			if string(m.Data) == "ends" {
				calls.add(ms)
				return nil, tx.Rollback()
			}
		}
		return ends(ctx, tx, ms)
	}
	ds = c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", "ends")}, rollsBack)
	if got := actions(ds); got != "ack/won retry/none" || !errors.Is(ds[1].Err, idem.ErrTxDone) {
		t.Errorf("decisions %s (%v); want the good one acked and the one whose handler ended the transaction retried", got, ds[1].Err)
	}
	if want := [][]string{{"a", "b"}, {"a"}, {"b"}}; !slices.EqualFunc(calls.calls, want, slices.Equal) {
		t.Errorf("handler calls %v; want %v (the batch, then one by one)", calls.calls, want)
	}
	if n := o.count(t); n != 1 {
		t.Errorf("%d orders; want 1", n)
	}

	o = newOrders(t, idem.Config{MaxBody: 16})
	c = newConsumer(t, o, idemqueue.Config{})
	big := func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		out := make([][]byte, len(ms))
		for i, m := range ms {
			out[i] = []byte("ok")
			if string(m.Data) == "big" {
				out[i] = []byte(strings.Repeat("x", 100))
			}
		}
		return out, nil
	}
	ds = c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "a", "small"), msg("q", "b", "big")}, big)
	if got := actions(ds); got != "ack/won reject/none" || !errors.Is(ds[1].Err, idem.ErrTooLarge) {
		t.Errorf("decisions %s (%v); want the small one acked and the big one rejected as too large", got, ds[1].Err)
	}
}

// failing is a SQLite driver whose claims (at "claim") or completions (at
// "complete") fail as with a lost connection once fail is set, counting
// the claims or completions made after that.
type failing struct {
	*sqlite.Driver
	at    string
	fail  *atomic.Bool
	after *atomic.Int64
}

func (d failing) Dialect() dialect.Dialect { return failingDialect{d.Driver.Dialect(), d} }

type failingDialect struct {
	dialect.Dialect
	d failing
}

// lost reports whether the statement at fails, counting it when it does.
func (d failing) lost(at string) error {
	if d.at != at || !d.fail.Load() {
		return nil
	}
	d.after.Add(1)
	return dialect.Classified(dialect.ErrUnavailable, errors.New("test: connection lost"))
}

func (d failingDialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	if err := d.d.lost("claim"); err != nil {
		return dialect.ClaimResult{}, err
	}
	return d.Dialect.Claim(ctx, q, t, a)
}

func (d failingDialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	if err := d.d.lost("complete"); err != nil {
		return err
	}
	return d.Dialect.Complete(ctx, q, t, a)
}

// newFailing is a consumer "orders" on a store over a failing driver.
func newFailing(t *testing.T, at string, fail *atomic.Bool, after *atomic.Int64, cfg idem.Config) *idemqueue.Consumer[*sql.Tx] {
	t.Helper()
	lite := idemtest.NewSQLite(t, cfg)
	store, err := idem.New[*sql.Tx](failing{lite.Driver, at, fail, after}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := idemqueue.New(store, idemqueue.Config{Name: "orders", RetryDelay: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestProcessBatchEarlierHandlerError: when the handler's retryable error
// made the store try the batch again and that attempt failed in the
// database before the handler ran, the batch failed as the database's:
// every message is retried and none is processed again on its own (which
// would meet the same database once per message). An earlier attempt's
// handler error does not decide.
func TestProcessBatchEarlierHandlerError(t *testing.T) {
	var (
		fail  atomic.Bool
		after atomic.Int64
	)
	c := newFailing(t, "claim", &fail, &after, idem.Config{MaxAttempts: 2})
	calls := 0
	h := func(context.Context, *sql.Tx, []idemqueue.Message) ([][]byte, error) {
		calls++
		fail.Store(true)
		return nil, fmt.Errorf("test: the handler's statement: %w", idem.ErrDeadlock)
	}
	ds := c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", "y"), msg("q", "c", "z")}, h)
	for i, d := range ds {
		if d.Action != idemqueue.Retry || !errors.Is(d.Err, idem.ErrUnavailable) {
			t.Errorf("message %d: %+v; want Retry with the database's error", i, d)
		}
	}
	if calls != 1 || after.Load() != 1 {
		t.Errorf("%d handler calls, %d claims after the database failed; want 1 and 1: no message processed again on its own", calls, after.Load())
	}
}
