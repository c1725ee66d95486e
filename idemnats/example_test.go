package idemnats_test

import (
	"context"
	"database/sql"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
)

// Wiring a JetStream pull consumer to an idem store: every instance of the
// service runs this; JetStream spreads the messages and redelivers those
// whose ack it did not get, and the redeliveries of work already committed
// are acknowledged without running it again. (Not run: it needs a server.)
func ExampleHandler() {
	ctx := context.Background()
	var store *idem.Store[*sql.Tx] // your store, as in idem's Quickstart

	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	cons, err := js.CreateOrUpdateConsumer(ctx, "ORDERS", jetstream.ConsumerConfig{
		Durable:    "order-writer",
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    30 * time.Second,
		MaxDeliver: 20, // a message that keeps failing stops
	})
	if err != nil {
		log.Fatal(err)
	}
	b, err := idemnats.Bind(ctx, js, cons, idemnats.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	consumer, _ := idemqueue.New(store, idemqueue.Config{Name: "order-writer"})
	createOrder := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (body) VALUES (?)`, m.Data)
		return nil, err
	}
	// One message at a time: a message waiting in the client's buffer is
	// not reported in progress, and its ack deadline runs.
	cc, err := cons.Consume(idemnats.Handler(ctx, b, consumer, createOrder,
		func(msg jetstream.Msg, d idemqueue.Decision, err error) {
			if d.Err != nil || err != nil {
				log.Printf("%s: %v (%v, settle: %v)", msg.Subject(), d.Action, d.Err, err)
			}
		}), jetstream.PullMaxMessages(1))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Stop()
	<-ctx.Done()
}
