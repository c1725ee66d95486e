package idemnats

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// maxDrops bounds how many dropped messages a Binding remembers.
const maxDrops = 10000

// advisory is the part of JetStream's max-deliveries advisory
// (io.nats.jetstream.advisory.v1.max_deliver) a Binding reads.
type advisory struct {
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
}

// drops remembers the messages JetStream dropped after MaxDeliver, by
// stream sequence, with the server's time of the drop.
type drops struct {
	mu    sync.Mutex
	at    map[uint64]time.Time
	order []uint64
	// changed is closed and replaced on every new drop.
	changed chan struct{}
}

func newDrops() *drops {
	return &drops{at: map[uint64]time.Time{}, changed: make(chan struct{})}
}

func (d *drops) add(seq uint64, at time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.at[seq]; !ok {
		d.order = append(d.order, seq)
	}
	d.at[seq] = at
	for len(d.order) > maxDrops {
		delete(d.at, d.order[0])
		d.order = d.order[1:]
	}
	close(d.changed)
	d.changed = make(chan struct{})
}

// dropped reports whether the message at seq stored at stored was dropped:
// a drop of seq after the message was stored (an older drop of the same
// sequence was of a stream since deleted and created again).
func (d *drops) dropped(seq uint64, stored time.Time) (bool, chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.at[seq]
	return ok && !at.Before(stored), d.changed
}

// wait reports whether the message was dropped, waiting up to timeout for
// the advisory that says so.
func (d *drops) wait(ctx context.Context, seq uint64, stored time.Time, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		ok, changed := d.dropped(seq, stored)
		if ok {
			return true
		}
		select {
		case <-changed:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// advised records a max-deliveries advisory of b's consumer.
func (b *Binding) advised(data []byte) {
	var a advisory
	if err := json.Unmarshal(data, &a); err != nil || a.StreamSeq == 0 || a.Stream != b.stream || a.Consumer != b.consumer {
		return
	}
	b.stats.advisories.Add(1)
	if a.Time.IsZero() {
		a.Time = time.Now()
	}
	b.drops.add(a.StreamSeq, a.Time)
}
