package idemnats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/idemqueue"
)

// The two namespaces of message ids. Every id begins with one of them, so
// a publisher's id, whatever it holds, never equals an id by position.
const (
	publisherPrefix = "id:"
	positionPrefix  = "seq:"
)

// publisherID is the id of a message its publisher named (Nats-Msg-Id).
func publisherID(msgID string) string { return publisherPrefix + msgID }

// positionID is the id of a message by its place: the stream sequence in
// the stream created at created. A stream deleted and created again
// starts its sequences afresh; its creation time tells its messages from
// the old one's.
func positionID(seq uint64, created time.Time) string {
	return positionPrefix + strconv.FormatUint(seq, 10) + "@" + created.UTC().Format(time.RFC3339Nano)
}

// errOlderStream: a message stored before the stream now under its name
// was created, so it belongs to a stream since deleted.
var errOlderStream = errors.New("idemnats: the message is older than its stream: it belongs to a stream since deleted and created again")

// clockSkew is how much earlier than its stream's creation a message may
// say it was stored and still belong to that stream: in a cluster the
// creation time comes from the meta leader's clock and a message's from the
// stream leader's. A stream deleted and created again deletes its
// consumers too, so a message of the old one arriving within this margin
// is all but impossible.
const clockSkew = 5 * time.Second

// streamIdentity caches the creation time of one stream.
type streamIdentity struct {
	name string
	info func(context.Context) (*jetstream.StreamInfo, error)

	mu sync.Mutex
	// created is the stream's creation time, as of asOf (the server's
	// clock when it answered); both zero before the first answer.
	created, asOf time.Time
	// copied: the stream is a mirror or has sources, whose messages keep
	// the times they were first stored with: those say nothing of this
	// stream's lifetime, so every such message asks again.
	copied bool
}

// createdFor returns the creation time of the stream that stored a
// message at stored (the server's clock). The cached answer holds for a
// message stored between the creation and the answer: that stream existed
// throughout. A message stored later may belong to a stream created since
// (the old one deleted), so it asks again; refreshes are serialised, and
// one answers every message stored before it.
func (s *streamIdentity) createdFor(stored time.Time) (time.Time, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.asOf.IsZero() && !s.copied && !stored.Before(s.created.Add(-clockSkew)) && !stored.After(s.asOf) {
		return s.created, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), streamInfoTimeout)
	defer cancel()
	info, err := s.info(ctx)
	if err != nil {
		return time.Time{}, idemqueue.Temporary(fmt.Errorf("idemnats: info of stream %q: %w", s.name, err))
	}
	if info == nil || info.Created.IsZero() {
		return time.Time{}, idemqueue.Temporary(fmt.Errorf("idemnats: info of stream %q has no creation time", s.name))
	}
	s.created, s.asOf = info.Created, info.TimeStamp
	s.copied = info.Config.Mirror != nil || len(info.Config.Sources) > 0
	if s.copied {
		return s.created, nil
	}
	if s.asOf.IsZero() || s.asOf.Before(stored) {
		// A server that does not say when it answered, or a clock behind
		// the one that stored the message: the answer is at least as new
		// as the message.
		s.asOf = stored
	}
	if stored.Before(s.created.Add(-clockSkew)) {
		// Settling it would settle the new stream's message of the same
		// sequence; a retry (a NAK) is the least harm.
		return time.Time{}, idemqueue.Temporary(fmt.Errorf("%w (stored %v, stream %q created %v)", errOlderStream,
			stored.UTC().Format(time.RFC3339Nano), s.name, s.created.UTC().Format(time.RFC3339Nano)))
	}
	return s.created, nil
}
