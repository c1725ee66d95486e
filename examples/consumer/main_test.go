package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }

// The exactly-once test on each database. NATS comes from
// integration/containers: a container of IDEM_NATS_IMAGE, or IDEM_NATS_URL;
// it is required wherever Docker works (IDEM_NATS_OPTIONAL=true makes its
// absence a skip).
func TestExactlyOnceSQLite(t *testing.T) {
	exactlyOnce(t, filepath.Join(t.TempDir(), "orders.db"))
}

func TestExactlyOncePostgres(t *testing.T) { exactlyOnce(t, freshPostgres(t)) }

func TestExactlyOnceMySQL(t *testing.T) { exactlyOnce(t, freshMySQL(t)) }

// errCrashed is what a crashed consumer's ack reports.
var errCrashed = errors.New("consumer crashed before its ack")

// faultyDelivery is a JetStream delivery on a consumer that misbehaves
// between the commit and the ack: Handle calls Ack only after the
// message's work and record committed.
type faultyDelivery struct {
	*idemnats.Delivery
	w *worker
}

func (d faultyDelivery) Ack(ctx context.Context) error {
	m, _ := d.Message()
	switch {
	case d.w.shouldCrash():
		// The process dies: its connection drops, nothing is acked, and
		// JetStream redelivers everything it held after AckWait.
		d.w.crashedOn.Store(&m.ID)
		d.w.nc.Close()
		return errCrashed
	case m.Delivery == 1 && loseAck(m.ID):
		d.w.lostAcks.Add(1)
		return nil // the ack is lost on the way: redelivered after AckWait
	}
	return d.Delivery.Ack(ctx)
}

// loseAck picks a deterministic tenth of the messages whose first ack is
// lost.
func loseAck(id string) bool {
	h := fnv.New32a()
	h.Write([]byte(id))
	return h.Sum32()%10 == 0
}

// worker is one consumer process: its own NATS connection, the shared
// database.
type worker struct {
	name      string
	nc        *nats.Conn
	cc        jetstream.ConsumeContext
	crashAt   int64 // crash at this commit (0: never)
	commits   atomic.Int64
	crashedOn atomic.Pointer[string]
	lostAcks  atomic.Int64
}

func (w *worker) shouldCrash() bool {
	return w.crashAt > 0 && w.commits.Add(1) == w.crashAt
}

// decisions records every decision by message id, from every worker.
type decisions struct {
	mu      sync.Mutex
	acked   map[string]bool
	won     map[string]int
	replays map[string]int
	other   []string
}

func (d *decisions) note(w *worker, id string, dec idemqueue.Decision, settleErr error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case dec.Action == idemqueue.Ack && dec.Outcome == idem.Won:
		d.won[id]++
	case dec.Action == idemqueue.Ack && dec.Outcome == idem.Replay:
		d.replays[id]++
	case dec.Action == idemqueue.Retry && (errors.Is(dec.Err, idemqueue.ErrInFlight) || errors.Is(dec.Err, idemqueue.ErrBusy)):
	default:
		d.other = append(d.other, fmt.Sprintf("%s on %s: %v %v (%v)", id, w.name, dec.Action, dec.Outcome, dec.Err))
	}
	if dec.Action == idemqueue.Ack && settleErr == nil {
		d.acked[id] = true
	}
}

func (d *decisions) ackedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.acked)
}

// exactlyOnce publishes N orders, consumes them with several workers on
// one durable consumer with a short AckWait, crashes one worker after a
// commit and before its ack (its connection drops, and JetStream
// redelivers what it held), loses a tenth of the first acks, and checks
// that every message produced exactly one order row.
func exactlyOnce(t *testing.T, dsn string) {
	const (
		messages = 200
		workers  = 4
		crashAt  = 5 // the victim crashes at its 5th commit
	)
	natsURL := containers.NATS(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	b, err := openStore(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer b.db.Close()
	suffix := randomSuffix()
	cfg := streamConfig{
		Stream:     "ORDERS_" + suffix,
		Subject:    "orders." + suffix,
		Durable:    "order-writer",
		AckWait:    time.Second,
		MaxDeliver: 50,
	}
	svc, err := newService(b, cfg.Durable)
	if err != nil {
		t.Fatal(err)
	}

	admin, err := nats.Connect(natsURL, nats.Name("test-admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	cons, err := ensureConsumer(ctx, js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = js.DeleteStream(dctx, cfg.Stream)
	})
	for i := range messages {
		data, _ := json.Marshal(orderMessage{Ref: fmt.Sprintf("ref-%d", i), Customer: int64(1000 + i%7), Item: int64(i + 1)})
		if _, err := js.Publish(ctx, cfg.Subject, data, jetstream.WithMsgID(fmt.Sprintf("order-%d", i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}

	rec := &decisions{acked: map[string]bool{}, won: map[string]int{}, replays: map[string]int{}}
	var ws []*worker
	for i := range workers {
		w := &worker{name: fmt.Sprintf("worker-%d", i)}
		if i == 0 {
			w.crashAt = crashAt
		}
		if w.nc, err = nats.Connect(natsURL, nats.Name(w.name), nats.NoReconnect()); err != nil {
			t.Fatal(err)
		}
		wjs, err := jetstream.New(w.nc)
		if err != nil {
			t.Fatal(err)
		}
		wcons, err := wjs.Consumer(ctx, cfg.Stream, cfg.Durable)
		if err != nil {
			t.Fatal(err)
		}
		binding, err := idemnats.Bind(ctx, wjs, wcons, idemnats.Options{})
		if err != nil {
			t.Fatal(err)
		}
		w.cc, err = wcons.Consume(func(msg jetstream.Msg) {
			if w.crashedOn.Load() != nil {
				return // a dead process handles nothing more
			}
			d := faultyDelivery{Delivery: binding.Delivery(msg), w: w}
			dec, settleErr := svc.consumer.Handle(ctx, d, svc.createOrder)
			m, _ := d.Message()
			rec.note(w, m.ID, dec, settleErr)
		}, jetstream.PullMaxMessages(10))
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
		if i == 0 {
			// The others start once the victim has committed once: it
			// holds a batch of ten by then, so it reaches its crash
			// however the machine schedules the workers.
			waitFor(t, 30*time.Second, "the victim's first commit", func() bool { return w.commits.Load() > 0 })
		}
	}
	defer func() {
		for _, w := range ws {
			w.cc.Stop()
			w.nc.Close()
		}
	}()

	// Wait until every message is acked and JetStream holds nothing back.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if rec.ackedCount() == messages && info.NumAckPending == 0 && info.NumPending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2 minutes: %d of %d messages acked; JetStream: %d pending, %d awaiting ack, %d redelivered",
				rec.ackedCount(), messages, info.NumPending, info.NumAckPending, info.NumRedelivered)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every message: exactly one order row, made by exactly one winner.
	rows := map[string]int{}
	q, err := b.db.QueryContext(ctx, `SELECT ref FROM orders`)
	if err != nil {
		t.Fatal(err)
	}
	for q.Next() {
		var ref string
		if err := q.Scan(&ref); err != nil {
			t.Fatal(err)
		}
		rows[ref]++
	}
	if err := q.Err(); err != nil {
		t.Fatal(err)
	}
	q.Close()
	total := 0
	for i := range messages {
		ref := fmt.Sprintf("ref-%d", i)
		total += rows[ref]
		if rows[ref] != 1 {
			t.Errorf("%s: %d order rows, want exactly 1", ref, rows[ref])
		}
	}
	if total != messages || len(rows) != messages {
		t.Errorf("%d order rows for %d refs, want %d of each", total, len(rows), messages)
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	for id, n := range rec.won {
		if n != 1 {
			t.Errorf("%s: the work committed %d times", id, n)
		}
	}
	if len(rec.other) > 0 {
		t.Errorf("unexpected decisions:\n%s", strings.Join(rec.other, "\n"))
	}
	crashed := ws[0].crashedOn.Load()
	if crashed == nil {
		t.Fatal("the victim never crashed: the test proves nothing")
	}
	if rec.replays[*crashed] == 0 {
		t.Errorf("the message the victim committed before crashing (%s) was not redelivered and acknowledged as a replay", *crashed)
	}
	lost := 0
	for _, w := range ws {
		lost += int(w.lostAcks.Load())
	}
	replays := 0
	for _, n := range rec.replays {
		replays += n
	}
	t.Logf("%s: %d messages, %d order rows; the victim crashed after committing %s; %d first acks lost; %d redeliveries acknowledged as replays",
		b.name, messages, total, *crashed, lost, replays)
	if lost == 0 || replays < lost+1 {
		t.Errorf("%d replays, want at least one for each of the %d lost acks and one for the crash", replays, lost)
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// TestCreateOrderRejectsBadMessages: a message that is not an order is
// rejected for good, and nothing is written.
func TestCreateOrderRejectsBadMessages(t *testing.T) {
	b, err := openStore(t.Context(), filepath.Join(t.TempDir(), "orders.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.db.Close()
	svc, err := newService(b, "order-writer")
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{`not json`, `{"ref":"","customer":1,"item":1}`, `{"ref":"r","customer":0,"item":1}`} {
		d := svc.consumer.Process(t.Context(), idemqueue.Message{Queue: "ORDERS", ID: "m-" + data, Data: []byte(data), Delivery: 1}, svc.createOrder)
		if d.Action != idemqueue.Reject || !errors.Is(d.Err, idemqueue.ErrPermanent) {
			t.Errorf("%s: %+v, want reject", data, d)
		}
	}
	var n int
	if err := b.db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d orders (%v), want 0", n, err)
	}
}

// TestRun runs the command's own loop against the broker: publish three
// orders, consume them, stop on cancel.
func TestRun(t *testing.T) {
	natsURL := containers.NATS(t)
	suffix := randomSuffix()
	cfg := streamConfig{Stream: "ORDERS_" + suffix, Subject: "orders." + suffix, Durable: "order-writer", AckWait: 5 * time.Second, MaxDeliver: 5}
	dsn := filepath.Join(t.TempDir(), "orders.db")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, natsURL, dsn, cfg, 3, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			return
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_ = js.DeleteStream(dctx, cfg.Stream)
	})
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for n := 0; n != 3; {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v", err)
		case <-ctx.Done():
			t.Fatalf("3 orders not consumed in time (%d)", n)
		case <-time.After(100 * time.Millisecond):
		}
		_ = db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("run: %v", err)
	}
}

var databaseSeq atomic.Int64

// freshPostgres creates an empty database on the test server and returns
// its postgres:// URL.
func freshPostgres(t *testing.T) string {
	t.Helper()
	admin := containers.Postgres(t)
	name := fmt.Sprintf("consumer_%d_%d", os.Getpid(), databaseSeq.Add(1))
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// freshMySQL creates an empty database on the test server and returns its
// mysql:// URL.
func freshMySQL(t *testing.T) string {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(containers.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("consumer_%d_%d", os.Getpid(), databaseSeq.Add(1))
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + name}
	return u.String()
}

// waitFor polls cond until it holds, failing t after limit.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, limit)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
