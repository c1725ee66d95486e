// Package nats_test runs the idemnats adapter against a real NATS server
// with JetStream (see integration/containers for where it comes from).
package nats_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }

// broker is a stream and a durable consumer of their own names on the
// shared server, deleted when the test ends.
type broker struct {
	ctx     context.Context
	nc      *nats.Conn
	js      jetstream.JetStream
	cons    jetstream.Consumer
	stream  string
	subject string
	cfg     jetstream.ConsumerConfig
}

// setup makes a broker whose consumer has cfg (explicit acks, durable
// "c"), within a time limit of two minutes.
func setup(t *testing.T, cfg jetstream.ConsumerConfig) *broker {
	t.Helper()
	url := containers.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	br := &broker{ctx: ctx, nc: nc, js: js, stream: "T_" + hex.EncodeToString(b), subject: "t." + hex.EncodeToString(b), cfg: cfg}
	br.cfg.Durable, br.cfg.AckPolicy = "c", jetstream.AckExplicitPolicy
	br.create(t)
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = js.DeleteStream(dctx, br.stream)
	})
	return br
}

// create makes the stream and the consumer (again, after a delete).
func (br *broker) create(t *testing.T) {
	t.Helper()
	if _, err := br.js.CreateStream(br.ctx, jetstream.StreamConfig{Name: br.stream, Subjects: []string{br.subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	cons, err := br.js.CreateOrUpdateConsumer(br.ctx, br.stream, br.cfg)
	if err != nil {
		t.Fatal(err)
	}
	br.cons = cons
}

func (br *broker) publish(t *testing.T, data string, opts ...jetstream.PublishOpt) *jetstream.PubAck {
	t.Helper()
	ack, err := br.js.Publish(br.ctx, br.subject, []byte(data), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func (br *broker) bind(t *testing.T, opts idemnats.Options) *idemnats.Binding {
	t.Helper()
	b, err := idemnats.Bind(br.ctx, br.js, br.cons, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// info is the consumer's state now.
func (br *broker) info(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	info, err := br.cons.Info(br.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// drops counts the consumer's max-deliveries advisories from now on.
func (br *broker) drops(t *testing.T) func() int {
	t.Helper()
	ch := make(chan struct{}, 100)
	sub, err := br.nc.Subscribe("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+br.stream+".c", func(*nats.Msg) { ch <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := br.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return func() int { return len(ch) }
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

// waitFor polls cond every 20ms until it holds or limit passes.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMessageIdentity: the Nats-Msg-Id is the id (in the id: namespace);
// without one, the stream sequence with the stream's creation time (in the
// seq: namespace); the stream is the queue; the delivery count counts.
func TestMessageIdentity(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second})
	b := br.bind(t, idemnats.Options{})
	br.publish(t, "a", jetstream.WithMsgID("order-1"))
	br.publish(t, "b")
	st, err := br.js.Stream(br.ctx, br.stream)
	if err != nil {
		t.Fatal(err)
	}
	created := st.CachedInfo().Created.UTC().Format(time.RFC3339Nano)
	for _, want := range []string{"id:order-1", "seq:2@" + created} {
		msg := next(t, br.cons, 5*time.Second)
		if msg == nil {
			t.Fatalf("no message for %s", want)
		}
		d := b.Delivery(msg)
		m, err := d.Message()
		if err != nil || m.ID != want || m.Queue != br.stream || m.Delivery != 1 {
			t.Errorf("Message() = %+v, %v; want id %s in %s, delivery 1", m, err, want, br.stream)
		}
		if err := d.Ack(br.ctx); err != nil {
			t.Errorf("Ack: %v", err)
		}
	}
}

// TestSettling: Retry redelivers after its delay with the count raised,
// Reject and Ack end the deliveries, and no ack means a redelivery after
// AckWait.
func TestSettling(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: time.Second})
	b := br.bind(t, idemnats.Options{})
	br.publish(t, "x", jetstream.WithMsgID("m-1"))
	d := b.Delivery(next(t, br.cons, 5*time.Second))
	start := time.Now()
	if err := d.Retry(br.ctx, 600*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	again := next(t, br.cons, 5*time.Second)
	if again == nil {
		t.Fatal("no redelivery after Retry")
	}
	m, _ := b.Delivery(again).Message()
	if gap := time.Since(start); gap < 500*time.Millisecond || m.ID != "id:m-1" || m.Delivery != 2 {
		t.Errorf("redelivered %+v after %v, want id:m-1 as delivery 2 after the 600ms delay", m, gap)
	}
	// Not settled: JetStream redelivers after AckWait (1s).
	third := next(t, br.cons, 5*time.Second)
	if third == nil {
		t.Fatal("no redelivery after AckWait")
	}
	if m, _ := b.Delivery(third).Message(); m.Delivery != 3 {
		t.Errorf("delivery %d, want 3", m.Delivery)
	}
	if err := b.Delivery(third).Reject(br.ctx, errors.New("same id, other data")); err != nil {
		t.Fatal(err)
	}
	if msg := next(t, br.cons, 2*time.Second); msg != nil {
		t.Errorf("a rejected message was delivered again: %s", msg.Data())
	}

	br.publish(t, "y", jetstream.WithMsgID("m-2"))
	if err := b.Delivery(next(t, br.cons, 5*time.Second)).Ack(br.ctx); err != nil {
		t.Fatal(err)
	}
	if msg := next(t, br.cons, 2*time.Second); msg != nil {
		t.Errorf("an acknowledged message was delivered again: %s", msg.Data())
	}
}

// errorsContain reports whether err's text names every part.
func errorsContain(err error, parts ...string) bool {
	if err == nil {
		return false
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			return false
		}
	}
	return true
}

// TestIdsThatAreNotKeys: a message whose Nats-Msg-Id makes no valid
// idempotency key (non-ASCII; 300 bytes, over idem.MaxKeyBytes with the
// "id:" namespace) is processed once under idemqueue.KeyFor of its id, and
// its redelivery (the first settle was a NAK, as after a lost ack) is
// acknowledged as a replay: JetStream never terminates it.
func TestIdsThatAreNotKeys(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second, MaxDeliver: 5})
	b := br.bind(t, idemnats.Options{})
	o := newOrders(t, idem.Config{})
	c := o.consumer(t, idemqueue.Config{})
	for _, tc := range []struct{ name, id string }{{"non-ASCII", "bestellung-ä-1"}, {"300 bytes", strings.Repeat("x", 300)}} {
		t.Run(tc.name, func(t *testing.T) {
			id := tc.id
			br.publish(t, "order of "+id, jetstream.WithMsgID(id))
			first := b.Delivery(next(t, br.cons, 5*time.Second))
			m, err := first.Message()
			if err != nil || m.ID != "id:"+id {
				t.Fatalf("Message() = %+v, %v; want id %.20q", m, err, "id:"+id)
			}
			d := c.Process(br.ctx, m, o.handler(0))
			if d.Action != idemqueue.Ack || d.Outcome != idem.Won {
				t.Fatalf("first delivery: %v %v (%v), want ack, won", d.Action, d.Outcome, d.Err)
			}
			// The ack is lost: the message comes back.
			if err := first.Retry(br.ctx, 0); err != nil {
				t.Fatal(err)
			}
			again := next(t, br.cons, 5*time.Second)
			if again == nil {
				t.Fatal("no redelivery")
			}
			d, err = c.Handle(br.ctx, b.Delivery(again), o.handler(0))
			if err != nil || d.Action != idemqueue.Ack || d.Outcome != idem.Replay {
				t.Errorf("redelivery: %v %v (%v), settle: %v; want ack, replay", d.Action, d.Outcome, d.Err, err)
			}
			if _, err := o.store.Lookup(br.ctx, idemqueue.Scope("c", br.stream), idemqueue.KeyFor("id:"+id)); err != nil {
				t.Errorf("no record under KeyFor: %v", err)
			}
		})
	}
	if msg := next(t, br.cons, 2*time.Second); msg != nil {
		t.Errorf("a message came back after its ack: %s", msg.Data())
	}
	if info := br.info(t); info.NumAckPending != 0 || info.NumPending != 0 || info.AckFloor.Stream != 2 {
		t.Errorf("consumer: %d ack pending, %d pending, ack floor %d; want both messages acked", info.NumAckPending, info.NumPending, info.AckFloor.Stream)
	}
	if runs, n := o.runs.Load(), o.count(t); runs != 2 || n != 2 {
		t.Errorf("%d runs, %d orders; want 2 each", runs, n)
	}
}
