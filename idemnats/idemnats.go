package idemnats

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemqueue"
)

// Report receives every message's decision and the error of settling it,
// for logs and metrics. It must not block for long.
type Report func(msg jetstream.Msg, d idemqueue.Decision, settleErr error)

// Handler returns a jetstream.MessageHandler for Consume on b's consumer
// that runs each message through c with h (in its transaction), reports it
// in progress while it works, and settles it. ctx is the context of every
// run; end it to stop processing (a message in the middle of its run is
// handed back for redelivery). report may be nil.
//
//	b, err := idemnats.Bind(ctx, js, cons, idemnats.Options{})
//	cc, err := cons.Consume(idemnats.Handler(ctx, b, consumer, createOrder, nil), jetstream.PullMaxMessages(1))
func Handler[TTx any](ctx context.Context, b *Binding, c *idemqueue.Consumer[TTx], h idemqueue.Handler[TTx], report Report) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		d, err := c.Handle(ctx, b.Delivery(msg), h)
		if report != nil {
			report(msg, d, err)
		}
	}
}
