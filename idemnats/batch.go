package idemnats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
)

// FetchBatch fetches up to size messages from b's consumer cons (one pull
// request, waiting at most wait for them to arrive, and no longer than ctx
// allows), processes them as one batch with c and h (idemqueue's
// HandleBatch: one transaction, one decision per message), and settles
// each after the commit. It returns how many messages it fetched; report,
// when not nil, gets every message's decision and settle error. Call it in
// a loop:
//
//	for ctx.Err() == nil {
//		if _, err := idemnats.FetchBatch(ctx, b, cons, consumer, 100, time.Second, saveOrders, nil); err != nil {
//			log.Print(err) // and back off
//		}
//	}
//
// Keep size × the handler's time per message well inside the consumer's
// AckWait (the Binding reports every message in progress while the batch
// works, so a slow batch is not delivered again), and size at most
// idem.MaxBatch. The error is the fetch's (messages fetched before it are
// processed all the same) or joins the settle errors.
func FetchBatch[TTx any](ctx context.Context, b *Binding, cons jetstream.Consumer, c *idemqueue.Consumer[TTx], size int, wait time.Duration, h idemqueue.BatchHandler[TTx], report Report) (int, error) {
	if size < 1 || size > idem.MaxBatch {
		return 0, fmt.Errorf("%w: idemnats: batch of %d messages; want 1 to %d", idem.ErrInvalidConfig, size, idem.MaxBatch)
	}
	if wait <= 0 {
		return 0, fmt.Errorf("%w: idemnats: fetch wait %v is not positive", idem.ErrInvalidConfig, wait)
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
		if wait <= 0 {
			return 0, ctx.Err()
		}
	}
	batch, err := cons.Fetch(size, jetstream.FetchMaxWait(wait))
	if err != nil {
		return 0, fmt.Errorf("idemnats: fetch from %s: %w", b.consumer, err)
	}
	var msgs []jetstream.Msg
	for msg := range batch.Messages() {
		msgs = append(msgs, msg)
	}
	// Fewer than size messages within wait is no error.
	fetchErr := batch.Error()
	if fetchErr != nil {
		fetchErr = fmt.Errorf("idemnats: fetch from %s: %w", b.consumer, fetchErr)
	}
	return len(msgs), errors.Join(fetchErr, HandleBatch(ctx, b, c, msgs, h, report))
}

// HandleBatch processes msgs, deliveries of b's consumer, as one batch with
// c and h and settles each as decided, after the commit (see FetchBatch,
// which fetches them). report, when not nil, gets every message's
// decision and settle error. It returns the settle errors, joined.
func HandleBatch[TTx any](ctx context.Context, b *Binding, c *idemqueue.Consumer[TTx], msgs []jetstream.Msg, h idemqueue.BatchHandler[TTx], report Report) error {
	if len(msgs) == 0 {
		return nil
	}
	ds := make([]idemqueue.Delivery, len(msgs))
	for i, msg := range msgs {
		ds[i] = b.Delivery(msg)
	}
	decisions, errs := c.HandleBatch(ctx, ds, h)
	if report != nil {
		for i, msg := range msgs {
			report(msg, decisions[i], errs[i])
		}
	}
	return errors.Join(errs...)
}
