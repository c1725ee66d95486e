package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
)

// queueTimeout bounds one consumer's run over its stream.
const queueTimeout = 5 * time.Minute

// queueOn returns an idemqueue consumer on store whose handler is the
// order's insert, as the function that handles one delivery.
func queueOn[TTx any](store *idem.Store[TTx], insert func(ctx context.Context, tx TTx) error) func(ctx context.Context, d idemqueue.Delivery) (idem.Outcome, error) {
	c, _ := idemqueue.New(store, idemqueue.Config{Name: "idem-bench"}) // fails only for a nil store or name
	h := func(ctx context.Context, tx TTx, _ idemqueue.Message) ([]byte, error) { return nil, insert(ctx, tx) }
	return func(ctx context.Context, d idemqueue.Delivery) (idem.Outcome, error) {
		dec, err := c.Handle(ctx, d, h)
		if err == nil && dec.Action != idemqueue.Ack {
			err = fmt.Errorf("%v: %w", dec.Action, dec.Err)
		}
		return dec.Outcome, err
	}
}

// queueTest publishes -queue messages to a JetStream stream of their own,
// then -queue-clients clients consume them from one durable consumer, as a
// cell of path queue-bare (the order's transaction, then a double ack) and
// one of queue-idem (idemqueue through idemnats).
func queueTest(ctx context.Context, o options, t *target, srv *servers, runID string, rep *report) error {
	ns, err := srv.server(ctx, "nats")
	if err != nil {
		return err
	}
	nc, err := nats.Connect(ns.dsn)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(512))
	if err != nil {
		return err
	}
	note := fmt.Sprintf("queue-bare, queue-idem: %d messages published to a JetStream stream of their own, consumed by one durable consumer (explicit acks) through one pull of 64 shared by %d clients; queue-bare sends the bare write, then a double ack; queue-idem the same write inside Store.Do through idemqueue's Handle and idemnats (its ack is a double ack too)", o.queue, o.queueConc)
	if !slices.Contains(rep.notes, note) {
		rep.notes = append(rep.notes, note)
	}
	for _, consumer := range []string{"bare", "idem"} {
		c, err := queueRun(ctx, o, t, js, fmt.Sprintf("bench_%s_%s_%s", runID, t.backend, consumer), consumer)
		if c != nil {
			rep.add(c)
			logf("%-14s %2d clients round 0 queue-%-8s %8.0f msgs/s rt %.2f st %.2f outcomes %v err %d %v", t.name, c.clients, consumer, c.throughput(),
				perOp(c.wire.roundTrips, c.ops), perOp(c.wire.statements, c.ops), c.outcomes, c.errors, c.firstErr)
		}
		if err != nil {
			return fmt.Errorf("%s consumer: %w", consumer, err)
		}
	}
	return nil
}

// queueRun publishes the messages to stream name and consumes them.
func queueRun(ctx context.Context, o options, t *target, js jetstream.JetStream, name, consumer string) (*cell, error) {
	ctx, cancel := context.WithTimeout(ctx, queueTimeout)
	defer cancel()
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = js.DeleteStream(context.WithoutCancel(ctx), name) }()
	for i := range o.queue {
		if _, err := js.PublishAsync(name, requestBody(int64(i), ""), jetstream.WithMsgID(strconv.Itoa(i))); err != nil {
			return nil, err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "bench", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 5})
	if err != nil {
		return nil, err
	}
	handle := func(msg jetstream.Msg) (idem.Outcome, error) {
		if _, err := t.schemes[schemeBare](ctx, idem.Request{}, 0); err != nil {
			return 0, err
		}
		return idem.Won, msg.DoubleAck(ctx)
	}
	if consumer != "bare" {
		b, err := idemnats.Bind(ctx, js, cons, idemnats.Options{})
		if err != nil {
			return nil, err
		}
		defer func() { _ = b.Close() }()
		handle = func(msg jetstream.Msg) (idem.Outcome, error) { return t.consume(ctx, b.Delivery(msg)) }
	}
	// One pull of 64 at a time, shared by the clients of measure: each
	// request takes the next message and handles it.
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	c := measure(ctx, t, o.queueConc, queueTimeout, int64(o.queue), func(ctx context.Context, _ int64) (idem.Outcome, error) {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return 0, err
		}
		return handle(msg)
	}, nil)
	c.path = path("queue-" + consumer)
	if c.ops < int64(o.queue) {
		return c, fmt.Errorf("acked %d of %d messages: %w", c.ops, o.queue, ctx.Err())
	}
	return c, nil
}
