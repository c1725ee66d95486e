// Command consumer is an order consumer on NATS JetStream that shows
// package idemqueue: every order message creates exactly one order row,
// however often JetStream delivers it, because the row and the message's
// record commit in one transaction.
//
//	go run ./examples/consumer -publish 5                   # SQLite file orders.db, NATS on 127.0.0.1:4222
//	go run ./examples/consumer -dsn postgres://user:pass@localhost:5432/app
//	go run ./examples/consumer -dsn mysql://user:pass@localhost:3306/app
//
// It creates the stream ORDERS (subject orders.new) and the durable pull
// consumer order-writer if they are missing, then consumes until
// interrupted. Run several instances: JetStream spreads the messages over
// them, and redelivers a message whose consumer died after its commit and
// before its ack; the next instance acknowledges it without a second order.
// -publish N first publishes N sample orders, each with a Nats-Msg-Id.
//
// A NATS server with JetStream: nats-server -js (Debian package
// nats-server), or docker run -p 127.0.0.1:4222:4222 nats:2.10 -js.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
)

func main() {
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "NATS server URL")
	dbPath := flag.String("db", "orders.db", "SQLite database file, created if missing")
	dsn := flag.String("dsn", "", "database URL, instead of -db: sqlite:PATH, postgres://user:pass@host:5432/db or mysql://user:pass@host:3306/db")
	publish := flag.Int("publish", 0, "publish this many sample orders first")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg := streamConfig{Stream: "ORDERS", Subject: "orders.new", Durable: "order-writer", AckWait: 30 * time.Second, MaxDeliver: 20}
	if err := run(ctx, *natsURL, cmp.Or(*dsn, *dbPath), cfg, *publish, logger); err != nil {
		logger.Error("consumer: " + err.Error())
		os.Exit(1)
	}
}

// run consumes until ctx ends.
func run(ctx context.Context, natsURL, dsn string, cfg streamConfig, publish int, logger *slog.Logger) error {
	b, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer b.db.Close()
	svc, err := newService(b, cfg.Durable)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(natsURL, nats.Name("order-consumer"))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	cons, err := ensureConsumer(ctx, js, cfg)
	if err != nil {
		return err
	}
	for i := range publish {
		data, _ := json.Marshal(orderMessage{Ref: fmt.Sprintf("demo-%d", i+1), Customer: 4711, Item: int64(i + 1)})
		if _, err := js.Publish(ctx, cfg.Subject, data, jetstream.WithMsgID(fmt.Sprintf("demo-%d", i+1))); err != nil {
			return fmt.Errorf("publish: %w", err)
		}
	}
	report := func(msg jetstream.Msg, d idemqueue.Decision, err error) {
		attrs := []any{"subject", msg.Subject(), "action", d.Action, "outcome", d.Outcome, "result", string(d.Result)}
		switch {
		case errors.Is(err, idemqueue.ErrNotSettled):
			logger.Error("consumer: JetStream had given the message up before it was settled", append(attrs, "error", err)...)
		case err != nil:
			logger.Warn("consumer: settling failed (the message will be redelivered)", append(attrs, "error", err)...)
		case d.Err != nil:
			logger.Warn("consumer: not done", append(attrs, "delay", d.Delay, "error", d.Err)...)
		default:
			logger.Info("consumer: done", attrs...)
		}
	}
	// The binding reports each message in progress while it is worked on
	// and tells a settle JetStream did not apply (after MaxDeliver).
	binding, err := idemnats.Bind(ctx, js, cons, idemnats.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer binding.Close()
	// At most ten messages wait in the client's buffer, where nobody
	// reports them in progress and their AckWait runs.
	cc, err := cons.Consume(idemnats.Handler(ctx, binding, svc.consumer, svc.createOrder, report), jetstream.PullMaxMessages(10))
	if err != nil {
		return err
	}
	logger.Info("consumer: consuming", "stream", cfg.Stream, "subject", cfg.Subject, "durable", cfg.Durable, "database", b.name)
	<-ctx.Done()
	cc.Drain()
	select {
	case <-cc.Closed():
	case <-time.After(10 * time.Second):
		cc.Stop()
	}
	return nil
}
