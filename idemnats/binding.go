package idemnats

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem"
)

// DefaultAdvisoryWait is how long a settle sent after the delivery's ack
// deadline may have passed waits for JetStream's max-deliveries advisory.
const DefaultAdvisoryWait = time.Second

// streamInfoTimeout bounds the stream info request that learns the
// stream's creation time (Delivery.Message has no context of its own).
const streamInfoTimeout = 5 * time.Second

// Options tunes a Binding. The zero value of every field means its
// default.
type Options struct {
	// ProgressEvery is how often a delivery is reported in progress
	// (InProgress, which restarts its ack deadline) while its message is
	// worked on. Default: a third of the consumer's AckWait, or of its
	// shortest BackOff step when that is shorter. Negative: never (then a
	// handler slower than AckWait gets its message delivered again).
	ProgressEvery time.Duration
	// AdvisoryWait bounds how long a settle that may have come too late
	// (more than AckWait after the delivery was last reported in
	// progress) waits for the max-deliveries advisory that says JetStream
	// had dropped the message. Default: DefaultAdvisoryWait.
	AdvisoryWait time.Duration
	// Logger receives settles that did not settle (error level) and late
	// settles (warn). Nil logs nothing.
	Logger *slog.Logger
}

// Binding ties idemqueue to one durable JetStream consumer: it knows the
// consumer's AckWait and MaxDeliver, the stream's identity (its creation
// time, for ids by stream position), and watches the consumer's
// max-deliveries advisories, so that a settle of a message JetStream had
// already dropped is reported instead of passing as done. Make one per
// consumer with Bind, use it for every delivery of that consumer
// (Binding.Delivery, or Handler), and Close it when done. It is safe for
// concurrent use. Bind again after changing the consumer's configuration.
type Binding struct {
	stream, consumer string
	// ackWait is the shortest ack deadline a delivery can have: AckWait,
	// or the shortest BackOff step.
	ackWait       time.Duration
	maxDeliver    int
	progressEvery time.Duration
	advisoryWait  time.Duration
	logger        *slog.Logger

	ids   *streamIdentity
	drops *drops
	sub   *nats.Subscription
	stats stats
}

// Bind reads cons's configuration (one consumer info request) and
// subscribes, on js's connection, to its max-deliveries advisories
// ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<consumer>). It
// fails for a consumer whose ack policy is not explicit: idemqueue
// settles each message on its own, after its work committed. The error
// matches idem.ErrInvalidConfig for a bad consumer or Options.
func Bind(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, opts Options) (*Binding, error) {
	if js == nil || cons == nil {
		return nil, fmt.Errorf("%w: idemnats: nil JetStream or consumer", idem.ErrInvalidConfig)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("idemnats: consumer info: %w", err)
	}
	b, err := newBinding(info, opts, func(ctx context.Context) (*jetstream.StreamInfo, error) {
		st, err := js.Stream(ctx, info.Stream)
		if err != nil {
			return nil, err
		}
		return st.CachedInfo(), nil
	})
	if err != nil {
		return nil, err
	}
	subject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + info.Stream + "." + info.Name
	b.sub, err = js.Conn().Subscribe(subject, func(msg *nats.Msg) { b.advised(msg.Data) })
	if err != nil {
		return nil, fmt.Errorf("idemnats: subscribe to %s: %w", subject, err)
	}
	// The subscription is known to the server before the first delivery.
	if err := js.Conn().FlushWithContext(ctx); err != nil {
		_ = b.sub.Unsubscribe()
		return nil, fmt.Errorf("idemnats: subscribe to %s: %w", subject, err)
	}
	return b, nil
}

// newBinding is Bind without the server: the consumer's info, and where
// the stream's info comes from.
func newBinding(info *jetstream.ConsumerInfo, opts Options, streamInfo func(context.Context) (*jetstream.StreamInfo, error)) (*Binding, error) {
	cfg := info.Config
	if cfg.AckPolicy != jetstream.AckExplicitPolicy {
		return nil, fmt.Errorf("%w: idemnats: consumer %q on %q has ack policy %v; idemqueue settles every message on its own: use AckExplicit",
			idem.ErrInvalidConfig, info.Name, info.Stream, cfg.AckPolicy)
	}
	if opts.AdvisoryWait < 0 {
		return nil, fmt.Errorf("%w: idemnats: AdvisoryWait %v is negative", idem.ErrInvalidConfig, opts.AdvisoryWait)
	}
	ackWait := cfg.AckWait
	for _, step := range cfg.BackOff {
		if step > 0 && (ackWait <= 0 || step < ackWait) {
			ackWait = step
		}
	}
	if ackWait <= 0 {
		ackWait = 30 * time.Second // JetStream's default
	}
	b := &Binding{
		stream:        info.Stream,
		consumer:      info.Name,
		ackWait:       ackWait,
		maxDeliver:    cfg.MaxDeliver,
		progressEvery: opts.ProgressEvery,
		advisoryWait:  opts.AdvisoryWait,
		logger:        opts.Logger,
		ids:           &streamIdentity{name: info.Stream, info: streamInfo},
		drops:         newDrops(),
	}
	if b.progressEvery == 0 {
		b.progressEvery = max(ackWait/3, time.Millisecond)
	}
	if b.advisoryWait == 0 {
		b.advisoryWait = DefaultAdvisoryWait
	}
	return b, nil
}

// Close ends the advisory subscription. Settles after it no longer learn
// of dropped messages.
func (b *Binding) Close() error {
	if b.sub == nil {
		return nil
	}
	return b.sub.Unsubscribe()
}

// Delivery returns msg, a message of b's consumer, as an idemqueue
// Delivery. Call it when the message's work begins: its ack deadline is
// taken to run from then on.
func (b *Binding) Delivery(msg jetstream.Msg) *Delivery {
	d := &Delivery{msg: msg, b: b}
	d.alive.Store(time.Now().UnixNano())
	return d
}

// Stats counts what a Binding saw, for metrics.
type Stats struct {
	// Progress counts in-progress reports sent; ProgressFailed those that
	// could not be sent.
	Progress, ProgressFailed int64
	// LateSettles counts settles sent more than AckWait after the
	// delivery was last reported in progress: JetStream may have
	// delivered the message again by then (and an ack applies to the
	// redelivery, nats-server issue 4786).
	LateSettles int64
	// Advisories counts the max-deliveries advisories received: messages
	// of this consumer JetStream dropped after MaxDeliver deliveries.
	Advisories int64
	// NotSettled counts settles JetStream confirmed for a message it had
	// already dropped (their errors match ErrDropped).
	NotSettled int64
}

type stats struct {
	progress, progressFailed, late, advisories, notSettled atomic.Int64
}

// Stats returns the counts so far.
func (b *Binding) Stats() Stats {
	return Stats{
		Progress:       b.stats.progress.Load(),
		ProgressFailed: b.stats.progressFailed.Load(),
		LateSettles:    b.stats.late.Load(),
		Advisories:     b.stats.advisories.Load(),
		NotSettled:     b.stats.notSettled.Load(),
	}
}
