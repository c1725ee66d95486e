package nats_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
)

// batchHandler inserts every message's order with one statement and
// records the size of each call.
func (o *orders) batchHandler(mu *sync.Mutex, sizes *[]int) idemqueue.BatchHandler[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx, ms []idemqueue.Message) ([][]byte, error) {
		mu.Lock()
		*sizes = append(*sizes, len(ms))
		mu.Unlock()
		o.runs.Add(int64(len(ms)))
		q := `INSERT INTO orders (msg) VALUES ` + strings.TrimSuffix(strings.Repeat("(?), ", len(ms)), ", ")
		args := make([]any, len(ms))
		for i, m := range ms {
			args[i] = m.ID
		}
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			return nil, err
		}
		return nil, nil
	}
}

// TestFetchBatch: FetchBatch takes up to max messages per pull, does their
// work in one transaction per batch and acknowledges them after the
// commit; messages whose work committed but whose acks never came are
// redelivered after AckWait and acknowledged as replays, without work.
func TestFetchBatch(t *testing.T) {
	const messages, size = 25, 10
	br := setup(t, jetstream.ConsumerConfig{AckWait: 2 * time.Second})
	b := br.bind(t, idemnats.Options{})
	o := newOrders(t, idem.Config{})
	c := o.consumer(t, idemqueue.Config{})
	for i := range messages {
		br.publish(t, "x", jetstream.WithMsgID(fmt.Sprintf("order-%d", i)))
	}
	var (
		mu      sync.Mutex
		sizes   []int
		settles []settle
	)
	report := func(msg jetstream.Msg, d idemqueue.Decision, err error) {
		m, _ := b.Delivery(msg).Message()
		mu.Lock()
		defer mu.Unlock()
		settles = append(settles, settle{id: m.ID, delivery: m.Delivery, dec: d, settleErr: err})
	}

	// The first batch commits, and its acks are lost: ProcessBatch does the
	// work without settling.
	batch, err := br.cons.Fetch(size, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var lost []idemqueue.Message
	for msg := range batch.Messages() {
		m, err := b.Delivery(msg).Message()
		if err != nil {
			t.Fatal(err)
		}
		lost = append(lost, m)
	}
	for i, d := range c.ProcessBatch(br.ctx, lost, o.batchHandler(&mu, &sizes)) {
		if d.Action != idemqueue.Ack || d.Outcome != idem.Won {
			t.Fatalf("first batch, %s: %+v", lost[i].ID, d)
		}
	}

	// Then a consumer loop fetches until every message is acknowledged,
	// the lost ones after their redelivery.
	deadline := time.Now().Add(time.Minute)
	acked := map[string]idem.Outcome{}
	for len(acked) < messages && time.Now().Before(deadline) {
		if _, err := idemnats.FetchBatch(br.ctx, b, br.cons, c, size, time.Second, o.batchHandler(&mu, &sizes), report); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		for _, s := range settles {
			if s.settleErr != nil {
				t.Errorf("%s: settle: %v", s.id, s.settleErr)
			}
			if s.dec.Action == idemqueue.Ack {
				acked[s.id] = s.dec.Outcome
			}
		}
		settles = nil
		mu.Unlock()
	}
	if len(acked) != messages {
		t.Fatalf("%d of %d messages acknowledged within a minute", len(acked), messages)
	}
	for _, m := range lost {
		if acked[m.ID] != idem.Replay {
			t.Errorf("%s: acknowledged as %v after its redelivery; want a replay", m.ID, acked[m.ID])
		}
	}
	if n := o.count(t); n != messages || o.runs.Load() != messages {
		t.Errorf("%d orders, %d handler runs; want %d each", n, o.runs.Load(), messages)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, n := range sizes {
		if n > size {
			t.Errorf("a batch of %d messages; want at most %d", n, size)
		}
	}
	if len(sizes) >= messages {
		t.Errorf("%d handler calls for %d messages: not batched", len(sizes), messages)
	}
	if pending := br.info(t).NumAckPending; pending != 0 {
		t.Errorf("%d messages still pending acknowledgement", pending)
	}
}

// TestFetchBatchRefuses: a batch size out of range or a wait that is not
// positive is a configuration error, before anything is fetched.
func TestFetchBatchRefuses(t *testing.T) {
	br := setup(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second})
	b := br.bind(t, idemnats.Options{})
	o := newOrders(t, idem.Config{})
	c := o.consumer(t, idemqueue.Config{})
	var (
		mu    sync.Mutex
		sizes []int
	)
	for _, tc := range []struct {
		max  int
		wait time.Duration
	}{{0, time.Second}, {idem.MaxBatch + 1, time.Second}, {10, 0}} {
		if _, err := idemnats.FetchBatch(br.ctx, b, br.cons, c, tc.max, tc.wait, o.batchHandler(&mu, &sizes), nil); err == nil || !strings.Contains(err.Error(), "idemnats") {
			t.Errorf("max %d, wait %v: %v; want a configuration error", tc.max, tc.wait, err)
		}
	}
}
