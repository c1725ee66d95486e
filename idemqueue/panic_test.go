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
	"sync/atomic"
	"testing"
	"time"

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
		// The error's text is what a broker keeps as a reject's reason
		// (JetStream's TermWithReason): the value, not the stack.
		if text := d.Err.Error(); len(text) > 300 || strings.Contains(text, "goroutine ") {
			t.Errorf("delivery %d: error text of %d bytes holds the stack, want it short: %s", tc.delivery, len(text), text)
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

// panicAfterCommit is a DoObserver whose end-of-Do hook panics, while
// armed, once the work committed: a panic no rollback follows.
type panicAfterCommit struct{ armed atomic.Bool }

func (*panicAfterCommit) Observe(context.Context, idem.Event) {}

func (p *panicAfterCommit) StartDo(ctx context.Context, _ idem.Request) (context.Context, func(idem.Result, error)) {
	return ctx, func(res idem.Result, _ error) {
		if res.Committed && p.armed.Load() {
			panic("the metrics exporter fell over")
		}
	}
}

// TestPanicAfterCommitIsRetried: a panic after the store committed the
// work (here: its observer's) leaves the outcome unknown: it is retried,
// never rejected, even past MaxPanicDeliveries, and the redelivery finds
// the work done.
func TestPanicAfterCommitIsRetried(t *testing.T) {
	obs := &panicAfterCommit{}
	obs.armed.Store(true)
	o := newOrders(t, idem.Config{Observer: obs})
	c := newConsumer(t, o, idemqueue.Config{MaxPanicDeliveries: 1})
	m := msg("q", "after-commit", "x")
	m.Delivery = 5
	d := c.Process(t.Context(), m, o.handle)
	var perr *idemqueue.PanicError
	if d.Action != idemqueue.Retry || !errors.As(d.Err, &perr) {
		t.Fatalf("panic after the commit: %+v, want a retry carrying the *PanicError", d)
	}
	if n := o.count(t); n != 1 {
		t.Fatalf("%d orders, want the committed one", n)
	}
	obs.armed.Store(false)
	m.Delivery++
	if d := c.Process(t.Context(), m, o.handle); d.Action != idemqueue.Ack || d.Outcome != idem.Replay {
		t.Errorf("the redelivery: %+v, want an ack of the replay", d)
	}
}

// TestPanicWithPanickingRetryDelay: deciding on a panic never panics: a
// RetryDelay that panics as well gives the default delay.
func TestPanicWithPanickingRetryDelay(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{RetryDelay: func(int) time.Duration { panic("no delay table") }})
	m := msg("q", "delay-panics", "x")
	m.Delivery = 1
	d := c.Process(t.Context(), m, poison(o, "boom"))
	if d.Action != idemqueue.Retry || d.Delay != idemqueue.DefaultRetryDelay(1) {
		t.Errorf("%+v, want a retry after the default delay", d)
	}
}
