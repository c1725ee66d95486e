package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemqueue"
)

// orderMessage is what the publisher sends: an order to create.
type orderMessage struct {
	Ref      string `json:"ref"` // the shop's reference for the order
	Customer int64  `json:"customer"`
	Item     int64  `json:"item"`
}

// service consumes order messages into one database.
type service struct {
	b        *backend
	consumer *idemqueue.Consumer[*sql.Tx]
}

func newService(b *backend, durable string) (*service, error) {
	c, err := idemqueue.New(b.store, idemqueue.Config{Name: durable})
	if err != nil {
		return nil, err
	}
	return &service{b: b, consumer: c}, nil
}

// createOrder is the message's work: one order row, in the transaction that
// records the message. A message that is not an order is rejected for
// good; anything else (a database error) is retried by redelivery.
func (s *service) createOrder(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
	var o orderMessage
	if err := json.Unmarshal(m.Data, &o); err != nil {
		return nil, idemqueue.Permanent(fmt.Errorf("not an order: %w", err))
	}
	if o.Ref == "" || o.Customer <= 0 || o.Item <= 0 {
		return nil, idemqueue.Permanent(errors.New("an order needs a ref, a customer and an item"))
	}
	id, err := s.b.insertOrder(ctx, tx, o.Ref, o.Customer, o.Item)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, `{"order":%d}`, id), nil
}

// streamConfig is what ensureConsumer sets up.
type streamConfig struct {
	Stream, Subject, Durable string
	// AckWait is how long JetStream waits for an ack before it redelivers.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of one message.
	MaxDeliver int
}

// ensureConsumer creates (or updates) the stream and the durable pull
// consumer every instance of the service shares: JetStream hands each
// message to one of them and redelivers it if no ack arrives in AckWait.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, c streamConfig) (jetstream.Consumer, error) {
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     c.Stream,
		Subjects: []string{c.Subject},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		return nil, fmt.Errorf("stream %s: %w", c.Stream, err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:    c.Durable,
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    c.AckWait,
		MaxDeliver: c.MaxDeliver,
	})
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", c.Durable, c.Stream, err)
	}
	return cons, nil
}
