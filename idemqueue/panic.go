package idemqueue

import (
	"context"
	"fmt"
	"time"
)

// PanicError is the Decision.Err of a delivery whose handler panicked: the
// transaction was rolled back and nothing was committed. Find it with
// errors.As; when the panic's value is an error, errors.Is sees through to
// it.
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
	// Stack is the panicking goroutine's stack, as runtime/debug.Stack
	// prints it.
	Stack []byte
}

// Error returns the panic's value; the stack is in Stack (and the log), so
// that a reason a broker keeps (a terminated message's) stays short.
func (e *PanicError) Error() string {
	return fmt.Sprintf("idemqueue: handler panicked: %v", e.Value)
}

// Unwrap returns the panic's value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// panicked decides on a panic: retry with backoff, so a panic that a
// redelivery may not meet (a nil map of a half-started service, a race)
// passes, until the delivery count reaches MaxPanicDeliveries; then, when
// nothing was committed (rolledBack: the handler's panic, or the key's),
// reject, so a poison message stops instead of crash-looping every
// consumer. A panic whose outcome is unknown is always retried.
func (c *Consumer[TTx]) panicked(ctx context.Context, m Message, perr *PanicError, rolledBack bool) Decision {
	d := Decision{Action: Retry, Delay: c.retryDelay(m.Delivery),
		Err: fmt.Errorf("idemqueue: message %q in %q, delivery %d: %w", m.ID, m.Queue, m.Delivery, perr)}
	if rolledBack && m.Delivery >= c.cfg.MaxPanicDeliveries {
		d = Decision{Action: Reject, Err: d.Err}
	}
	if c.cfg.Logger != nil {
		msg := "idemqueue: handler panicked; its transaction was rolled back"
		if !rolledBack {
			msg = "idemqueue: panic while the store finished the work; whether it committed is unknown, so it is retried"
		}
		c.cfg.Logger.ErrorContext(ctx, msg,
			"queue", m.Queue, "id", m.ID, "delivery", m.Delivery, "action", d.Action.String(), "delay", d.Delay,
			"panic", fmt.Sprint(perr.Value), "stack", string(perr.Stack))
	}
	return d
}

// retryDelay is Config.RetryDelay, or its default when that panics too
// (the decision on a panic must not panic).
func (c *Consumer[TTx]) retryDelay(delivery int) (d time.Duration) {
	defer func() {
		if recover() != nil {
			d = DefaultRetryDelay(delivery)
		}
	}()
	return c.cfg.RetryDelay(delivery)
}
