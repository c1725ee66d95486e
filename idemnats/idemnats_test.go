package idemnats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
)

// These tests run the adapter on scripted messages; integration/nats runs
// it on a real server.

// fakeMsg is a jetstream.Msg that records how it was settled.
type fakeMsg struct {
	jetstream.Msg // methods not scripted here panic
	md            *jetstream.MsgMetadata
	header        nats.Header

	mu       sync.Mutex
	settled  string
	progress int
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.md == nil {
		return nil, jetstream.ErrNotJSMessage
	}
	return m.md, nil
}
func (m *fakeMsg) Data() []byte         { return []byte("payload") }
func (m *fakeMsg) Headers() nats.Header { return m.header }
func (m *fakeMsg) Subject() string      { return "orders.new" }
func (m *fakeMsg) set(s string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.settled = s
	return nil
}
func (m *fakeMsg) DoubleAck(context.Context) error    { return m.set("ack") }
func (m *fakeMsg) Nak() error                         { return m.set("nak") }
func (m *fakeMsg) NakWithDelay(d time.Duration) error { return m.set("nak " + d.String()) }
func (m *fakeMsg) Term() error                        { return m.set("term") }
func (m *fakeMsg) TermWithReason(r string) error      { return m.set("term: " + r) }
func (m *fakeMsg) InProgress() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.progress++
	return nil
}

// fakeStream answers stream info requests with created, as of the time
// of the request, and counts them.
type fakeStream struct {
	mu       sync.Mutex
	created  time.Time
	err      error
	requests int
	mirror   bool
}

func (s *fakeStream) info(context.Context) (*jetstream.StreamInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.err != nil {
		return nil, s.err
	}
	info := &jetstream.StreamInfo{Created: s.created, TimeStamp: time.Now()}
	if s.mirror {
		info.Config.Mirror = &jetstream.StreamSource{Name: "origin"}
	}
	return info, nil
}

func (s *fakeStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func consumerInfo(cfg jetstream.ConsumerConfig) *jetstream.ConsumerInfo {
	if cfg.AckPolicy == 0 {
		cfg.AckPolicy = jetstream.AckExplicitPolicy
	}
	return &jetstream.ConsumerInfo{Stream: "ORDERS", Name: "writer", Config: cfg}
}

func testBinding(t *testing.T, cfg jetstream.ConsumerConfig, opts Options, st *fakeStream) *Binding {
	t.Helper()
	b, err := newBinding(consumerInfo(cfg), opts, st.info)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func metadata(seq uint64, stored time.Time) *jetstream.MsgMetadata {
	return &jetstream.MsgMetadata{Stream: "ORDERS", Consumer: "writer", NumDelivered: 3, Timestamp: stored,
		Sequence: jetstream.SequencePair{Stream: seq, Consumer: 7}}
}

// TestMessage: a publisher's id and an id by position live in namespaces
// that cannot collide, whatever the publisher's id holds; the position
// carries the stream's creation time.
func TestMessage(t *testing.T) {
	created := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	st := &fakeStream{created: created}
	b := testBinding(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second}, Options{}, st)
	stored := created.Add(time.Minute)
	positional := "seq:42@2026-03-01T12:00:00.123456789Z"
	for _, tc := range []struct {
		name   string
		header nats.Header
		want   string
	}{
		{"Nats-Msg-Id", nats.Header{jetstream.MsgIDHeader: {"order-9"}}, "id:order-9"},
		{"stream sequence", nil, positional},
		{"a Nats-Msg-Id that spells a position", nats.Header{jetstream.MsgIDHeader: {positional}}, "id:" + positional},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := b.Delivery(&fakeMsg{md: metadata(42, stored), header: tc.header}).Message()
			if err != nil || got.Queue != "ORDERS" || got.ID != tc.want || string(got.Data) != "payload" || got.Delivery != 3 {
				t.Errorf("Message() = %+v, %v; want id %q in ORDERS, delivery 3", got, err, tc.want)
			}
		})
	}
	if _, err := b.Delivery(&fakeMsg{}).Message(); !errors.Is(err, jetstream.ErrNotJSMessage) {
		t.Errorf("a message without metadata: %v, want ErrNotJSMessage", err)
	}
}

// TestStreamIdentity: the stream's creation time is asked for once and
// reused for messages stored before the answer; a message stored after it
// asks again, so a stream created again gives its first message, of a
// sequence the old one had used, a new id; a message older than the
// stream, or a failed request, retries the delivery.
func TestStreamIdentity(t *testing.T) {
	first := time.Now().Add(-time.Hour)
	st := &fakeStream{created: first}
	b := testBinding(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second}, Options{}, st)
	id := func(seq uint64, stored time.Time) (string, error) {
		m, err := b.Delivery(&fakeMsg{md: metadata(seq, stored)}).Message()
		return m.ID, err
	}
	old, err := id(1, first.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(2); seq < 10; seq++ {
		if _, err := id(seq, first.Add(time.Duration(seq)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if n := st.count(); n != 1 {
		t.Errorf("%d stream info requests for messages stored before the first answer, want 1", n)
	}

	// The stream is deleted and created again; its first message has
	// sequence 1 again.
	st.mu.Lock()
	st.created = time.Now()
	st.mu.Unlock()
	again, err := id(1, time.Now().Add(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if again == old || st.count() != 2 {
		t.Errorf("sequence 1 of the new stream: %q (old %q) after %d requests; want a new id after a second request", again, old, st.count())
	}
	if _, err := id(5, first.Add(5*time.Minute)); !errors.Is(err, idemqueue.ErrTemporary) || !errors.Is(err, errOlderStream) {
		t.Errorf("a message of the deleted stream: %v, want a temporary errOlderStream", err)
	}

	st.mu.Lock()
	st.err = errors.New("timeout")
	st.mu.Unlock()
	if _, err := id(6, time.Now().Add(time.Hour)); !errors.Is(err, idemqueue.ErrTemporary) {
		t.Errorf("stream info failing: %v, want ErrTemporary", err)
	}
}

// TestStreamIdentitySkewAndMirrors: a message stamped a little before its
// stream's creation (a cluster's clocks differ) belongs to it; a mirror's
// messages keep their origin's times, which say nothing of the mirror's
// lifetime: they are never refused as older, and every one asks again.
func TestStreamIdentitySkewAndMirrors(t *testing.T) {
	created := time.Now()
	st := &fakeStream{created: created}
	b := testBinding(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second}, Options{}, st)
	id := func(seq uint64, stored time.Time) (string, error) {
		m, err := b.Delivery(&fakeMsg{md: metadata(seq, stored)}).Message()
		return m.ID, err
	}
	if _, err := id(1, created.Add(-2*time.Second)); err != nil {
		t.Errorf("a message stamped 2 s before its stream's creation: %v, want it taken", err)
	}

	mirror := &fakeStream{created: created, mirror: true}
	mb := testBinding(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second}, Options{}, mirror)
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := mb.Delivery(&fakeMsg{md: metadata(seq, created.Add(-time.Duration(seq)*time.Hour))}).Message()
		if err != nil || m.ID == "" {
			t.Fatalf("mirror message %d stored at its origin an hour before the mirror: %q, %v; want an id", seq, m.ID, err)
		}
	}
	if n := mirror.count(); n != 3 {
		t.Errorf("%d stream info requests for 3 mirror messages, want 3 (each asks again)", n)
	}
}

// TestSettle: Ack is a double ack, Retry a NAK with its delay, Reject a
// term with the reason, Extend an in-progress report.
func TestSettle(t *testing.T) {
	ctx := context.Background()
	b := testBinding(t, jetstream.ConsumerConfig{AckWait: 30 * time.Second}, Options{}, &fakeStream{created: time.Now()})
	for _, tc := range []struct {
		name   string
		settle func(d *Delivery) error
		want   string
	}{
		{"ack", func(d *Delivery) error { return d.Ack(ctx) }, "ack"},
		{"retry with delay", func(d *Delivery) error { return d.Retry(ctx, 1500*time.Millisecond) }, "nak 1.5s"},
		{"retry at once", func(d *Delivery) error { return d.Retry(ctx, 0) }, "nak"},
		{"reject", func(d *Delivery) error { return d.Reject(ctx, errors.New("mismatch")) }, "term: mismatch"},
		{"reject without reason", func(d *Delivery) error { return d.Reject(ctx, nil) }, "term"},
	} {
		m := &fakeMsg{md: metadata(1, time.Now())}
		if err := tc.settle(b.Delivery(m)); err != nil || m.settled != tc.want {
			t.Errorf("%s: settled %q, %v; want %q", tc.name, m.settled, err, tc.want)
		}
	}
	m := &fakeMsg{md: metadata(1, time.Now())}
	d := b.Delivery(m)
	if err := d.Extend(ctx); err != nil || m.progress != 1 || b.Stats().Progress != 1 {
		t.Errorf("Extend: %v, %d reports, stats %+v", err, m.progress, b.Stats())
	}
}

// TestSettleAfterDrop: a settle of a message whose max-deliveries advisory
// came is an error matching ErrDropped and idemqueue.ErrNotSettled, also
// when the advisory arrives after the settle was confirmed; a drop of the
// same sequence before the message was stored (an older stream's) is not.
func TestSettleAfterDrop(t *testing.T) {
	ctx := context.Background()
	stored := time.Now().Add(-time.Second)
	advise := func(b *Binding, seq uint64, at time.Time) {
		b.advised(fmt.Appendf(nil, `{"type":"io.nats.jetstream.advisory.v1.max_deliver","timestamp":%q,"stream":"ORDERS","consumer":"writer","stream_seq":%d,"deliveries":3}`,
			at.Format(time.RFC3339Nano), seq))
	}
	for _, tc := range []struct {
		name    string
		prepare func(b *Binding)
		late    bool
		dropped bool
	}{
		{"no advisory", func(*Binding) {}, false, false},
		{"advisory before the ack", func(b *Binding) { advise(b, 1, time.Now()) }, false, true},
		{"advisory of another consumer", func(b *Binding) {
			b.advised([]byte(`{"timestamp":"2030-01-01T00:00:00Z","stream":"ORDERS","consumer":"other","stream_seq":1}`))
		}, false, false},
		{"advisory of an older stream", func(b *Binding) { advise(b, 1, stored.Add(-time.Hour)) }, false, false},
		{"advisory after a late ack", func(b *Binding) { time.AfterFunc(50*time.Millisecond, func() { advise(b, 1, time.Now()) }) }, true, true},
		{"late ack, no advisory", func(*Binding) {}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := testBinding(t, jetstream.ConsumerConfig{AckWait: 200 * time.Millisecond, MaxDeliver: 3},
				Options{AdvisoryWait: 400 * time.Millisecond}, &fakeStream{created: stored.Add(-time.Minute)})
			d := b.Delivery(&fakeMsg{md: metadata(1, stored)})
			if tc.late {
				d.alive.Store(time.Now().Add(-time.Second).UnixNano())
			}
			tc.prepare(b)
			err := d.Ack(ctx)
			if got := errors.Is(err, ErrDropped) && errors.Is(err, idemqueue.ErrNotSettled); got != tc.dropped {
				t.Errorf("Ack: %v; dropped %v, want %v", err, got, tc.dropped)
			}
			if (err == nil) == tc.dropped {
				t.Errorf("Ack: %v", err)
			}
			s := b.Stats()
			if (s.NotSettled == 1) != tc.dropped || (s.LateSettles == 1) != tc.late {
				t.Errorf("stats %+v, want NotSettled %v, LateSettles %v", s, tc.dropped, tc.late)
			}
		})
	}
}

// TestBindingConfig: the in-progress interval follows the consumer's ack
// deadline; a consumer that does not ack each message explicitly is
// refused.
func TestBindingConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  jetstream.ConsumerConfig
		opts Options
		want time.Duration
	}{
		{"a third of AckWait", jetstream.ConsumerConfig{AckWait: 3 * time.Second}, Options{}, time.Second},
		{"a third of the shortest BackOff step", jetstream.ConsumerConfig{AckWait: 30 * time.Second, BackOff: []time.Duration{900 * time.Millisecond, 5 * time.Second}}, Options{}, 300 * time.Millisecond},
		{"set", jetstream.ConsumerConfig{AckWait: 3 * time.Second}, Options{ProgressEvery: 200 * time.Millisecond}, 200 * time.Millisecond},
		{"off", jetstream.ConsumerConfig{AckWait: 3 * time.Second}, Options{ProgressEvery: -1}, -1},
	} {
		b := testBinding(t, tc.cfg, tc.opts, &fakeStream{})
		if got := b.Delivery(&fakeMsg{}).ExtendEvery(); got != tc.want {
			t.Errorf("%s: every %v, want %v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		cfg  jetstream.ConsumerConfig
		opts Options
	}{
		{"ack none", jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy}, Options{}},
		{"ack all", jetstream.ConsumerConfig{AckPolicy: jetstream.AckAllPolicy}, Options{}},
		{"negative advisory wait", jetstream.ConsumerConfig{}, Options{AdvisoryWait: -time.Second}},
	} {
		if _, err := newBinding(consumerInfo(tc.cfg), tc.opts, (&fakeStream{}).info); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", tc.name, err)
		}
	}
	if _, err := Bind(context.Background(), nil, nil, Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("Bind(nil): %v, want ErrInvalidConfig", err)
	}
}
