// Package nats_test runs the idemnats adapter against a real NATS server
// with JetStream (see integration/containers for where it comes from).
package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }

// setup makes a stream and a durable consumer of their own names on the
// shared server, deleted when the test ends.
func setup(t *testing.T, ackWait time.Duration) (context.Context, jetstream.JetStream, jetstream.Consumer, string) {
	t.Helper()
	url := containers.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "T_" + hex.EncodeToString(b)
	subject := "t." + hex.EncodeToString(b)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	cons, err := js.CreateOrUpdateConsumer(ctx, name, jetstream.ConsumerConfig{Durable: "c", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	return ctx, js, cons, subject
}

// next fetches one message within wait; nil when none came.
func next(t *testing.T, cons jetstream.Consumer, wait time.Duration) jetstream.Msg {
	t.Helper()
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	for msg := range batch.Messages() {
		return msg
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		t.Fatal(err)
	}
	return nil
}

// TestMessageIdentity: the Nats-Msg-Id is the id; without one, the stream
// sequence; the stream is the queue; the delivery count counts.
func TestMessageIdentity(t *testing.T) {
	ctx, js, cons, subject := setup(t, 30*time.Second)
	if _, err := js.Publish(ctx, subject, []byte("a"), jetstream.WithMsgID("order-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, subject, []byte("b")); err != nil {
		t.Fatal(err)
	}
	info, _ := cons.Info(ctx)
	for _, want := range []string{"order-1", "seq-2"} {
		msg := next(t, cons, 5*time.Second)
		if msg == nil {
			t.Fatalf("no message for %s", want)
		}
		m, err := idemnats.Delivery{Msg: msg}.Message()
		if err != nil || m.ID != want || m.Queue != info.Stream || m.Delivery != 1 {
			t.Errorf("Message() = %+v, %v; want id %s in %s, delivery 1", m, err, want, info.Stream)
		}
		if err := (idemnats.Delivery{Msg: msg}).Ack(ctx); err != nil {
			t.Errorf("Ack: %v", err)
		}
	}
}

// TestSettling: Retry redelivers after its delay with the count raised,
// Reject and Ack end the deliveries, and no ack means a redelivery after
// AckWait.
func TestSettling(t *testing.T) {
	ctx, js, cons, subject := setup(t, time.Second)
	if _, err := js.Publish(ctx, subject, []byte("x"), jetstream.WithMsgID("m-1")); err != nil {
		t.Fatal(err)
	}
	d := idemnats.Delivery{Msg: next(t, cons, 5*time.Second)}
	start := time.Now()
	if err := d.Retry(ctx, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again := next(t, cons, 5*time.Second)
	if again == nil {
		t.Fatal("no redelivery after Retry")
	}
	m, _ := idemnats.Delivery{Msg: again}.Message()
	if gap := time.Since(start); gap < 500*time.Millisecond || m.ID != "m-1" || m.Delivery != 2 {
		t.Errorf("redelivered %+v after %v, want m-1 as delivery 2 after the 600ms delay", m, gap)
	}
	// Not settled: JetStream redelivers after AckWait (1s).
	third := next(t, cons, 5*time.Second)
	if third == nil {
		t.Fatal("no redelivery after AckWait")
	}
	if m, _ := (idemnats.Delivery{Msg: third}).Message(); m.Delivery != 3 {
		t.Errorf("delivery %d, want 3", m.Delivery)
	}
	if err := (idemnats.Delivery{Msg: third}).Reject(ctx, errors.New("same id, other data")); err != nil {
		t.Fatal(err)
	}
	if msg := next(t, cons, 2*time.Second); msg != nil {
		t.Errorf("a rejected message was delivered again: %s", msg.Data())
	}

	if _, err := js.Publish(ctx, subject, []byte("y"), jetstream.WithMsgID("m-2")); err != nil {
		t.Fatal(err)
	}
	if err := (idemnats.Delivery{Msg: next(t, cons, 5*time.Second)}).Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if msg := next(t, cons, 2*time.Second); msg != nil {
		t.Errorf("an acknowledged message was delivered again: %s", msg.Data())
	}
}
