package idemqueue

import (
	"context"
	"fmt"
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

// Error returns the panic's value and the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("idemqueue: handler panicked: %v\n\n%s", e.Value, e.Stack)
}

// Unwrap returns the panic's value when it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// panicked decides on a handler's panic: retry with backoff, so a panic
// that a redelivery may not meet (a nil map of a half-started service, a
// race) passes, until the delivery count reaches MaxPanicDeliveries; then
// reject, so a poison message stops instead of crash-looping every
// consumer.
func (c *Consumer[TTx]) panicked(ctx context.Context, m Message, v any, stack []byte) Decision {
	perr := &PanicError{Value: v, Stack: stack}
	d := Decision{Action: Retry, Delay: c.cfg.RetryDelay(m.Delivery),
		Err: fmt.Errorf("idemqueue: message %q in %q, delivery %d: %w", m.ID, m.Queue, m.Delivery, perr)}
	if m.Delivery >= c.cfg.MaxPanicDeliveries {
		d = Decision{Action: Reject, Err: d.Err}
	}
	if c.cfg.Logger != nil {
		c.cfg.Logger.ErrorContext(ctx, "idemqueue: handler panicked; its transaction was rolled back",
			"queue", m.Queue, "id", m.ID, "delivery", m.Delivery, "action", d.Action.String(), "delay", d.Delay,
			"panic", fmt.Sprint(v), "stack", string(stack))
	}
	return d
}
