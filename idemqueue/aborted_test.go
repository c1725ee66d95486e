package idemqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/aborting"
)

// abortingConsumer is a consumer on SQLite whose every completion fails as
// in a transaction a failed statement aborted (internal/aborting), and the
// database under it.
func abortingConsumer(t *testing.T) (*idemtest.SQLite, *idemqueue.Consumer[*sql.Tx]) {
	t.Helper()
	lite := idemtest.NewSQLite(t, idem.Config{})
	store, err := idem.New[*sql.Tx](aborting.Driver{Driver: lite.Driver}, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := idemqueue.New(store, idemqueue.Config{Name: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	return lite, c
}

// TestHandlerAfterAbortedTransaction: a handler that returns success after
// a statement of its transaction failed and aborted it did no work: the
// message is not acked but handed back for redelivery (like a handler's
// error), with an error matching idem.ErrTxAborted, and nothing is stored.
func TestHandlerAfterAbortedTransaction(t *testing.T) {
	lite, c := abortingConsumer(t)
	runs := 0
	d := c.Process(t.Context(), msg("orders.new", "m-1", `{"item":1}`), func(context.Context, *sql.Tx, idemqueue.Message) ([]byte, error) {
		runs++
		return []byte("order 1"), nil
	})
	if d.Action != idemqueue.Retry || !errors.Is(d.Err, idem.ErrTxAborted) {
		t.Fatalf("Process: %+v, want Retry with an error matching idem.ErrTxAborted", d)
	}
	if runs != 1 {
		t.Errorf("the handler ran %d times, want once", runs)
	}
	if n, err := lite.Store.Counts(t.Context(), ""); err != nil || n.Total() != 0 {
		t.Errorf("Counts: %+v, %v; want no record stored", n, err)
	}
}

// TestBatchHandlerAfterAbortedTransaction: a batch whose handler returned
// success after a statement of its transaction failed and aborted it
// failed by its work, not by the database: each message is processed
// again on its own, so that a poison one is handed back alone. Here every
// transaction is aborted, so each is handed back, with nothing stored.
func TestBatchHandlerAfterAbortedTransaction(t *testing.T) {
	lite, c := abortingConsumer(t)
	calls := &batchCalls{}
	ds := c.ProcessBatch(t.Context(), []idemqueue.Message{msg("q", "a", "x"), msg("q", "b", "y")},
		func(_ context.Context, _ *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
			calls.add(ms)
			return nil, nil
		})
	for i, d := range ds {
		if d.Action != idemqueue.Retry || !errors.Is(d.Err, idem.ErrTxAborted) {
			t.Errorf("message %d: %+v; want Retry with an error matching idem.ErrTxAborted", i, d)
		}
	}
	want := [][]string{{"a", "b"}, {"a"}, {"b"}}
	if !slices.EqualFunc(calls.calls, want, slices.Equal) {
		t.Errorf("handler calls %v; want %v (the batch, then one by one)", calls.calls, want)
	}
	if n, err := lite.Store.Counts(t.Context(), ""); err != nil || n.Total() != 0 {
		t.Errorf("Counts: %+v, %v; want no record stored", n, err)
	}
}
