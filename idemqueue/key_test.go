package idemqueue_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
)

// TestKeyForGolden pins KeyFor's derivation: records stored by one
// version must keep matching the redeliveries another version sees. The
// hashes were computed outside Go, with printf %s ID | sha256sum.
func TestKeyForGolden(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, id, want string }{
		{"valid id", "order-1", "order-1"},
		{"NATS id", "id:order-1", "id:order-1"},
		{"space", " ", " "},
		{"printable ASCII edges", " ~!", " ~!"},
		{"255 bytes", strings.Repeat("a", 255), strings.Repeat("a", 255)},
		{"NATS id of 252 bytes", "id:" + strings.Repeat("x", 252), "id:" + strings.Repeat("x", 252)},
		{"derived-looking but not the prefix", "idemqueue-sha256", "idemqueue-sha256"},
		{"empty", "", ""},

		{"non-ASCII", "é", "idemqueue-sha256:4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c"},
		{"UTF-8 in a NATS id", "bestellung-ä-1", "idemqueue-sha256:c178b5e8d95e56ea529b6d8f9dba5fcbd5256b51893b358759e9cea4a1792020"},
		{"invalid UTF-8", "order-\xe9-1", "idemqueue-sha256:7c41388b2e7f2827f22d3d962fb64c2097b7d188b4eff4d36bba8589ed7f9bce"},
		{"NUL", "id:\x00", "idemqueue-sha256:fd0aeb2b1720e65c5b7b14b327b757b287374c720dc9c5fcd7d29ea7501e5a9a"},
		{"256 bytes", strings.Repeat("a", 256), "idemqueue-sha256:02d7160d77e18c6447be80c2e355c7ed4388545271702c50253b0914c65ce5fe"},
		{"NATS id of 253 bytes", "id:" + strings.Repeat("x", 253), "idemqueue-sha256:8715766dd11ca25821ab91ac62b2248d6b1fed45d002b7a6640c9f6ee2c0c7b9"},
		{"reserved prefix", "idemqueue-sha256:x", "idemqueue-sha256:009d8db8c78db976af9c6993e24daf848e73b6202d4b774940d039e6af3a20cd"},
		{"another id's derived key", "idemqueue-sha256:4a99557e4033c3539de2eb65472017cad5f9557f7a0625a09f1c3f6e2ba69c4c",
			"idemqueue-sha256:e678d28b5390f0d79229a0961789e41f8c55ce5b591eabcede1ea9efa2516fa9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := idemqueue.KeyFor(tc.id)
			if got != tc.want {
				t.Errorf("KeyFor(%q) = %q, want %q", tc.id, got, tc.want)
			}
			if tc.id != "" {
				if err := idem.ValidateKey(got); err != nil {
					t.Errorf("KeyFor(%q) = %q, not a valid key: %v", tc.id, got, err)
				}
			}
		})
	}
}

// TestKeyForNamespaces: over ids near every edge (valid, too long, not
// printable ASCII, beginning with the reserved prefix, equal to another
// id's derived key), no two ids share a key, and every key is valid.
func TestKeyForNamespaces(t *testing.T) {
	t.Parallel()
	ids := []string{"a", "A", " ", "~", "id:1", "seq:1@2024-01-01T00:00:00Z",
		strings.Repeat("k", 254), strings.Repeat("k", 255), strings.Repeat("k", 256), strings.Repeat("k", 1000),
		"é", "e\u0301", "\x00", "\x7f", "\x1f", "tab\t", "line\n", "\xff",
		"idemqueue-sha256:", "idemqueue-sha256:a", "idemqueue-sha25", "Idemqueue-sha256:a",
	}
	// Every derived key, given as an id in its turn, and derived again.
	for _, id := range ids {
		if k := idemqueue.KeyFor(id); k != id {
			ids = append(ids, k, idemqueue.KeyFor(k))
		}
	}
	seen := make(map[string]string, len(ids))
	for _, id := range ids {
		k := idemqueue.KeyFor(id)
		if err := idem.ValidateKey(k); err != nil {
			t.Errorf("KeyFor(%q) = %q: %v", id, k, err)
		}
		if other, ok := seen[k]; ok && other != id {
			t.Errorf("KeyFor(%q) = KeyFor(%q) = %q", id, other, k)
		}
		seen[k] = id
	}
}

// memBroker is an in-memory at-least-once broker: it redelivers a message
// until it is acked or rejected, and loses the first ack of every message
// (as when a consumer dies between its commit and its ack).
type memBroker struct {
	mu       sync.Mutex
	ready    []*memDelivery
	acks     map[string]int // acks received, by message id
	rejected map[string]error
}

func newMemBroker() *memBroker {
	return &memBroker{acks: map[string]int{}, rejected: map[string]error{}}
}

func (b *memBroker) publish(queue, id, data string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ready = append(b.ready, &memDelivery{b: b, m: idemqueue.Message{Queue: queue, ID: id, Data: []byte(data), Delivery: 1}})
}

// next returns the next delivery, or nil when the queue is empty.
func (b *memBroker) next() *memDelivery {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.ready) == 0 {
		return nil
	}
	d := b.ready[0]
	b.ready = b.ready[1:]
	return d
}

func (b *memBroker) redeliver(d *memDelivery) {
	m := d.m
	m.Delivery++
	b.ready = append(b.ready, &memDelivery{b: b, m: m})
}

type memDelivery struct {
	b *memBroker
	m idemqueue.Message
}

func (d *memDelivery) Message() (idemqueue.Message, error) { return d.m, nil }

func (d *memDelivery) Ack(context.Context) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.b.acks[d.m.ID]++
	if d.b.acks[d.m.ID] == 1 {
		d.b.redeliver(d) // the first ack is lost
	}
	return nil
}

func (d *memDelivery) Retry(context.Context, time.Duration) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.b.redeliver(d)
	return nil
}

func (d *memDelivery) Reject(_ context.Context, reason error) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.b.rejected[d.m.ID] = reason
	return nil
}

// TestIdsThatAreNotKeys: through a broker that redelivers every message
// once after its first ack, a message whose id is not a valid key (non-
// ASCII, longer than idem.MaxKeyBytes, holding a NUL) runs once and its
// redelivery replays it, instead of being rejected unprocessed. An id
// equal to another's derived key is another message, and a message
// without an id is rejected.
func TestIdsThatAreNotKeys(t *testing.T) {
	o := newOrders(t, idem.Config{})
	c := newConsumer(t, o, idemqueue.Config{})
	ids := []string{"bestellung-ä-1", strings.Repeat("x", 300), "order\x00-1", "order-\xff",
		idemqueue.KeyFor("bestellung-ä-1"), "order-1"}
	br := newMemBroker()
	for _, id := range ids {
		br.publish("orders", id, "data of "+id)
	}
	br.publish("orders", "", "no id")
	outcomes := map[string][]idem.Outcome{}
	for range 100 {
		d := br.next()
		if d == nil {
			break
		}
		dec, err := c.Handle(t.Context(), d, o.handle)
		if err != nil {
			t.Errorf("message %q: settle: %v", d.m.ID, err)
		}
		outcomes[d.m.ID] = append(outcomes[d.m.ID], dec.Outcome)
	}
	if d := br.next(); d != nil {
		t.Fatalf("message %q still queued after 100 deliveries", d.m.ID)
	}
	for _, id := range ids {
		if got := outcomes[id]; len(got) != 2 || got[0] != idem.Won || got[1] != idem.Replay || br.acks[id] != 2 || br.rejected[id] != nil {
			t.Errorf("message %q: outcomes %v, %d acks, rejected: %v; want won then replay, both acked", id, got, br.acks[id], br.rejected[id])
		}
		if _, err := o.store.Lookup(t.Context(), idemqueue.Scope("orders", "orders"), idemqueue.KeyFor(id)); err != nil {
			t.Errorf("message %q: no record under KeyFor: %v", id, err)
		}
	}
	if err := br.rejected[""]; !errors.Is(err, idem.ErrInvalidKey) || br.acks[""] != 0 {
		t.Errorf("message without an id: rejected with %v after %d acks; want rejected with idem.ErrInvalidKey, never acked", err, br.acks[""])
	}
	if runs, n := o.runs.Load(), o.count(t); runs != int64(len(ids)) || n != len(ids) {
		t.Errorf("%d runs, %d orders; want %d each", runs, n, len(ids))
	}
}
