package idemnats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemnats"
	"github.com/idemkit/idem/idemqueue"
)

// fakeMsg is a jetstream.Msg that records how it was settled. (The
// adapter on a real server: integration/nats and examples/consumer.)
type fakeMsg struct {
	jetstream.Msg // methods not scripted here panic
	md            *jetstream.MsgMetadata
	header        nats.Header
	settled       string
}

func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.md == nil {
		return nil, jetstream.ErrNotJSMessage
	}
	return m.md, nil
}
func (m *fakeMsg) Data() []byte                    { return []byte("payload") }
func (m *fakeMsg) Headers() nats.Header            { return m.header }
func (m *fakeMsg) Subject() string                 { return "orders.new" }
func (m *fakeMsg) DoubleAck(context.Context) error { m.settled = "ack"; return nil }
func (m *fakeMsg) Nak() error                      { m.settled = "nak"; return nil }
func (m *fakeMsg) NakWithDelay(d time.Duration) error {
	m.settled = "nak " + d.String()
	return nil
}
func (m *fakeMsg) Term() error { m.settled = "term"; return nil }
func (m *fakeMsg) TermWithReason(r string) error {
	m.settled = "term: " + r
	return nil
}

func TestMessage(t *testing.T) {
	md := &jetstream.MsgMetadata{Stream: "ORDERS", NumDelivered: 3, Sequence: jetstream.SequencePair{Stream: 42, Consumer: 7}}
	for _, tc := range []struct {
		name   string
		header nats.Header
		want   idemqueue.Message
	}{
		{"Nats-Msg-Id", nats.Header{jetstream.MsgIDHeader: {"order-9"}}, idemqueue.Message{Queue: "ORDERS", ID: "order-9", Data: []byte("payload"), Delivery: 3}},
		{"stream sequence", nil, idemqueue.Message{Queue: "ORDERS", ID: "seq-42", Data: []byte("payload"), Delivery: 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := idemnats.Delivery{Msg: &fakeMsg{md: md, header: tc.header}}.Message()
			if err != nil || got.Queue != tc.want.Queue || got.ID != tc.want.ID || string(got.Data) != string(tc.want.Data) || got.Delivery != tc.want.Delivery {
				t.Errorf("Message() = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	if _, err := (idemnats.Delivery{Msg: &fakeMsg{}}).Message(); !errors.Is(err, jetstream.ErrNotJSMessage) {
		t.Errorf("a message without metadata: %v, want ErrNotJSMessage", err)
	}
}

func TestSettle(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		settle func(d idemnats.Delivery) error
		want   string
	}{
		{"ack", func(d idemnats.Delivery) error { return d.Ack(ctx) }, "ack"},
		{"retry with delay", func(d idemnats.Delivery) error { return d.Retry(ctx, 1500*time.Millisecond) }, "nak 1.5s"},
		{"retry at once", func(d idemnats.Delivery) error { return d.Retry(ctx, 0) }, "nak"},
		{"reject", func(d idemnats.Delivery) error { return d.Reject(ctx, errors.New("mismatch")) }, "term: mismatch"},
		{"reject without reason", func(d idemnats.Delivery) error { return d.Reject(ctx, nil) }, "term"},
	} {
		m := &fakeMsg{}
		if err := tc.settle(idemnats.Delivery{Msg: m}); err != nil || m.settled != tc.want {
			t.Errorf("%s: settled %q, %v; want %q", tc.name, m.settled, err, tc.want)
		}
	}
}
