package idemqueue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Action is what to do with a delivery.
type Action int

const (
	// Ack: the message's work is committed, now or by an earlier delivery.
	// Acknowledge it.
	Ack Action = iota + 1
	// Retry: nothing was committed, or another consumer holds the message.
	// Leave it for redelivery after Decision.Delay: a negative
	// acknowledgement with a delay (JetStream NakWithDelay), a requeue, or
	// not committing the offset.
	Retry
	// Reject: no delivery of this message can succeed (the same id with
	// other data, a permanent error, an unusable key). Terminate it or
	// route it to a dead-letter queue.
	Reject
)

// String returns "ack", "retry" or "reject".
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Decision is what Process decided for one delivery.
type Decision struct {
	// Action says what to do with the delivery.
	Action Action
	// Delay is how long to wait before a redelivery, for Retry.
	Delay time.Duration
	// Outcome is what the store found: idem.Won (the work ran now),
	// idem.Replay (it ran before), idem.Mismatch or idem.InFlight; zero
	// when the transaction failed.
	Outcome idem.Outcome
	// Result is the handler's result, from this run (Won) or stored by the
	// first (Replay). Empty unless Action is Ack.
	Result []byte
	// Err says why the delivery is not acknowledged; nil for Ack. It
	// matches ErrMismatch, ErrInFlight, ErrPermanent, or wraps the
	// handler's or the store's error.
	Err error
}

// Errors in Decision.Err. Test them with errors.Is.
var (
	// ErrMismatch: the message's key was already used with other data (a
	// publisher reused an id); the message is rejected.
	ErrMismatch = errors.New("idemqueue: message id already used with other data")
	// ErrInFlight: another consumer holds the message's key; the message
	// is left for redelivery.
	ErrInFlight = errors.New("idemqueue: message is being processed elsewhere")
	// ErrPermanent marks handler errors that no redelivery can cure (see
	// Permanent).
	ErrPermanent = errors.New("idemqueue: permanent failure")
)

// Permanent wraps err so that the consumer rejects the message instead of
// retrying it. The result matches ErrPermanent and err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string   { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() []error { return []error{ErrPermanent, e.err} }

// IsPermanent is the default Config.Permanent: err matches ErrPermanent.
func IsPermanent(err error) bool { return errors.Is(err, ErrPermanent) }

// Delivery is a delivered message and the means to settle it: what an
// adapter for a broker provides (package idemnats for NATS JetStream; a
// RabbitMQ adapter maps Retry to Nack with requeue, or to a delayed retry
// queue, and Reject to Nack without requeue, which dead-letters; a Kafka
// adapter commits the offset on Ack and Reject, after publishing a rejected
// record to a dead-letter topic, and seeks back on Retry).
type Delivery interface {
	// Message returns the message; an error rejects the delivery (it
	// cannot be identified, so it cannot be processed safely).
	Message() (Message, error)
	// Ack acknowledges the message: it is done.
	Ack(ctx context.Context) error
	// Retry leaves the message for redelivery after delay.
	Retry(ctx context.Context, delay time.Duration) error
	// Reject ends the message's deliveries, because of reason.
	Reject(ctx context.Context, reason error) error
}

// Handle processes d with Process and settles it as decided, within
// Config.SettleTimeout even when ctx has ended. It returns the decision and
// the error of settling it. A failed Ack is harmless: the redelivery finds
// the work done and acknowledges it then.
func (c *Consumer[TTx]) Handle(ctx context.Context, d Delivery, h Handler[TTx]) (Decision, error) {
	var dec Decision
	m, err := d.Message()
	if err != nil {
		dec = Decision{Action: Reject, Err: fmt.Errorf("idemqueue: read the delivery: %w", err)}
	} else {
		dec = c.Process(ctx, m, h)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SettleTimeout)
	defer cancel()
	switch dec.Action {
	case Ack:
		err = d.Ack(sctx)
	case Retry:
		err = d.Retry(sctx, dec.Delay)
	default:
		err = d.Reject(sctx, dec.Err)
	}
	if err != nil {
		return dec, fmt.Errorf("idemqueue: %v message %q: %w", dec.Action, m.ID, err)
	}
	return dec, nil
}
