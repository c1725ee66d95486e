package idemqueue

import (
	"context"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/backoff"
)

// keepAlive extends e every ExtendEvery until the returned stop is called;
// stop returns once no Extend runs any more, so none follows the settle.
func (c *Consumer[TTx]) keepAlive(ctx context.Context, m Message, e Extender) (stop func()) {
	every := e.ExtendEvery()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			// Bounded by the interval: a late extension is worth little,
			// and the next one is due then.
			ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), every)
			err := e.Extend(ectx)
			cancel()
			if err != nil && c.cfg.Logger != nil {
				c.cfg.Logger.WarnContext(ctx, "idemqueue: extending a delivery failed; the broker may deliver it again",
					"queue", m.Queue, "id", m.ID, "delivery", m.Delivery, "error", err)
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// processWaiting is Process for a delivery that is kept alive: an answer
// that the key is in flight (or the database busy) is waited out, every
// InFlightDelay, instead of spending a delivery on it, until the key is
// free, the wait reaches Config.InFlightWait, or the holder's lease (when
// known) ends: Do does not take a key over whose lease expired, so waiting
// past it gains nothing.
func (c *Consumer[TTx]) processWaiting(ctx context.Context, m Message, h Handler[TTx]) Decision {
	deadline := time.Now().Add(c.cfg.InFlightWait)
	for {
		d := c.Process(ctx, m, h)
		if d.Action != Retry || d.Outcome != idem.InFlight || ctx.Err() != nil {
			return d
		}
		until := deadline
		if held(d.Record) && !d.Record.LeaseUntil.IsZero() {
			if d.Record.LeaseExpired {
				return d
			}
			until = minTime(until, d.Record.LeaseUntil)
		}
		if time.Now().Add(c.cfg.InFlightDelay).After(until) {
			return d
		}
		if backoff.Sleep(ctx, c.cfg.InFlightDelay) != nil {
			// The consumer is stopping: hand the message back at once.
			d.Delay = 0
			return d
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
