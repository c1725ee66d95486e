package nats_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/idemtest"
)

// orders is a SQLite database with an idem store and an orders table.
type orders struct {
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	runs  atomic.Int64
}

func newOrders(t *testing.T, cfg idem.Config) *orders {
	t.Helper()
	ctx := t.Context()
	lite := idemtest.NewSQLite(t, cfg)
	db, store := lite.DB, lite.Store
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, msg TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &orders{db: db, store: store}
}

// handler inserts an order row after pause.
func (o *orders) handler(pause time.Duration) idemqueue.Handler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		o.runs.Add(1)
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (msg) VALUES (?)`, m.ID); err != nil {
			return nil, err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return []byte("done"), nil
	}
}

func (o *orders) count(t *testing.T) int {
	t.Helper()
	var n int
	if err := o.db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (o *orders) consumer(t *testing.T, cfg idemqueue.Config) *idemqueue.Consumer[*sql.Tx] {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "c"
	}
	c, err := idemqueue.New(o.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// settle is one message's decision as a Report saw it.
type settle struct {
	id        string
	delivery  int
	dec       idemqueue.Decision
	settleErr error
}

// reports collects what a Handler reports.
type reports struct {
	ch chan settle
}

func newReports() *reports { return &reports{ch: make(chan settle, 100)} }

func (r *reports) report(msg jetstream.Msg, d idemqueue.Decision, err error) {
	md, _ := msg.Metadata()
	s := settle{dec: d, settleErr: err}
	if md != nil {
		s.id, s.delivery = fmt.Sprint(md.Sequence.Stream), int(md.NumDelivered)
	}
	r.ch <- s
}

// next waits up to limit for a report.
func (r *reports) next(t *testing.T, limit time.Duration) settle {
	t.Helper()
	select {
	case s := <-r.ch:
		return s
	case <-time.After(limit):
		t.Fatalf("no decision within %v", limit)
		return settle{}
	}
}

// quiet checks that no report comes within d.
func (r *reports) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case s := <-r.ch:
		t.Errorf("unexpected decision: message %s delivery %d: %v (%v, settle: %v)", s.id, s.delivery, s.dec.Action, s.dec.Err, s.settleErr)
	case <-time.After(d):
	}
}

// consume runs h on br's consumer through a Binding, one message at a
// time, until the test ends.
func consume(t *testing.T, br *broker, c *idemqueue.Consumer[*sql.Tx], b *idemnats.Binding, h idemqueue.Handler[*sql.Tx], r *reports) {
	t.Helper()
	ctx, cancel := context.WithCancel(br.ctx)
	cc, err := br.cons.Consume(idemnats.Handler(ctx, b, c, h, r.report), jetstream.PullMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		cc.Stop()
		select {
		case <-cc.Closed():
		case <-time.After(10 * time.Second):
		}
	})
}

// TestPoisonMessage: a handler that panics on a message does not take the
// consumer down: the message is retried until MaxPanicDeliveries, then
// terminated, and the next message is processed.
func TestPoisonMessage(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: 5 * time.Second, MaxDeliver: 10})
	o := newOrders(t, idem.Config{})
	c := o.consumer(t, idemqueue.Config{MaxPanicDeliveries: 3, RetryDelay: func(int) time.Duration { return 50 * time.Millisecond }})
	ok := o.handler(0)
	h := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		if string(m.Data) == "poison" {
			panic(errors.New("no price for this item")) // the handler has a bug this message meets
		}
		return ok(ctx, tx, m)
	}
	r := newReports()
	consume(t, br, c, br.bind(t, idemnats.Options{}), h, r)
	br.publish(t, "poison", jetstream.WithMsgID("poison-1"))
	for delivery, want := range []idemqueue.Action{idemqueue.Retry, idemqueue.Retry, idemqueue.Reject} {
		s := r.next(t, 20*time.Second)
		var perr *idemqueue.PanicError
		if s.delivery != delivery+1 || s.dec.Action != want || !errors.As(s.dec.Err, &perr) || s.settleErr != nil {
			t.Fatalf("poison message: delivery %d: %v (%v, settle: %v); want delivery %d: %v with a *PanicError",
				s.delivery, s.dec.Action, s.dec.Err, s.settleErr, delivery+1, want)
		}
	}
	br.publish(t, "fine", jetstream.WithMsgID("order-1"))
	if s := r.next(t, 20*time.Second); s.dec.Action != idemqueue.Ack || s.dec.Outcome != idem.Won {
		t.Errorf("the next message: %v %v (%v)", s.dec.Action, s.dec.Outcome, s.dec.Err)
	}
	r.quiet(t, 1500*time.Millisecond) // the terminated poison message does not come back
	if n := o.count(t); n != 1 {
		t.Errorf("%d orders, want 1 (none from the poison message)", n)
	}
}

// TestSlowHandler: with AckWait 1s and MaxDeliver 3, a handler that takes
// 3.5s keeps its message (reported in progress every third of AckWait)
// while a second instance of the service pulls from the same consumer: it
// runs once, is acked, and JetStream neither redelivers nor drops it.
func TestSlowHandler(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: 3})
	drops := br.drops(t)
	o := newOrders(t, idem.Config{WaitBound: 100 * time.Millisecond})
	c := o.consumer(t, idemqueue.Config{})
	b := br.bind(t, idemnats.Options{})
	r := newReports()
	consume(t, br, c, b, o.handler(3500*time.Millisecond), r)
	br.publish(t, "slow", jetstream.WithMsgID("order-1"))
	waitFor(t, 10*time.Second, "the first run", func() bool { return o.runs.Load() == 1 })
	// The second instance: it would get every redelivery.
	consume(t, br, c, br.bind(t, idemnats.Options{}), o.handler(0), r)
	s := r.next(t, 30*time.Second)
	if s.delivery != 1 || s.dec.Action != idemqueue.Ack || s.dec.Outcome != idem.Won || s.settleErr != nil {
		t.Errorf("slow message: delivery %d: %v %v (%v, settle: %v); want delivery 1 acked", s.delivery, s.dec.Action, s.dec.Outcome, s.dec.Err, s.settleErr)
	}
	r.quiet(t, 2*time.Second)
	info := br.info(t)
	if info.NumAckPending != 0 || info.NumRedelivered != 0 || info.AckFloor.Stream != 1 || drops() != 0 {
		t.Errorf("JetStream: %d awaiting ack, %d redelivered, ack floor %d, %d dropped; want 0, 0, 1, 0",
			info.NumAckPending, info.NumRedelivered, info.AckFloor.Stream, drops())
	}
	if runs, n := o.runs.Load(), o.count(t); runs != 1 || n != 1 {
		t.Errorf("%d runs, %d orders; want 1 and 1", runs, n)
	}
	if st := b.Stats(); st.Progress < 3 || st.NotSettled != 0 || st.LateSettles != 0 {
		t.Errorf("binding stats %+v, want ten or so in-progress reports and no late settle", st)
	}
}

// TestSecondConsumerInFlight: a consumer that meets a message whose key
// another consumer is working on (two messages of one order; the first's
// run holds SQLite) waits for it, reporting its own delivery in progress,
// and acks the stored result: no delivery is spent, none is dropped.
func TestSecondConsumerInFlight(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: 3})
	drops := br.drops(t)
	o := newOrders(t, idem.Config{WaitBound: 100 * time.Millisecond})
	byOrder := func(m idemqueue.Message) (string, error) { return "order-" + string(m.Data), nil }
	c := o.consumer(t, idemqueue.Config{Key: byOrder})
	b1, b2 := br.bind(t, idemnats.Options{}), br.bind(t, idemnats.Options{})

	br.publish(t, "7", jetstream.WithMsgID("a-1"))
	br.publish(t, "7", jetstream.WithMsgID("a-2")) // the same order, published twice
	first, second := next(t, br.cons, 5*time.Second), next(t, br.cons, 5*time.Second)
	if first == nil || second == nil {
		t.Fatal("the two messages did not come")
	}
	entered := make(chan struct{})
	slow := o.handler(3500 * time.Millisecond)
	var wg sync.WaitGroup
	var firstDec idemqueue.Decision
	var firstErr error
	wg.Go(func() {
		firstDec, firstErr = c.Handle(br.ctx, b1.Delivery(first), func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
			close(entered)
			return slow(ctx, tx, m)
		})
	})
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first run never started")
	}
	dec, err := c.Handle(br.ctx, b2.Delivery(second), o.handler(0))
	wg.Wait()
	if firstErr != nil || firstDec.Action != idemqueue.Ack || firstDec.Outcome != idem.Won {
		t.Errorf("first consumer: %+v, %v", firstDec, firstErr)
	}
	if err != nil || dec.Action != idemqueue.Ack || dec.Outcome != idem.Replay {
		t.Errorf("second consumer: %v %v (%v, settle: %v); want an ack of the first's result", dec.Action, dec.Outcome, dec.Err, err)
	}
	if msg := next(t, br.cons, 2*time.Second); msg != nil {
		md, _ := msg.Metadata()
		t.Errorf("message %d was delivered again (delivery %d)", md.Sequence.Stream, md.NumDelivered)
	}
	info := br.info(t)
	if info.NumAckPending != 0 || info.NumRedelivered != 0 || drops() != 0 {
		t.Errorf("JetStream: %d awaiting ack, %d redelivered, %d dropped; want none", info.NumAckPending, info.NumRedelivered, drops())
	}
	if runs := o.runs.Load(); runs != 1 {
		t.Errorf("%d runs, want 1", runs)
	}
	if st := b2.Stats(); st.Progress == 0 {
		t.Errorf("the waiting consumer never reported its delivery in progress: %+v", st)
	}
}

// TestBusySQLite: another transaction holds SQLite's write lock three
// times as long as AckWait and thirty times WaitBound; the message that
// meets it is not dropped but waits, and is processed once the database
// is free, on its first delivery.
func TestBusySQLite(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: 3})
	drops := br.drops(t)
	o := newOrders(t, idem.Config{WaitBound: 100 * time.Millisecond})
	c := o.consumer(t, idemqueue.Config{})
	r := newReports()
	consume(t, br, c, br.bind(t, idemnats.Options{}), o.handler(0), r)

	conn, err := o.db.Conn(br.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(br.ctx, `BEGIN IMMEDIATE`); err != nil {
		t.Fatal(err)
	}
	held := time.Now()
	br.publish(t, "x", jetstream.WithMsgID("order-1"))
	time.Sleep(3 * time.Second)
	if _, err := conn.ExecContext(br.ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	s := r.next(t, 30*time.Second)
	if s.delivery != 1 || s.dec.Action != idemqueue.Ack || s.dec.Outcome != idem.Won || s.settleErr != nil {
		t.Errorf("message on a busy database: delivery %d: %v %v (%v, settle: %v); want delivery 1 done and acked",
			s.delivery, s.dec.Action, s.dec.Outcome, s.dec.Err, s.settleErr)
	}
	if waited := time.Since(held); waited < 3*time.Second {
		t.Errorf("decided after %v, before the database was free", waited)
	}
	r.quiet(t, 1500*time.Millisecond)
	if info := br.info(t); info.NumAckPending != 0 || info.NumRedelivered != 0 || drops() != 0 || o.count(t) != 1 {
		t.Errorf("JetStream: %d awaiting ack, %d redelivered, %d dropped; %d orders; want 0, 0, 0, 1",
			info.NumAckPending, info.NumRedelivered, drops(), o.count(t))
	}
}

// TestStreamRecreated: a stream deleted and created again reuses sequence
// numbers; a new message at a sequence an old one had runs (its id carries
// the new stream's creation time), and a publisher's id that spells an id
// by position is another message.
func TestStreamRecreated(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: 5 * time.Second})
	o := newOrders(t, idem.Config{})
	c := o.consumer(t, idemqueue.Config{})
	b := br.bind(t, idemnats.Options{})
	handle := func(want idem.Outcome) string {
		t.Helper()
		msg := next(t, br.cons, 5*time.Second)
		if msg == nil {
			t.Fatal("no message")
		}
		d := b.Delivery(msg)
		m, _ := d.Message()
		dec, err := c.Handle(br.ctx, d, o.handler(0))
		if err != nil || dec.Action != idemqueue.Ack || dec.Outcome != want {
			t.Errorf("%s: %v %v (%v, settle: %v); want an ack, %v", m.ID, dec.Action, dec.Outcome, dec.Err, err, want)
		}
		return m.ID
	}
	if ack := br.publish(t, "order 7"); ack.Sequence != 1 {
		t.Fatalf("sequence %d, want 1", ack.Sequence)
	}
	old := handle(idem.Won)

	if err := br.js.DeleteStream(br.ctx, br.stream); err != nil {
		t.Fatal(err)
	}
	br.create(t)
	if ack := br.publish(t, "order 7"); ack.Sequence != 1 {
		t.Fatalf("sequence %d after the stream was created again, want 1", ack.Sequence)
	}
	again := handle(idem.Won) // not a replay of the old stream's message
	if again == old {
		t.Errorf("the new stream's message has the old one's id %q", old)
	}
	br.publish(t, "order 7", jetstream.WithMsgID(again))
	if spelled := handle(idem.Won); spelled == again {
		t.Errorf("a Nats-Msg-Id spelling a position has that position's id %q", again)
	}
	if runs := o.runs.Load(); runs != 3 {
		t.Errorf("%d runs, want 3", runs)
	}
}

// TestAckAfterDrop: an ack that arrives after JetStream dropped the
// message (MaxDeliver reached, the ack deadline passed) is confirmed by
// the server but reported as not settled: ErrDropped, in the settle error
// and the binding's stats. Through Handle, a handler slower than AckWait
// that is not reported in progress gets that error for its ack.
func TestAckAfterDrop(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: time.Second, MaxDeliver: 1})
	drops := br.drops(t)
	b := br.bind(t, idemnats.Options{ProgressEvery: -1})
	br.publish(t, "x", jetstream.WithMsgID("order-1"))
	msg := next(t, br.cons, 5*time.Second)
	if msg == nil {
		t.Fatal("no message")
	}
	d := b.Delivery(msg)
	waitFor(t, 10*time.Second, "the max-deliveries advisory", func() bool { return drops() == 1 })
	err := d.Ack(br.ctx)
	if !errors.Is(err, idemnats.ErrDropped) || !errors.Is(err, idemqueue.ErrNotSettled) {
		t.Errorf("ack after the drop: %v, want ErrDropped", err)
	}
	if st := b.Stats(); st.NotSettled != 1 || st.Advisories != 1 {
		t.Errorf("stats %+v, want one advisory and one settle that did not settle", st)
	}

	o := newOrders(t, idem.Config{})
	c := o.consumer(t, idemqueue.Config{})
	br.publish(t, "y", jetstream.WithMsgID("order-2"))
	msg = next(t, br.cons, 5*time.Second)
	if msg == nil {
		t.Fatal("no message")
	}
	dec, err := c.Handle(br.ctx, b.Delivery(msg), o.handler(1500*time.Millisecond))
	if dec.Action != idemqueue.Ack || dec.Outcome != idem.Won || !errors.Is(err, idemnats.ErrDropped) || !errorsContain(err, "delivery 1 of 1") {
		t.Errorf("Handle with a late ack: %v %v, settle: %v; want the work done and ErrDropped", dec.Action, dec.Outcome, err)
	}
	if st := b.Stats(); st.NotSettled != 2 || st.LateSettles < 1 {
		t.Errorf("stats %+v, want two settles that did not settle", st)
	}
}
