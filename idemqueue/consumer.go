package idemqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/idemkit/idem"
)

// Defaults for Config's zero fields.
const (
	// DefaultInFlightDelay is how long a message whose key another consumer
	// holds waits before its redelivery.
	DefaultInFlightDelay = time.Second
	// DefaultSettleTimeout bounds acknowledging, negative-acknowledging or
	// terminating a delivery in Handle.
	DefaultSettleTimeout = 10 * time.Second
	// DefaultMaxPanicDeliveries is the delivery on which a handler's panic
	// rejects the message: the first two panics retry it, the third
	// rejects it.
	DefaultMaxPanicDeliveries = 3
	// DefaultInFlightWait is how long Handle keeps a delivery it can keep
	// alive (an Extender) while the message's key is in flight elsewhere
	// or the database is busy, before it hands the delivery back.
	DefaultInFlightWait = 30 * time.Second
)

// Message is a delivered message as the consumer needs it.
type Message struct {
	// Queue names where the message was delivered from: the stream, queue,
	// subject or topic its ID is unique in. It is part of the scope, so two
	// queues' message ids never collide.
	Queue string
	// ID identifies the message, the same on every redelivery: the
	// publisher's message id (JetStream's Nats-Msg-Id, AMQP's message-id)
	// or the broker's position (a stream sequence; Kafka's partition and
	// offset). It is the default key, through KeyFor: any non-empty id
	// makes a key (one that is too long or not printable ASCII is
	// hashed); an empty one rejects the message.
	ID string
	// Data is the payload. With Queue it makes the default fingerprint:
	// the same ID with other data is refused as a mismatch.
	Data []byte
	// Delivery counts deliveries of this message, 1 for the first, 0 when
	// the broker does not say. It sets the backoff of a retry.
	Delivery int
}

// Handler does a message's work in tx, the transaction that records the
// message, and returns an optional small result to store with it (at most
// idem.Config.MaxBody bytes; nil is fine). A retry of a message already
// done gets the stored result without running the handler.
//
// Returning an error rolls the work back and stores nothing. Wrap an error
// that no redelivery can cure (a malformed message) with Permanent: the
// delivery is then rejected (terminated, or dead-lettered by the broker)
// instead of retried. To record such a message as handled instead, so a
// redelivery acknowledges it without running again, return nil and a
// result that says it was refused.
type Handler[TTx any] func(ctx context.Context, tx TTx, m Message) (result []byte, err error)

// Config tunes a Consumer. Name is required; every other zero field means
// its default.
type Config struct {
	// Name names the consumer (its durable name or group): part of every
	// scope, so two consumers with different work reading the same queue
	// into one table each process every message.
	Name string
	// Key returns what identifies a message for deduplication, the same
	// on every redelivery: the record's key is KeyFor of it, so any
	// non-empty string will do (an id that is not a valid key is hashed).
	// An error, or an empty string, rejects the message. Default: the
	// message's ID.
	Key func(Message) (string, error)
	// Fingerprint hashes what a message asks for; the same key with another
	// fingerprint is rejected as a mismatch. Default: DefaultFingerprint
	// (Queue and Data); CanonicalJSONFingerprint compares JSON data by
	// value.
	Fingerprint func(Message) idem.Fingerprint
	// Permanent reports whether a handler's error means the message can
	// never be processed, so it is rejected instead of retried. Default:
	// IsPermanent (errors wrapped with Permanent).
	Permanent func(error) bool
	// RetryDelay is how long a message that failed on its n-th delivery
	// waits before it is delivered again. Default: DefaultRetryDelay.
	RetryDelay func(delivery int) time.Duration
	// InFlightDelay is how long a message whose key another consumer holds
	// waits before it is delivered again. Default: DefaultInFlightDelay.
	InFlightDelay time.Duration
	// SettleTimeout bounds acknowledging a delivery in Handle. Default:
	// DefaultSettleTimeout.
	SettleTimeout time.Duration
	// MaxPanicDeliveries is the delivery from which a handler's panic
	// rejects the message instead of retrying it: a poison message that
	// panics every time stops after this many deliveries (rejected, for
	// the broker to terminate or dead-letter) instead of crash-looping
	// every consumer. A broker that does not count deliveries
	// (Message.Delivery 0) gets Retry every time: bound it on the broker.
	// Default: DefaultMaxPanicDeliveries.
	MaxPanicDeliveries int
	// InFlightWait bounds how long Handle waits, keeping the delivery
	// alive, when the message's key is in flight elsewhere or the
	// database was busy, processing it again every InFlightDelay, before
	// it settles with Retry after all. It applies to Delivery values that
	// are Extenders (others are retried at once), and ends early at the
	// holder's lease end when the store reports one. Default:
	// DefaultInFlightWait.
	InFlightWait time.Duration
	// Logger receives a handler's panic (at error level, with the stack)
	// and failed keep-alives (warn). Default: the store's Config.Logger;
	// nil logs nothing.
	Logger *slog.Logger
	// FormerScopes also answers from records stored under the scope form
	// of idem v0.0 ("queue", the name and the queue, both quoted): a
	// message redelivered across the upgrade is acked as a replay instead
	// of being processed again under the new scope (idem.Store.Answered).
	// It costs one read per message; turn it on for the upgrade and off
	// once one retention window has passed. The read is outside the
	// transaction: a message a v0.0 consumer processes during it can still
	// be processed twice, so stop the old consumers before starting new
	// ones.
	FormerScopes bool
}

// DefaultFingerprint hashes the message's queue and data.
func DefaultFingerprint(m Message) idem.Fingerprint {
	var h idem.Hasher
	h.AddString("queue")
	h.AddString(m.Queue)
	h.Add(m.Data)
	return h.Sum()
}

// CanonicalJSONFingerprint is a Config.Fingerprint for JSON payloads whose
// producer may publish a message again under the same id with the data
// serialized anew (an outbox relay that re-reads the payload from a jsonb
// column, a retried publish that marshals again): it is DefaultFingerprint
// with the data in its canonical form (idem.CanonicalJSONExact: RFC 8785's
// form with every number written as its exact decimal value), so another
// property order, whitespace or number form is the same message, and
// another value is still a mismatch, even one that differs only past
// float64 precision (a 64-bit id, a long decimal). Data with no canonical
// form (not JSON, or JSON with a repeated name, invalid UTF-8 or an
// escaped lone surrogate) is hashed byte for byte, as DefaultFingerprint
// hashes it, and never fingerprints like JSON data. A broker's redelivery
// carries the same bytes, so this is needed only for republished
// messages; it costs a parse of the data.
func CanonicalJSONFingerprint(m Message) idem.Fingerprint {
	if canonical, err := idem.CanonicalJSONExact(m.Data); err == nil {
		m.Data = canonical
	}
	return DefaultFingerprint(m)
}

// DefaultRetryDelay backs off exponentially with the delivery count: 100 ms
// after the first delivery, doubling up to 30 s.
func DefaultRetryDelay(delivery int) time.Duration {
	d := 100 * time.Millisecond
	for i := 1; i < delivery && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

// Consumer processes delivered messages exactly once in effect: each
// message's work commits together with its record, and a redelivery of a
// message already done is acknowledged without doing it again. It is safe
// for concurrent use.
type Consumer[TTx any] struct {
	store *idem.Store[TTx]
	cfg   Config
}

// New returns a Consumer on store. It fails with an error matching
// idem.ErrInvalidConfig for a nil store, an empty Name or a negative
// duration or count.
func New[TTx any](store *idem.Store[TTx], cfg Config) (*Consumer[TTx], error) {
	switch {
	case store == nil:
		return nil, fmt.Errorf("%w: idemqueue: nil store", idem.ErrInvalidConfig)
	case cfg.Name == "":
		return nil, fmt.Errorf("%w: idemqueue: Config.Name is required: it keeps the records of different consumers apart", idem.ErrInvalidConfig)
	case cfg.MaxPanicDeliveries < 0:
		return nil, fmt.Errorf("%w: idemqueue: MaxPanicDeliveries %d is negative", idem.ErrInvalidConfig, cfg.MaxPanicDeliveries)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"InFlightDelay", cfg.InFlightDelay}, {"SettleTimeout", cfg.SettleTimeout}, {"InFlightWait", cfg.InFlightWait}} {
		if f.v < 0 {
			return nil, fmt.Errorf("%w: idemqueue: %s %v is negative", idem.ErrInvalidConfig, f.name, f.v)
		}
	}
	if cfg.Key == nil {
		cfg.Key = func(m Message) (string, error) { return m.ID, nil }
	}
	if cfg.Fingerprint == nil {
		cfg.Fingerprint = DefaultFingerprint
	}
	if cfg.Permanent == nil {
		cfg.Permanent = IsPermanent
	}
	if cfg.RetryDelay == nil {
		cfg.RetryDelay = DefaultRetryDelay
	}
	if cfg.InFlightDelay == 0 {
		cfg.InFlightDelay = DefaultInFlightDelay
	}
	if cfg.SettleTimeout == 0 {
		cfg.SettleTimeout = DefaultSettleTimeout
	}
	if cfg.MaxPanicDeliveries == 0 {
		cfg.MaxPanicDeliveries = DefaultMaxPanicDeliveries
	}
	if cfg.InFlightWait == 0 {
		cfg.InFlightWait = DefaultInFlightWait
	}
	if cfg.Logger == nil {
		cfg.Logger = store.Config().Logger
	}
	return &Consumer[TTx]{store: store, cfg: cfg}, nil
}

// Process runs h for m in one transaction with m's record and decides what
// to do with the delivery; it does not touch the broker (see Handle, or
// act on the Decision yourself):
//
//	the work committed now, or before (a redelivery)   Ack, with the result
//	another consumer holds the message's key            Retry after InFlightDelay (ErrInFlight)
//	the same key with other data                         Reject (ErrMismatch)
//	a permanent error, no id (or a Config.Key error),    Reject
//	a result too large to store
//	any other error (the handler's, the database's)      Retry after RetryDelay(m.Delivery)
//	the handler panicked                                 Retry after RetryDelay(m.Delivery), or Reject
//	                                                     from delivery MaxPanicDeliveries (*PanicError)
//
// Nothing is committed unless the decision is Ack. A panic in the handler
// (or in Config.Key or Config.Fingerprint) does not reach the caller: the
// transaction is rolled back, the panic is logged with its stack, and the
// decision's error is a *PanicError. A panic anywhere else while the store
// works (a Config.Observer of the store's, after its COMMIT) leaves the
// outcome unknown: it is retried, never rejected, so a redelivery finds
// the work done or does it.
func (c *Consumer[TTx]) Process(ctx context.Context, m Message, h Handler[TTx]) (d Decision) {
	defer func() {
		if v := recover(); v != nil {
			d = c.panicked(ctx, m, &PanicError{Value: v, Stack: debug.Stack()}, false)
		}
	}()
	return c.process(ctx, m, h)
}

// guarded runs f, turning a panic into a *PanicError.
func guarded[T any](f func() (T, error)) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &PanicError{Value: p, Stack: debug.Stack()}
		}
	}()
	return f()
}

func (c *Consumer[TTx]) process(ctx context.Context, m Message, h Handler[TTx]) Decision {
	if h == nil {
		return Decision{Action: Reject, Err: errors.New("idemqueue: nil handler")}
	}
	req, refused := c.request(ctx, m)
	if refused != nil {
		return *refused
	}
	key, fp := req.Key, req.Fingerprint
	var (
		perr  *PanicError
		err   error
		res   idem.Result
		found bool // a record under the former scope form answered
	)
	if c.cfg.FormerScopes {
		res, found, err = c.store.Answered(ctx, formerScope(c.cfg.Name, m.Queue), key, fp)
	}
	if !found && err == nil {
		var herr error // the handler's
		res, err = c.store.Do(ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
			// A panic becomes the function's error: Do rolls back as for
			// any error, and nothing was committed.
			herr = nil // an earlier attempt's, which Do retried
			result, err := guarded(func() ([]byte, error) { return h(ctx, tx, m) })
			if err != nil {
				herr = err
				return idem.Response{}, err
			}
			return idem.Response{Status: idem.NoStatus, Body: result}, nil
		})
		if err == nil && herr != nil && res.Outcome == idem.Won && !res.Committed {
			// Do answers an error matching idem.ErrNotAnOutcome with the
			// rolled-back response instead; for a queue it is an error
			// like any other (Permanent rejects).
			err = herr
		}
	}
	if errors.As(err, &perr) {
		return c.panicked(ctx, m, perr, true)
	}
	if err != nil {
		return c.failed(ctx, m, key, err)
	}
	return c.decide(m, key, res)
}

// request makes m's idem request: its key (Config.Key, through KeyFor),
// scope and fingerprint. A message that has none is decided at once: the
// returned Decision is not nil.
func (c *Consumer[TTx]) request(ctx context.Context, m Message) (idem.Request, *Decision) {
	var perr *PanicError
	id, err := guarded(func() (string, error) { return c.cfg.Key(m) })
	if errors.As(err, &perr) {
		d := c.panicked(ctx, m, perr, true)
		return idem.Request{}, &d
	}
	if err != nil {
		return idem.Request{}, &Decision{Action: Reject, Err: fmt.Errorf("idemqueue: key of message %q in %q: %w", m.ID, m.Queue, err)}
	}
	key := KeyFor(id)
	if key == "" {
		return idem.Request{}, &Decision{Action: Reject, Err: fmt.Errorf("%w: idemqueue: message in %q has no id: nothing tells its redeliveries apart, so it cannot be processed once", idem.ErrInvalidKey, m.Queue)}
	}
	fp, err := guarded(func() (idem.Fingerprint, error) { return c.cfg.Fingerprint(m), nil })
	if errors.As(err, &perr) {
		d := c.panicked(ctx, m, perr, true)
		return idem.Request{}, &d
	}
	return idem.Request{Scope: Scope(c.cfg.Name, m.Queue), Key: key, Fingerprint: fp}, nil
}

// decide turns the store's answer for m into a Decision.
func (c *Consumer[TTx]) decide(m Message, key string, res idem.Result) Decision {
	switch res.Outcome {
	case idem.Won:
		if !res.Committed {
			return Decision{Action: Retry, Delay: c.cfg.RetryDelay(m.Delivery), Outcome: idem.Won,
				Err: fmt.Errorf("idemqueue: message %q: the store's StoreStatus refused to store status 0, so the work was rolled back", key)}
		}
		return Decision{Action: Ack, Outcome: idem.Won, Result: res.Response.Body}
	case idem.Replay:
		return Decision{Action: Ack, Outcome: idem.Replay, Result: res.Response.Body, Record: res.Record}
	case idem.Mismatch:
		return Decision{Action: Reject, Outcome: idem.Mismatch, Record: res.Record,
			Err: fmt.Errorf("%w: key %q in %q", ErrMismatch, key, m.Queue)}
	case idem.InFlight:
		return c.inFlight(m, key, res)
	}
	return Decision{Action: Retry, Delay: c.cfg.RetryDelay(m.Delivery),
		Err: fmt.Errorf("idemqueue: message %q: unexpected outcome %v", key, res.Outcome)}
}

// inFlight decides on an InFlight answer. A busy answer (idem.Result.Busy:
// on SQLite another transaction held the database's write lock longer than
// WaitBound, and no committed record holds the key) is no sign that the
// message is being processed anywhere; a pending record, or a wait for the
// key's row (a transaction still running holds it), is. Both are retried
// after InFlightDelay, and Handle waits out both when it can keep the
// delivery alive; they differ in the error, so that a busy database is not
// reported as a message processed elsewhere.
func (c *Consumer[TTx]) inFlight(m Message, key string, res idem.Result) Decision {
	d := Decision{Action: Retry, Delay: c.cfg.InFlightDelay, Outcome: idem.InFlight, Record: res.Record}
	if res.Busy && !held(res.Record) {
		d.Err = fmt.Errorf("%w: key %q in %q: another transaction held the database longer than WaitBound (%v)", ErrBusy, key, m.Queue, c.store.Config().WaitBound)
	} else {
		d.Err = fmt.Errorf("%w: key %q in %q", ErrInFlight, key, m.Queue)
	}
	return d
}

// held reports whether rec is a pending record: a holder is known.
func held(rec idem.Record) bool { return rec.Key != "" && !rec.Completed }

// failed decides on an error from Do: nothing was committed (or, for
// ErrCommitUnknown, a redelivery will tell).
func (c *Consumer[TTx]) failed(ctx context.Context, m Message, key string, err error) Decision {
	err = fmt.Errorf("idemqueue: message %q in %q: %w", key, m.Queue, err)
	switch {
	case ctx.Err() != nil:
		// The consumer is stopping: hand the message back at once.
		return Decision{Action: Retry, Err: err}
	case c.cfg.Permanent(err),
		errors.Is(err, idem.ErrInvalidKey), errors.Is(err, idem.ErrInvalidScope),
		errors.Is(err, idem.ErrTooLarge):
		return Decision{Action: Reject, Err: err}
	}
	return Decision{Action: Retry, Delay: c.cfg.RetryDelay(m.Delivery), Err: err}
}

// formerScope is the scope idem v0.0 built for a consumer on a queue: the
// transport, the name and the queue quoted, or a hash of them when that
// was too long.
func formerScope(name, queue string) string {
	s := "queue " + strconv.Quote(name) + " " + strconv.Quote(queue)
	if len(s) <= idem.MaxScopeBytes {
		return s
	}
	var h idem.Hasher
	h.AddString("idemqueue scope")
	h.AddString(name)
	h.AddString(queue)
	f := h.Sum()
	return fmt.Sprintf("queue sha256:%x", f[:])
}

// Scope is the scope of a message of queue processed by the consumer
// named name, as Consumer builds it: idem.Scope with the consumer's name in
// the principal's place, then "queue:" and the quoted queue,
//
//	"billing" queue:"invoices"
//
// so idem.ScopePrefix(name) selects one consumer's records. The "queue:"
// cannot begin an idemhttp scope's method (a colon is not an HTTP token
// character).
func Scope(name, queue string) string {
	return idem.Scope(name, "queue:"+strconv.Quote(queue))
}
