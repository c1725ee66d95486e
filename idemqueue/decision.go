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
	// Record is the key's record as the store found it, for Replay,
	// Mismatch and InFlight; zero when none was read (Won, a failed
	// transaction, an InFlight whose wait ran out while no committed
	// record held the key). A pending record's LeaseUntil says how long
	// its holder keeps it.
	Record idem.Record
	// Err says why the delivery is not acknowledged; nil for Ack. It
	// matches ErrMismatch, ErrInFlight, ErrBusy, ErrPermanent, is a
	// *PanicError, or wraps the handler's or the store's error.
	Err error
}

// Errors in Decision.Err. Test them with errors.Is.
var (
	// ErrMismatch: the message's key was already used with other data (a
	// publisher reused an id); the message is rejected.
	ErrMismatch = errors.New("idemqueue: message id already used with other data")
	// ErrInFlight: another consumer holds the message's key: the store
	// found its pending record, or waited WaitBound for a transaction
	// still running that holds the key's row. The message is left for
	// redelivery.
	ErrInFlight = errors.New("idemqueue: message is being processed elsewhere")
	// ErrBusy: the database itself was busy (idem.Result.Busy): on SQLite
	// another transaction held the write lock longer than
	// idem.Config.WaitBound and no committed record holds the key, so
	// nobody is known to process the message. It is retried shortly
	// (InFlightDelay); Handle first waits and processes it again while it
	// can keep the delivery alive.
	ErrBusy = errors.New("idemqueue: the database was busy past the wait bound")
	// ErrPermanent marks handler errors that no redelivery can cure (see
	// Permanent).
	ErrPermanent = errors.New("idemqueue: permanent failure")
	// ErrTemporary marks an error of Delivery.Message that a later
	// delivery may not meet (see Temporary): Handle retries the delivery
	// instead of rejecting it.
	ErrTemporary = errors.New("idemqueue: temporary failure")
	// ErrNotSettled: the broker confirmed a settle that did not settle the
	// message, for instance an ack of a message the broker had already
	// dropped after its delivery limit. An adapter's settle methods return
	// it (wrapped with the details); Handle passes it on. The work may
	// have committed although the broker counts the message as failed.
	ErrNotSettled = errors.New("idemqueue: the broker did not settle the message")
)

// Temporary wraps an error of Delivery.Message so that Handle retries the
// delivery (after RetryDelay) instead of rejecting it: the message could
// not be identified now (its broker did not answer), but may be later. The
// result matches ErrTemporary and err.
func Temporary(err error) error {
	if err == nil {
		return nil
	}
	return &temporaryError{err}
}

type temporaryError struct{ err error }

func (e *temporaryError) Error() string   { return "temporary: " + e.err.Error() }
func (e *temporaryError) Unwrap() []error { return []error{ErrTemporary, e.err} }

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
// record to a dead-letter topic, and seeks back on Retry). A broker whose
// deliveries expire unless settled in time (JetStream's AckWait, SQS's
// visibility timeout) should make its Delivery an Extender too.
type Delivery interface {
	// Message returns the message; an error rejects the delivery (it
	// cannot be identified, so it cannot be processed safely), unless it
	// matches ErrTemporary: then the delivery is retried. With an error,
	// the Message may still carry Queue, ID and Delivery for the log and
	// the retry's backoff.
	Message() (Message, error)
	// Ack acknowledges the message: it is done.
	Ack(ctx context.Context) error
	// Retry leaves the message for redelivery after delay.
	Retry(ctx context.Context, delay time.Duration) error
	// Reject ends the message's deliveries, because of reason.
	Reject(ctx context.Context, reason error) error
}

// Extender is a Delivery whose broker redelivers it unless it is settled
// or extended in time, and that can push that deadline back: JetStream's
// InProgress, SQS's ChangeMessageVisibility, Pub/Sub's ModifyAckDeadline.
// Handle extends such a delivery every ExtendEvery while its message is
// worked on (the handler, idem's waits, the waits for a key in flight), so
// a slow handler does not make the broker deliver the message again and
// spend its delivery limit.
type Extender interface {
	// ExtendEvery is how often to extend, well inside the broker's
	// deadline (a third of it, say); 0 or less turns extending off.
	ExtendEvery() time.Duration
	// Extend tells the broker the message is still being worked on.
	Extend(ctx context.Context) error
}

// Handle processes d and settles it as decided, within
// Config.SettleTimeout even when ctx has ended. It returns the decision and
// the error of settling it. A failed Ack is harmless: the redelivery finds
// the work done and acknowledges it then. A settle error matching
// ErrNotSettled says the broker had given up on the message already (the
// work may have committed all the same).
//
// When d is an Extender, Handle extends it while it works, and a message
// whose key is in flight elsewhere, or whose database was busy (ErrBusy),
// does not spend a delivery: Handle waits InFlightDelay and processes it
// again, up to Config.InFlightWait (or the end of the holder's lease, when
// the store reports one), and only then settles with Retry.
func (c *Consumer[TTx]) Handle(ctx context.Context, d Delivery, h Handler[TTx]) (Decision, error) {
	var dec Decision
	m, err := d.Message()
	switch {
	case err != nil:
		dec = c.unreadable(m, err)
	default:
		if e, ok := d.(Extender); ok && e.ExtendEvery() > 0 {
			dec = c.processAlive(ctx, m, e, h)
		} else {
			dec = c.Process(ctx, m, h)
		}
	}
	return dec, c.settle(ctx, d, m, dec)
}

// unreadable decides on a delivery whose Message failed with err: Retry
// for a temporary error, else Reject.
func (c *Consumer[TTx]) unreadable(m Message, err error) Decision {
	if errors.Is(err, ErrTemporary) {
		return Decision{Action: Retry, Delay: c.cfg.RetryDelay(m.Delivery), Err: fmt.Errorf("idemqueue: read the delivery: %w", err)}
	}
	return Decision{Action: Reject, Err: fmt.Errorf("idemqueue: read the delivery: %w", err)}
}

// settle acts on d as dec says, within Config.SettleTimeout even when ctx
// has ended.
func (c *Consumer[TTx]) settle(ctx context.Context, d Delivery, m Message, dec Decision) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.SettleTimeout)
	defer cancel()
	var err error
	switch dec.Action {
	case Ack:
		err = d.Ack(sctx)
	case Retry:
		err = d.Retry(sctx, dec.Delay)
	default:
		err = d.Reject(sctx, dec.Err)
	}
	if err != nil {
		return fmt.Errorf("idemqueue: %v message %q: %w", dec.Action, m.ID, err)
	}
	return nil
}

// processAlive is processWaiting while the delivery is kept alive; the
// keep-alive stops however processing ends (a panic that escapes, too).
func (c *Consumer[TTx]) processAlive(ctx context.Context, m Message, e Extender, h Handler[TTx]) Decision {
	stop := c.keepAlive(ctx, m, e)
	defer stop()
	return c.processWaiting(ctx, m, h)
}
