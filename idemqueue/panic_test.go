package idemqueue_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
)

// lockedBuffer is a log destination safe for the consumer's goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{} }

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// poison inserts an order and then panics, as a handler does on a message
// it cannot take.
func poison(o *orders, value any) idemqueue.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		if _, err := o.handle(ctx, tx, m); err != nil {
			return nil, err
		}
		panic(value)
	}
}

// TestPanic: a handler's panic does not unwind into the caller; its work
// is rolled back; the message is retried with backoff until the delivery
// that reaches MaxPanicDeliveries, then rejected; the decision's error is a
// *PanicError with the value and the stack, and the log has both.
func TestPanic(t *testing.T) {
	logs := newLockedBuffer()
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{
		MaxPanicDeliveries: 3,
		Logger:             slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	for _, tc := range []struct {
		delivery int
		action   idemqueue.Action
	}{
		{0, idemqueue.Retry}, // the broker does not count: the broker's limit applies
		{1, idemqueue.Retry},
		{2, idemqueue.Retry},
		{3, idemqueue.Reject},
		{7, idemqueue.Reject},
	} {
		m := msg("q", "poison-1", "x")
		m.Delivery = tc.delivery
		d := c.Process(t.Context(), m, poison(o, "nil map in the pricing table"))
		wantDelay := idemqueue.DefaultRetryDelay(tc.delivery)
		if tc.action == idemqueue.Reject {
			wantDelay = 0
		}
		if d.Action != tc.action || d.Delay != wantDelay || len(d.Result) != 0 {
			t.Errorf("delivery %d: %+v, want %v after %v", tc.delivery, d, tc.action, wantDelay)
		}
		var perr *idemqueue.PanicError
		if !errors.As(d.Err, &perr) {
			t.Fatalf("delivery %d: error %v is not a *PanicError", tc.delivery, d.Err)
		}
		if perr.Value != "nil map in the pricing table" || !strings.Contains(string(perr.Stack), "panic_test.go") {
			t.Errorf("delivery %d: panic value %v, stack:\n%s\nwant the value and a stack through the handler", tc.delivery, perr.Value, perr.Stack)
		}
		if n := o.count(t); n != 0 {
			t.Fatalf("delivery %d: %d orders committed by a handler that panicked, want 0", tc.delivery, n)
		}
	}
	out := logs.String()
	if strings.Count(out, "handler panicked") != 5 || !strings.Contains(out, "level=ERROR") ||
		!strings.Contains(out, "nil map in the pricing table") || !strings.Contains(out, "panic_test.go") {
		t.Errorf("log, want five errors with the value and the stack:\n%s", out)
	}
	// The key was not left claimed: a fixed handler processes the message.
	if d := c.Process(t.Context(), msg("q", "poison-1", "x"), o.handle); d.Action != idemqueue.Ack || d.Outcome != idem.Won {
		t.Errorf("after the panics: %+v, want the work done now", d)
	}
}

// TestPanicWithError: a panic with an error value is visible to errors.Is
// through the decision's error; the default threshold is
// DefaultMaxPanicDeliveries.
func TestPanicWithError(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	m := msg("q", "poison-2", "x")
	m.Delivery = idemqueue.DefaultMaxPanicDeliveries - 1
	if d := c.Process(t.Context(), m, poison(o, fs.ErrPermission)); d.Action != idemqueue.Retry || !errors.Is(d.Err, fs.ErrPermission) {
		t.Errorf("%+v, want retry with an error matching the panic's", d)
	}
	m.Delivery++
	if d := c.Process(t.Context(), m, poison(o, fs.ErrPermission)); d.Action != idemqueue.Reject {
		t.Errorf("delivery %d: %+v, want reject", m.Delivery, d)
	}
	// A panic in the key function is caught as well.
	kc := newConsumer(t, o, idemqueue.Config{Name: "keys", Key: func(idemqueue.Message) (string, error) { panic("bad key") }})
	var perr *idemqueue.PanicError
	if d := kc.Process(t.Context(), msg("q", "m", "x"), o.handle); d.Action != idemqueue.Retry || !errors.As(d.Err, &perr) {
		t.Errorf("panicking key function: %+v", d)
	}
	if n := o.count(t); n != 0 {
		t.Errorf("%d orders, want 0", n)
	}
}
