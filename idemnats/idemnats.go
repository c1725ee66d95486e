package idemnats

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemqueue"
)

// Delivery is a JetStream message as an idemqueue.Delivery.
type Delivery struct {
	Msg jetstream.Msg
}

var _ idemqueue.Delivery = Delivery{}

// Message returns the message: Queue is its stream, ID its Nats-Msg-Id
// header or else "seq-" and its stream sequence, Delivery its delivery
// count. It fails for a message that did not come from a JetStream
// consumer (no metadata).
func (d Delivery) Message() (idemqueue.Message, error) {
	md, err := d.Msg.Metadata()
	if err != nil {
		return idemqueue.Message{}, fmt.Errorf("idemnats: message on %q: %w", d.Msg.Subject(), err)
	}
	id := d.Msg.Headers().Get(jetstream.MsgIDHeader)
	if id == "" {
		id = "seq-" + strconv.FormatUint(md.Sequence.Stream, 10)
	}
	return idemqueue.Message{Queue: md.Stream, ID: id, Data: d.Msg.Data(), Delivery: int(min(md.NumDelivered, math.MaxInt32))}, nil
}

// Ack acknowledges the message and waits for the server to confirm it.
func (d Delivery) Ack(ctx context.Context) error { return d.Msg.DoubleAck(ctx) }

// Retry asks JetStream to deliver the message again after delay (at once
// for 0).
func (d Delivery) Retry(_ context.Context, delay time.Duration) error {
	if delay <= 0 {
		return d.Msg.Nak()
	}
	return d.Msg.NakWithDelay(delay)
}

// Reject tells JetStream never to deliver the message again, with reason
// in its advisory.
func (d Delivery) Reject(_ context.Context, reason error) error {
	if reason == nil {
		return d.Msg.Term()
	}
	return d.Msg.TermWithReason(reason.Error())
}

// Report receives every message's decision and the error of settling it,
// for logs and metrics. It must not block for long.
type Report func(msg jetstream.Msg, d idemqueue.Decision, settleErr error)

// Handler returns a jetstream.MessageHandler for Consumer.Consume that runs
// each message through c with h (in its transaction) and settles it. ctx is
// the context of every run; end it to stop processing (a message in the
// middle of its run is handed back for redelivery). report may be nil.
//
//	cc, err := cons.Consume(idemnats.Handler(ctx, consumer, createOrder, nil))
func Handler[TTx any](ctx context.Context, c *idemqueue.Consumer[TTx], h idemqueue.Handler[TTx], report Report) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		d, err := c.Handle(ctx, Delivery{Msg: msg}, h)
		if report != nil {
			report(msg, d, err)
		}
	}
}
