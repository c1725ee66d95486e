package idemqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/idemtest"
)

// orders is a test database: an idem store and an orders table.
type orders struct {
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	runs  atomic.Int64
}

func newOrders(t testing.TB, cfg idem.Config) *orders {
	t.Helper()
	ctx := context.Background()
	lite := idemtest.NewSQLite(t, cfg)
	db, store := lite.DB, lite.Store
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, msg TEXT NOT NULL, data BLOB NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &orders{db: db, store: store}
}

// handle inserts one order row for the message and returns its id.
func (o *orders) handle(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
	o.runs.Add(1)
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO orders (msg, data) VALUES (?, ?) RETURNING id`, m.Queue+"/"+m.ID, m.Data).Scan(&id); err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "order %d", id), nil
}

func (o *orders) count(t testing.TB) int {
	t.Helper()
	var n int
	if err := o.db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func newConsumer(t testing.TB, o *orders, cfg idemqueue.Config) *idemqueue.Consumer[*sql.Tx] {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = "orders"
	}
	c, err := idemqueue.New(o.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func msg(queue, id, data string) idemqueue.Message {
	return idemqueue.Message{Queue: queue, ID: id, Data: []byte(data), Delivery: 1}
}

// TestProcessOnce: the first delivery runs the work and acks with its
// result; every redelivery acks with the stored result and runs nothing.
func TestProcessOnce(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	m := msg("orders.new", "m-1", `{"item":1}`)
	first := c.Process(t.Context(), m, o.handle)
	if first.Action != idemqueue.Ack || first.Outcome != idem.Won || string(first.Result) != "order 1" || first.Err != nil {
		t.Fatalf("first delivery: %+v, want ack, won, order 1", first)
	}
	for i := range 3 {
		m.Delivery = i + 2
		again := c.Process(t.Context(), m, o.handle)
		if again.Action != idemqueue.Ack || again.Outcome != idem.Replay || string(again.Result) != "order 1" || again.Err != nil {
			t.Fatalf("redelivery %d: %+v, want ack, replay, order 1", i, again)
		}
	}
	if runs, n := o.runs.Load(), o.count(t); runs != 1 || n != 1 {
		t.Errorf("%d runs, %d orders; want 1 and 1", runs, n)
	}
}

// TestScopes: the same id on another queue, or for a consumer of another
// name, is another message.
func TestScopes(t *testing.T) {
	o := newOrders(t, idem.Config{})
	orders, audit := newConsumer(t, o, idemqueue.Config{Name: "orders"}), newConsumer(t, o, idemqueue.Config{Name: "audit"})
	for _, tc := range []struct {
		c *idemqueue.Consumer[*sql.Tx]
		m idemqueue.Message
	}{
		{orders, msg("eu", "m-1", "x")},
		{orders, msg("us", "m-1", "x")},
		{audit, msg("eu", "m-1", "x")},
	} {
		if d := tc.c.Process(t.Context(), tc.m, o.handle); d.Outcome != idem.Won {
			t.Errorf("%s: %+v, want a fresh message", tc.m.Queue, d)
		}
	}
	if n := o.count(t); n != 3 {
		t.Errorf("%d orders, want 3", n)
	}
	page, err := o.store.List(t.Context(), idem.ListFilter{ScopePrefix: idem.ScopePrefix("orders")})
	if err != nil {
		t.Fatal(err)
	}
	var scopes []string
	for _, r := range page.Records {
		scopes = append(scopes, r.Scope)
	}
	if want := []string{idemqueue.Scope("orders", "eu"), idemqueue.Scope("orders", "us")}; !slices.Equal(scopes, want) {
		t.Errorf("the orders consumer's scopes: %q, want %q", scopes, want)
	}
	if s := idemqueue.Scope("orders", "eu"); s != `"orders" queue:"eu"` {
		t.Errorf("Scope = %q", s)
	}
}

// TestFormerScopes: a message processed before the upgrade, whose record
// is under idem v0.0's scope form, is acked as a replay when it is
// redelivered to a consumer with Config.FormerScopes, without running the
// handler; without FormerScopes it is processed again.
func TestFormerScopes(t *testing.T) {
	for _, former := range []bool{true, false} {
		t.Run(fmt.Sprint("FormerScopes=", former), func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			c := newConsumer(t, o, idemqueue.Config{Name: "orders", FormerScopes: former})
			m := msg("eu", "m-1", "x")
			if d := c.Process(t.Context(), m, o.handle); d.Outcome != idem.Won {
				t.Fatalf("first: %+v", d)
			}
			if _, err := o.db.ExecContext(t.Context(), "UPDATE "+idem.DefaultTable+" SET scope = ? WHERE scope = ?",
				`queue "orders" "eu"`, idemqueue.Scope("orders", "eu")); err != nil {
				t.Fatal(err)
			}
			d := c.Process(t.Context(), m, o.handle)
			want := map[bool]idem.Outcome{true: idem.Replay, false: idem.Won}[former]
			if d.Outcome != want || d.Action != idemqueue.Ack || o.count(t) != map[bool]int{true: 1, false: 2}[former] {
				t.Errorf("redelivery: %+v with %d orders, want %v and acked", d, o.count(t), want)
			}
		})
	}
}

// TestDecisions: what each failure does to the delivery, and that nothing
// is committed unless it is acked.
func TestDecisions(t *testing.T) {
	boom := errors.New("warehouse service down")
	for _, tc := range []struct {
		name    string
		cfg     idemqueue.Config
		idemCfg idem.Config
		prepare func(t *testing.T, c *idemqueue.Consumer[*sql.Tx], o *orders)
		m       idemqueue.Message
		handler func(o *orders) idemqueue.Handler[*sql.Tx]
		action  idemqueue.Action
		delay   time.Duration
		errIs   []error
	}{
		{
			name: "same id, other data: reject",
			prepare: func(t *testing.T, c *idemqueue.Consumer[*sql.Tx], o *orders) {
				c.Process(t.Context(), msg("q", "m-1", "first"), o.handle)
			},
			m:      msg("q", "m-1", "second"),
			action: idemqueue.Reject, errIs: []error{idemqueue.ErrMismatch},
		},
		{
			name: "handler error: retry with backoff by delivery",
			m:    idemqueue.Message{Queue: "q", ID: "m-1", Data: []byte("x"), Delivery: 3},
			handler: func(o *orders) idemqueue.Handler[*sql.Tx] {
				return func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
					o.handle(ctx, tx, m)
					return nil, boom
				}
			},
			action: idemqueue.Retry, delay: idemqueue.DefaultRetryDelay(3), errIs: []error{boom},
		},
		{
			name: "permanent handler error: reject",
			m:    msg("q", "m-1", "x"),
			handler: func(o *orders) idemqueue.Handler[*sql.Tx] {
				return func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
					o.handle(ctx, tx, m)
					return nil, idemqueue.Permanent(boom)
				}
			},
			action: idemqueue.Reject, errIs: []error{idemqueue.ErrPermanent, boom},
		},
		{
			name: "custom Permanent",
			cfg:  idemqueue.Config{Permanent: func(err error) bool { return errors.Is(err, boom) }},
			m:    msg("q", "m-1", "x"),
			handler: func(o *orders) idemqueue.Handler[*sql.Tx] {
				return func(context.Context, *sql.Tx, idemqueue.Message) ([]byte, error) { return nil, boom }
			},
			action: idemqueue.Reject, errIs: []error{boom},
		},
		{
			name:   "message without an id: reject",
			m:      msg("q", "", "x"),
			action: idemqueue.Reject, errIs: []error{idem.ErrInvalidKey},
		},
		{
			name:   "key function fails: reject",
			cfg:    idemqueue.Config{Key: func(idemqueue.Message) (string, error) { return "", boom }},
			m:      msg("q", "m-1", "x"),
			action: idemqueue.Reject, errIs: []error{boom},
		},
		{
			name:    "result too large to store: reject",
			idemCfg: idem.Config{MaxBody: 4},
			m:       msg("q", "m-1", "x"),
			action:  idemqueue.Reject, errIs: []error{idem.ErrTooLarge},
		},
		{
			name: "status 0 refused by the store's policy: retry",
			idemCfg: idem.Config{StoreStatus: func(status int) bool {
				return status != idem.NoStatus
			}},
			m:      msg("q", "m-1", "x"),
			action: idemqueue.Retry, delay: idemqueue.DefaultRetryDelay(1),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrders(t, tc.idemCfg)
			c := newConsumer(t, o, tc.cfg)
			before := 0
			if tc.prepare != nil {
				tc.prepare(t, c, o)
				before = o.count(t)
			}
			h := o.handle
			if tc.handler != nil {
				h = tc.handler(o)
			}
			d := c.Process(t.Context(), tc.m, h)
			if d.Action != tc.action || d.Delay != tc.delay || d.Err == nil || len(d.Result) != 0 {
				t.Errorf("decision %+v, want %v after %v with an error and no result", d, tc.action, tc.delay)
			}
			for _, want := range tc.errIs {
				if !errors.Is(d.Err, want) {
					t.Errorf("error %v does not match %v", d.Err, want)
				}
			}
			if n := o.count(t); n != before {
				t.Errorf("%d orders after the delivery, want %d: nothing committed", n, before)
			}
		})
	}
}

// TestBusyWhileAnotherRuns: on SQLite another consumer's run of the same
// message holds the whole database, so a delivery meeting it cannot read
// the key's record: it is retried after InFlightDelay as ErrBusy (nobody is
// known to hold the key), not ErrInFlight; nothing runs twice.
func TestBusyWhileAnotherRuns(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 50 * time.Millisecond})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: 700 * time.Millisecond})
	entered, release := make(chan struct{}), make(chan struct{})
	slow := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		res, err := o.handle(ctx, tx, m)
		close(entered)
		<-release
		return res, err
	}
	m := msg("q", "m-1", "x")
	first := make(chan idemqueue.Decision, 1)
	go func() { first <- c.Process(context.Background(), m, slow) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery never ran")
	}
	d := c.Process(t.Context(), m, o.handle)
	close(release)
	if d.Action != idemqueue.Retry || d.Delay != 700*time.Millisecond || d.Outcome != idem.InFlight ||
		!errors.Is(d.Err, idemqueue.ErrBusy) || errors.Is(d.Err, idemqueue.ErrInFlight) {
		t.Errorf("redelivery while the database is held: %+v, want retry after 700ms, ErrBusy and not ErrInFlight", d)
	}
	if d := <-first; d.Action != idemqueue.Ack {
		t.Errorf("first delivery: %+v", d)
	}
	if runs := o.runs.Load(); runs != 1 {
		t.Errorf("%d runs, want 1", runs)
	}
}

// scopeOf returns the scope c gives messages of queue, read back from a
// record.
func scopeOf(t *testing.T, c *idemqueue.Consumer[*sql.Tx], o *orders, queue string) string {
	t.Helper()
	m := msg(queue, "scope-probe", "x")
	c.Process(t.Context(), m, o.handle)
	d := c.Process(t.Context(), m, o.handle)
	if d.Outcome != idem.Replay || d.Record.Scope == "" {
		t.Fatalf("probe: %+v, want a replay with its record", d)
	}
	return d.Record.Scope
}

// TestInFlight: a delivery whose key another holder keeps (a lease, in
// the store) is retried after InFlightDelay as ErrInFlight, with the
// holder's record.
func TestInFlight(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 50 * time.Millisecond})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: 700 * time.Millisecond})
	m := msg("q", "m-1", "x")
	lease, err := o.store.Lease(t.Context(), idem.Request{Scope: scopeOf(t, c, o, "q"), Key: m.ID, Fingerprint: idemqueue.DefaultFingerprint(m)})
	if err != nil || lease.Outcome != idem.Won {
		t.Fatalf("lease: %v, %v", lease, err)
	}
	defer func() { _ = lease.Release(context.Background()) }()
	d := c.Process(t.Context(), m, o.handle)
	if d.Action != idemqueue.Retry || d.Delay != 700*time.Millisecond || d.Outcome != idem.InFlight ||
		!errors.Is(d.Err, idemqueue.ErrInFlight) || d.Record.Key != m.ID || d.Record.LeaseUntil.IsZero() {
		t.Errorf("delivery while leased: %+v, want retry after 700ms, ErrInFlight, the holder's record", d)
	}
	if runs := o.runs.Load(); runs != 1 { // the probe's
		t.Errorf("%d runs, want 1", runs)
	}
}

// TestBusyDatabase: another transaction holds SQLite's write lock longer
// than WaitBound. Process answers ErrBusy; Handle, on a delivery it can
// keep alive, extends it, waits the lock out and does the work, settling
// once with an ack: the busy database costs no delivery.
func TestBusyDatabase(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 50 * time.Millisecond})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: 20 * time.Millisecond, InFlightWait: 20 * time.Second})
	hold := func(t *testing.T, d time.Duration) {
		t.Helper()
		conn, err := o.db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.ExecContext(t.Context(), `BEGIN IMMEDIATE`); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(d, func() {
			_, _ = conn.ExecContext(context.Background(), `ROLLBACK`)
			conn.Close()
		})
	}

	hold(t, 400*time.Millisecond)
	d := c.Process(t.Context(), msg("q", "m-1", "x"), o.handle)
	if d.Action != idemqueue.Retry || d.Outcome != idem.InFlight || !errors.Is(d.Err, idemqueue.ErrBusy) || errors.Is(d.Err, idemqueue.ErrInFlight) {
		t.Errorf("Process on a busy database: %+v, want retry with ErrBusy, not ErrInFlight", d)
	}
	time.Sleep(500 * time.Millisecond)

	hold(t, 600*time.Millisecond)
	del := &extendingDelivery{delivery: delivery{m: msg("q", "m-2", "x")}, every: 10 * time.Millisecond}
	dec, err := c.Handle(t.Context(), del, o.handle)
	if err != nil || dec.Action != idemqueue.Ack || dec.Outcome != idem.Won || del.settle != "ack" {
		t.Errorf("Handle on a busy database: %+v, %v, settled %q; want the work done and acked", dec, err, del.settle)
	}
	if del.extends.Load() == 0 {
		t.Error("the delivery was never extended while the database was busy")
	}
	if n := o.count(t); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestHandleWaitsForHolder: a kept-alive delivery meeting another run of
// its message waits for it instead of settling with Retry, and then acks
// the stored result.
func TestHandleWaitsForHolder(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 30 * time.Millisecond})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: 20 * time.Millisecond, InFlightWait: 20 * time.Second})
	entered := make(chan struct{})
	slow := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		res, err := o.handle(ctx, tx, m)
		close(entered)
		time.Sleep(400 * time.Millisecond)
		return res, err
	}
	m := msg("q", "m-1", "x")
	first := make(chan idemqueue.Decision, 1)
	go func() { first <- c.Process(context.Background(), m, slow) }()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first delivery never ran")
	}
	del := &extendingDelivery{delivery: delivery{m: m}, every: 10 * time.Millisecond}
	dec, err := c.Handle(t.Context(), del, o.handle)
	if err != nil || dec.Action != idemqueue.Ack || dec.Outcome != idem.Replay || string(dec.Result) != "order 1" || del.settle != "ack" {
		t.Errorf("second delivery: %+v, %v, settled %q; want an ack of the first run's result", dec, err, del.settle)
	}
	if d := <-first; d.Action != idemqueue.Ack {
		t.Errorf("first delivery: %+v", d)
	}
	if runs := o.runs.Load(); runs != 1 {
		t.Errorf("%d runs, want 1", runs)
	}
}

// TestHandleWaitBounds: the wait for a key in flight ends at the holder's
// lease end (Do does not take over an expired lease, so waiting longer
// gains nothing) and at InFlightWait; a delivery that cannot be kept alive
// is retried at once.
func TestHandleWaitBounds(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 30 * time.Millisecond, Lease: 300 * time.Millisecond})
	for _, tc := range []struct {
		name      string
		every     time.Duration
		wait      time.Duration
		atLeast   time.Duration
		atMost    time.Duration
		extending bool
	}{
		{"until the lease ends", 10 * time.Millisecond, time.Minute, 0, 20 * time.Second, true},
		{"until InFlightWait", 10 * time.Millisecond, 150 * time.Millisecond, 100 * time.Millisecond, 20 * time.Second, true},
		{"not kept alive", 0, time.Minute, 0, 20 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newConsumer(t, o, idemqueue.Config{Name: tc.name, InFlightDelay: 20 * time.Millisecond, InFlightWait: tc.wait})
			m := msg("q", "m-1", "x")
			lease, err := o.store.Lease(t.Context(), idem.Request{Scope: scopeOf(t, c, o, "q"), Key: m.ID, Fingerprint: idemqueue.DefaultFingerprint(m)})
			if err != nil || lease.Outcome != idem.Won {
				t.Fatalf("lease: %v, %v", lease, err)
			}
			if tc.wait < time.Minute {
				// Keep the lease alive past InFlightWait.
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Millisecond):
							_ = lease.Extend(context.Background())
						}
					}
				}()
			}
			del := &extendingDelivery{delivery: delivery{m: m}, every: tc.every}
			start := time.Now()
			dec, _ := c.Handle(t.Context(), del, o.handle)
			took := time.Since(start)
			if dec.Action != idemqueue.Retry || !errors.Is(dec.Err, idemqueue.ErrInFlight) || del.settle != "retry 20ms" {
				t.Errorf("%+v, settled %q; want a retry after InFlightDelay", dec, del.settle)
			}
			if took < tc.atLeast || took > tc.atMost {
				t.Errorf("Handle took %v, want between %v and %v", took, tc.atLeast, tc.atMost)
			}
			if got := del.extends.Load() > 0; got != tc.extending {
				t.Errorf("extended: %v, want %v", got, tc.extending)
			}
		})
	}
}

// TestStopping: a consumer whose context ends hands the message back at
// once.
func TestStopping(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	d := c.Process(ctx, msg("q", "m-1", "x"), func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		cancel()
		return nil, ctx.Err()
	})
	if d.Action != idemqueue.Retry || d.Delay != 0 || !errors.Is(d.Err, context.Canceled) {
		t.Errorf("stopping: %+v, want retry at once", d)
	}
}

// TestCustomKey: a key picked from the message (here its data) makes two
// ids of one order one message.
func TestCustomKey(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{
		Key: func(m idemqueue.Message) (string, error) { return "order-" + string(m.Data), nil },
		Fingerprint: func(m idemqueue.Message) idem.Fingerprint {
			return idemqueue.DefaultFingerprint(idemqueue.Message{Queue: m.Queue, Data: m.Data})
		},
	})
	a := c.Process(t.Context(), msg("q", "id-1", "42"), o.handle)
	b := c.Process(t.Context(), msg("q", "id-2", "42"), o.handle)
	if a.Outcome != idem.Won || b.Outcome != idem.Replay || o.count(t) != 1 {
		t.Errorf("%v then %v with %d orders; want won, replay, 1", a.Outcome, b.Outcome, o.count(t))
	}
}

// TestRedeliveryStorm: many consumers processing the same messages at once
// (as after a broker redelivers a batch) produce one effect per message.
func TestRedeliveryStorm(t *testing.T) {
	const messages, consumers = 40, 6
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: time.Millisecond, RetryDelay: func(int) time.Duration { return time.Millisecond }})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var acks, replays atomic.Int64
	for w := range consumers {
		wg.Go(func() {
			for i := range messages {
				m := msg("q", fmt.Sprintf("m-%d", (i+w*7)%messages), "x")
				for attempt := 1; attempt <= 200; attempt++ {
					d := c.Process(ctx, m, o.handle)
					if d.Action == idemqueue.Ack {
						acks.Add(1)
						if d.Outcome == idem.Replay {
							replays.Add(1)
						}
						break
					}
					if d.Action == idemqueue.Reject {
						t.Errorf("%s: rejected: %v", m.ID, d.Err)
						return
					}
					time.Sleep(d.Delay)
				}
			}
		})
	}
	wg.Wait()
	if n := o.count(t); n != messages || acks.Load() != messages*consumers || replays.Load() != messages*(consumers-1) {
		t.Errorf("%d orders, %d acks, %d replays; want %d, %d, %d", n, acks.Load(), replays.Load(), messages, messages*consumers, messages*(consumers-1))
	}
}

// delivery is a scripted Delivery that records how it was settled.
type delivery struct {
	m      idemqueue.Message
	err    error
	settle string
	ctxErr error
}

func (d *delivery) Message() (idemqueue.Message, error) { return d.m, d.err }
func (d *delivery) Ack(ctx context.Context) error {
	d.settle, d.ctxErr = "ack", ctx.Err()
	return nil
}
func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	d.settle, d.ctxErr = fmt.Sprintf("retry %v", delay), ctx.Err()
	return nil
}
func (d *delivery) Reject(ctx context.Context, reason error) error {
	d.settle, d.ctxErr = "reject: "+reason.Error(), ctx.Err()
	return errors.New("broker gone")
}

// extendingDelivery is a scripted Delivery that Handle can keep alive.
type extendingDelivery struct {
	delivery
	every   time.Duration
	extends atomic.Int64
}

func (d *extendingDelivery) ExtendEvery() time.Duration { return d.every }
func (d *extendingDelivery) Extend(context.Context) error {
	d.extends.Add(1)
	return nil
}

// TestHandle: Handle settles a delivery as Process decided, with a live
// context even when the caller's has ended, and reports settling errors.
func TestHandle(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{InFlightDelay: time.Second})
	d := &delivery{m: msg("q", "m-1", "x")}
	if dec, err := c.Handle(t.Context(), d, o.handle); err != nil || dec.Action != idemqueue.Ack || d.settle != "ack" {
		t.Errorf("first: %+v %v, settled %q", dec, err, d.settle)
	}
	d = &delivery{m: msg("q", "m-1", "other")}
	dec, err := c.Handle(t.Context(), d, o.handle)
	if dec.Action != idemqueue.Reject || !strings.HasPrefix(d.settle, "reject: ") || err == nil || !strings.Contains(err.Error(), "broker gone") {
		t.Errorf("mismatch: %+v %v, settled %q; want a reject and the broker's error", dec, err, d.settle)
	}
	d = &delivery{err: errors.New("no metadata")}
	if dec, _ := c.Handle(t.Context(), d, o.handle); dec.Action != idemqueue.Reject || !strings.Contains(d.settle, "no metadata") {
		t.Errorf("unreadable delivery: %+v, settled %q", dec, d.settle)
	}
	d = &delivery{m: idemqueue.Message{Delivery: 2}, err: idemqueue.Temporary(errors.New("stream info timed out"))}
	if dec, _ := c.Handle(t.Context(), d, o.handle); dec.Action != idemqueue.Retry || d.settle != "retry 200ms" || !errors.Is(dec.Err, idemqueue.ErrTemporary) {
		t.Errorf("delivery not identified for now: %+v, settled %q; want a retry with backoff", dec, d.settle)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	d = &delivery{m: msg("q", "m-2", "x")}
	if dec, _ := c.Handle(ctx, d, o.handle); dec.Action != idemqueue.Retry || d.settle != "retry 0s" || d.ctxErr != nil {
		t.Errorf("ended context: %+v, settled %q with context error %v; want a retry settled on a live context", dec, d.settle, d.ctxErr)
	}
}

// TestNewRefuses: every Config New refuses is an idem.ErrInvalidConfig.
func TestNewRefuses(t *testing.T) {
	o := newOrders(t, idem.Config{})
	for _, tc := range []struct {
		name  string
		store *idem.Store[*sql.Tx]
		cfg   idemqueue.Config
	}{
		{"nil store", nil, idemqueue.Config{Name: "x"}},
		{"no name", o.store, idemqueue.Config{}},
		{"negative in-flight delay", o.store, idemqueue.Config{Name: "x", InFlightDelay: -1}},
		{"negative settle timeout", o.store, idemqueue.Config{Name: "x", SettleTimeout: -time.Second}},
		{"negative in-flight wait", o.store, idemqueue.Config{Name: "x", InFlightWait: -time.Second}},
		{"negative panic deliveries", o.store, idemqueue.Config{Name: "x", MaxPanicDeliveries: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := idemqueue.New(tc.store, tc.cfg)
			if c != nil || !errors.Is(err, idem.ErrInvalidConfig) {
				t.Errorf("New = %v, %v; want no consumer and an error matching idem.ErrInvalidConfig", c, err)
			}
		})
	}
}

func TestDefaultRetryDelay(t *testing.T) {
	for delivery, want := range map[int]time.Duration{0: 100 * time.Millisecond, 1: 100 * time.Millisecond, 2: 200 * time.Millisecond,
		5: 1600 * time.Millisecond, 20: 30 * time.Second, 1000: 30 * time.Second} {
		if got := idemqueue.DefaultRetryDelay(delivery); got != want {
			t.Errorf("DefaultRetryDelay(%d) = %v, want %v", delivery, got, want)
		}
	}
}

// TestHandlerErrorMatchingNotAnOutcome: a handler's error that wraps
// idem.ErrNotAnOutcome is still the handler's error: a permanent one
// rejects the message, nothing committed, instead of being taken for a
// response the store refused and retried until the broker gives up.
func TestHandlerErrorMatchingNotAnOutcome(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	h := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders (msg, data) VALUES (?, ?)`, m.ID, m.Data); err != nil {
			return nil, err
		}
		return nil, idemqueue.Permanent(fmt.Errorf("malformed order: %w", idem.ErrNotAnOutcome))
	}
	d := c.Process(t.Context(), msg("q", "m-1", "x"), h)
	if d.Action != idemqueue.Reject || !idemqueue.IsPermanent(d.Err) || !strings.Contains(d.Err.Error(), "malformed order") {
		t.Errorf("decision %+v; want Reject with the handler's permanent error", d)
	}
	if n := o.count(t); n != 0 {
		t.Errorf("%d orders; want none committed", n)
	}
}

// TestHandlerRetriedBySuccess: a handler that meets a retryable error on
// its first attempt and succeeds on the second, inside one Process, is
// acknowledged: the first attempt's error, which the store retried, does
// not decide the message.
func TestHandlerRetriedBySuccess(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	attempts := 0
	h := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		attempts++
		if attempts == 1 {
			return nil, fmt.Errorf("first attempt: %w", idem.ErrSerialization)
		}
		return o.handle(ctx, tx, m)
	}
	d := c.Process(t.Context(), msg("q", "m-1", "x"), h)
	if d.Action != idemqueue.Ack || d.Outcome != idem.Won || attempts != 2 {
		t.Errorf("decision %+v after %d attempts; want Ack, Won after 2", d, attempts)
	}
	if n := o.count(t); n != 1 {
		t.Errorf("%d orders; want 1", n)
	}
}
