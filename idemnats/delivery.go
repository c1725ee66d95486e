package idemnats

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemqueue"
)

// ErrDropped says JetStream had dropped the message after MaxDeliver
// deliveries (its max-deliveries advisory says so) when a settle of it
// arrived, and confirmed the settle all the same. An Ack's work may have
// committed although JetStream counts the message as failed; a Retry's
// message will not come back. It matches idemqueue.ErrNotSettled.
var ErrDropped = fmt.Errorf("%w: JetStream dropped the message after MaxDeliver deliveries", idemqueue.ErrNotSettled)

// Delivery is a JetStream message as an idemqueue.Delivery and an
// idemqueue.Extender: Handle reports it in progress while it works. Get
// one from Binding.Delivery.
type Delivery struct {
	msg jetstream.Msg
	b   *Binding
	// alive is when the ack deadline last started (Unix nanoseconds): when
	// the work began, or the last in-progress report.
	alive atomic.Int64
}

var (
	_ idemqueue.Delivery = (*Delivery)(nil)
	_ idemqueue.Extender = (*Delivery)(nil)
)

// Msg returns the JetStream message.
func (d *Delivery) Msg() jetstream.Msg { return d.msg }

// Message returns the message: Queue is its stream, Delivery its delivery
// count, and ID names it in one of two namespaces that cannot collide:
//
//	id:<Nats-Msg-Id>                       the publisher's id, when the message has one
//	seq:<stream sequence>@<stream created>  else its place: the sequence in the stream created then
//
// The record's key is idemqueue.KeyFor of the ID: a Nats-Msg-Id too long
// or not printable ASCII for a key is hashed, never refused.
//
// The stream's creation time comes from a stream info request, cached
// while messages keep coming from the same stream (see streamIdentity), so
// a stream deleted and created again, whose sequences start afresh, does
// not make its new messages look like the old ones. It fails for a message
// that did not come from a JetStream consumer (no metadata); an error
// matching idemqueue.ErrTemporary (the stream info failed, or the message
// belongs to a stream since deleted) retries the delivery.
func (d *Delivery) Message() (idemqueue.Message, error) {
	md, err := d.msg.Metadata()
	if err != nil {
		return idemqueue.Message{}, fmt.Errorf("idemnats: message on %q: %w", d.msg.Subject(), err)
	}
	m := idemqueue.Message{Queue: md.Stream, Data: d.msg.Data(), Delivery: int(min(md.NumDelivered, math.MaxInt32))}
	if id := d.msg.Headers().Get(jetstream.MsgIDHeader); id != "" {
		m.ID = publisherID(id)
		return m, nil
	}
	if md.Stream != d.b.stream {
		return m, fmt.Errorf("idemnats: message of stream %q given to the binding of %q", md.Stream, d.b.stream)
	}
	created, err := d.b.ids.createdFor(md.Timestamp)
	if err != nil {
		return m, fmt.Errorf("idemnats: message %d of %q: %w", md.Sequence.Stream, md.Stream, err)
	}
	m.ID = positionID(md.Sequence.Stream, created)
	return m, nil
}

// ExtendEvery is how often Handle reports the delivery in progress:
// Options.ProgressEvery, by default a third of the consumer's AckWait.
func (d *Delivery) ExtendEvery() time.Duration { return d.b.progressEvery }

// Extend reports the delivery in progress (InProgress): JetStream starts
// its ack deadline again.
func (d *Delivery) Extend(context.Context) error {
	sent := time.Now()
	if err := d.msg.InProgress(); err != nil {
		d.b.stats.progressFailed.Add(1)
		return fmt.Errorf("idemnats: in progress: %w", err)
	}
	d.b.stats.progress.Add(1)
	d.alive.Store(sent.UnixNano())
	return nil
}

// Ack acknowledges the message and waits for the server to confirm it. It
// fails with ErrDropped when JetStream had dropped the message already.
func (d *Delivery) Ack(ctx context.Context) error {
	if err := d.msg.DoubleAck(ctx); err != nil {
		return fmt.Errorf("idemnats: ack: %w", err)
	}
	return d.settled(ctx, "ack")
}

// Retry asks JetStream to deliver the message again after delay (at once
// for 0). It fails with ErrDropped when JetStream had dropped the message
// already: it will not come back.
func (d *Delivery) Retry(ctx context.Context, delay time.Duration) error {
	var err error
	if delay <= 0 {
		err = d.msg.Nak()
	} else {
		err = d.msg.NakWithDelay(delay)
	}
	if err != nil {
		return fmt.Errorf("idemnats: nak: %w", err)
	}
	return d.settled(ctx, "nak")
}

// Reject tells JetStream never to deliver the message again, with reason
// in its advisory. It fails with ErrDropped when JetStream had dropped the
// message already (after MaxDeliver: its advisory is the max-deliveries
// one, not the terminated one).
func (d *Delivery) Reject(ctx context.Context, reason error) error {
	var err error
	if reason == nil {
		err = d.msg.Term()
	} else {
		err = d.msg.TermWithReason(reason.Error())
	}
	if err != nil {
		return fmt.Errorf("idemnats: term: %w", err)
	}
	return d.settled(ctx, "term")
}

// settled checks, after a settle the server accepted, that JetStream had
// not dropped the message before it. A settle more than the ack deadline
// after the delivery was last alive may have come after the drop; it waits
// (up to Options.AdvisoryWait) for the advisory that would say so, since
// the advisory and the settle's confirmation travel separately.
func (d *Delivery) settled(ctx context.Context, op string) error {
	md, err := d.msg.Metadata()
	if err != nil {
		return nil // not a JetStream message: Message refused it already
	}
	b := d.b
	since := time.Since(time.Unix(0, d.alive.Load()))
	late := since > b.ackWait
	dropped, _ := b.drops.dropped(md.Sequence.Stream, md.Timestamp)
	if late {
		b.stats.late.Add(1)
		if !dropped && b.maxDeliver > 0 {
			dropped = b.drops.wait(ctx, md.Sequence.Stream, md.Timestamp, b.advisoryWait)
		}
	}
	if !dropped {
		if late {
			d.log(ctx, slog.LevelWarn, op+" sent after the ack deadline: JetStream may have delivered the message again", md, since)
		}
		return nil
	}
	b.stats.notSettled.Add(1)
	d.log(ctx, slog.LevelError, op+" of a message JetStream had dropped after MaxDeliver deliveries", md, since)
	return fmt.Errorf("idemnats: %s of message %d of %q (delivery %d of %d, %v after it was last in progress): %w",
		op, md.Sequence.Stream, md.Stream, md.NumDelivered, b.maxDeliver, since.Round(time.Millisecond), ErrDropped)
}

func (d *Delivery) log(ctx context.Context, level slog.Level, msg string, md *jetstream.MsgMetadata, since time.Duration) {
	if d.b.logger == nil {
		return
	}
	d.b.logger.LogAttrs(ctx, level, "idemnats: "+msg,
		slog.String("stream", md.Stream), slog.String("consumer", md.Consumer), slog.Uint64("stream_seq", md.Sequence.Stream),
		slog.Uint64("delivery", md.NumDelivered), slog.Int("max_deliver", d.b.maxDeliver), slog.Duration("since_in_progress", since))
}
