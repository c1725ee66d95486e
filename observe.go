package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// Observer receives what a Store does, for metrics, traces and logs
// (package github.com/idemkit/idem/idemotel turns the events into
// OpenTelemetry metrics and spans). Set it in Config.Observer; with none,
// the store does not even read the clock for it.
//
// Observe runs synchronously, on the goroutine of the call it describes,
// with that call's context: keep it fast and never block in it. It gets
// the Event by value; an Observer must not keep the Event's Err beyond the
// call unless it needs it.
//
// An Observer may also implement DoObserver, to wrap every call of Do (a
// span around it).
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// DoObserver is an Observer that also sees each call of Do from start to
// end. StartDo runs when Do begins; Do runs with the context it returns (a
// span's, say), and calls done once, with Do's result and error, when it
// returns.
type DoObserver interface {
	Observer
	StartDo(ctx context.Context, req Request) (_ context.Context, done func(Result, error))
}

// RecoveryObserver is an Observer that also sees each abandoned lease
// RunRecovery takes on, from its takeover to its completion (a span around
// it, under which the resumed function's own calls are traced). StartRecovery
// runs before Store.Resume, with the record ExpiredLeases listed; the
// takeover, the function and the completion run with the context it
// returns, and done is called once, with the outcome and the error of a
// failure, when the lease is dealt with. A record of an unknown scope is
// not started.
type RecoveryObserver interface {
	Observer
	StartRecovery(ctx context.Context, rec Record) (_ context.Context, done func(RecoveryOutcome, error))
}

// EventKind says what an Event reports.
type EventKind int

const (
	// EventClaim: a claim was decided (in Do, in Store.Claim, by Do's
	// read before claiming when Config.ReadFirst is set, or in lease mode
	// by Store.Lease or Resume, with Lease set). Outcome says how;
	// Wait is how long the claim took, which for a loser is the time it
	// waited for the key's holder (Replay or InFlight after a wait); ReadFirst
	// is set when no claim ran because the read answered.
	EventClaim EventKind = iota + 1
	// EventRetry: Do (or Purge) is about to run a transaction again after
	// Err, a retryable error; Cause names it ("serialization", "deadlock",
	// "unavailable") and Attempt is the attempt that failed.
	EventRetry
	// EventCommitUnknown: a COMMIT's outcome is unknown (Err matches
	// ErrCommitUnknown): the work may or may not have happened; a retry with
	// the same key replays it or does it once.
	EventCommitUnknown
	// EventStored: Complete stored a response: BodyBytes and HeaderBytes are
	// its sizes, Status its status.
	EventStored
	// EventPurgeBatch: one purge batch committed, deleting Rows records in
	// Duration (Batches is its number in this Purge, from 1).
	EventPurgeBatch
	// EventPurge: a Purge call ended: Rows records deleted in Batches
	// batches over Duration, with Err when it stopped early.
	EventPurge
	// EventTakeover: in lease mode, a pending record whose holder's lease
	// ran out (or was released) was taken over to resume the work: Token is
	// the new fencing token, Step the last recovery point it resumes from.
	EventTakeover
	// EventKeyless: a transport in optional-key mode (idemhttp's
	// Config.KeyOptional) let a request without a key through unprotected
	// (Store.Keyless). Scope is the scope it would have had.
	EventKeyless
	// EventRecovery: RunRecovery dealt with one abandoned lease: Recovery
	// says how; Scope and Key name it; for a lease it took over, Token and
	// Step are the takeover's, Duration how long its function and the
	// completion took, Status the stored status (RecoveryCompleted); Err
	// is why it failed (RecoveryFailed).
	EventRecovery
	// EventRecoveryRound: a round of RunRecovery ended: Rows abandoned
	// leases listed, over Duration, with Err when it stopped early.
	EventRecoveryRound
)

// String names the kind ("claim", "retry", ...).
func (k EventKind) String() string {
	switch k {
	case EventClaim:
		return "claim"
	case EventRetry:
		return "retry"
	case EventCommitUnknown:
		return "commit-unknown"
	case EventStored:
		return "stored"
	case EventPurgeBatch:
		return "purge-batch"
	case EventPurge:
		return "purge"
	case EventTakeover:
		return "takeover"
	case EventKeyless:
		return "keyless"
	case EventRecovery:
		return "recovery"
	case EventRecoveryRound:
		return "recovery-round"
	}
	return "EventKind(?)"
}

// Event is one thing a Store did. Which fields are set depends on Kind.
type Event struct {
	Kind EventKind
	// Table is the store's table.
	Table string
	// Scope and Key name the request (not set for purges).
	Scope, Key string
	// Outcome is the claim's (EventClaim).
	Outcome Outcome
	// Wait is how long the claim took (EventClaim).
	Wait time.Duration
	// ReadFirst: the outcome came from the read before claiming, no claim
	// ran (EventClaim).
	ReadFirst bool
	// Cause names a retry's error (EventRetry): "serialization",
	// "deadlock" or "unavailable".
	Cause string
	// Attempt is the attempt that failed, from 1 (EventRetry).
	Attempt int
	// Status, HeaderBytes and BodyBytes describe the stored response
	// (EventStored).
	Status                 int
	HeaderBytes, BodyBytes int
	// Recovery is what RunRecovery did with an abandoned lease
	// (EventRecovery).
	Recovery RecoveryOutcome
	// Rows, Batches and Duration describe a purge (EventPurgeBatch,
	// EventPurge); Rows and Duration a recovery round
	// (EventRecoveryRound), Duration a lease's recovery (EventRecovery).
	Rows     int64
	Batches  int
	Duration time.Duration
	// Token and Step describe a takeover (EventTakeover). Released says
	// the previous holder ended its lease with Lease.Release, a deliberate
	// hand-over, rather than letting it lapse (a crash or a hang): only a
	// lapsed lease is logged as a warning.
	Token    int64
	Step     string
	Released bool
	// Lease is set for the claim, stored, takeover and commit-unknown
	// events of lease mode (Store.Lease, Resume, DoLease and a held
	// lease's writes), and for EventRecovery.
	Lease bool
	// Err is the error behind the event (EventRetry, EventCommitUnknown; an
	// EventPurge or EventRecoveryRound that stopped early; an
	// EventRecovery that failed).
	Err error
}

// retryCause names a retryable error for EventRetry.
func retryCause(err error) string {
	switch {
	case errors.Is(err, ErrSerialization):
		return "serialization"
	case errors.Is(err, ErrDeadlock):
		return "deadlock"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	}
	return "other"
}

// observing reports whether anything listens: an Observer, or a Logger.
// Callers skip reading the clock when nothing does.
func (c *core) observing() bool { return c.cfg.Observer != nil || c.cfg.Logger != nil }

// emit hands e to the Observer and logs what an operator acts on. With no
// Observer and a Logger that is off at the event's level it allocates
// nothing.
func (c *core) emit(ctx context.Context, e Event) {
	e.Table = c.table.Name()
	if c.cfg.Observer != nil {
		c.cfg.Observer.Observe(ctx, e)
	}
	l := c.cfg.Logger
	if l == nil {
		return
	}
	switch e.Kind {
	case EventClaim:
		if e.Outcome == Mismatch && l.Enabled(ctx, slog.LevelWarn) {
			l.LogAttrs(ctx, slog.LevelWarn, "idem: key reused with a different request",
				slog.String("table", e.Table), slog.String("scope", e.Scope), slog.String("key", e.Key))
		}
	case EventCommitUnknown:
		if l.Enabled(ctx, slog.LevelError) {
			l.LogAttrs(ctx, slog.LevelError, "idem: commit outcome unknown; a retry with the same key replays or does the work once",
				slog.String("table", e.Table), slog.String("scope", e.Scope), slog.String("key", e.Key), slog.Any("error", e.Err))
		}
	case EventTakeover:
		level, msg := slog.LevelWarn, "idem: expired lease taken over; resuming the work"
		if e.Released {
			level, msg = slog.LevelInfo, "idem: released lease taken over; resuming the work"
		}
		if l.Enabled(ctx, level) {
			l.LogAttrs(ctx, level, msg,
				slog.String("table", e.Table), slog.String("scope", e.Scope), slog.String("key", e.Key),
				slog.Int64("token", e.Token), slog.String("step", e.Step))
		}
	case EventRecovery:
		level, msg := slog.LevelInfo, "idem: abandoned lease recovered"
		switch e.Recovery {
		case RecoveryFailed:
			level, msg = slog.LevelWarn, "idem: recovery of an abandoned lease failed; a later round tries again"
		case RecoveryUnknownScope:
			level, msg = slog.LevelWarn, "idem: no recovery function for the scope of an abandoned lease; left alone"
		case RecoveryTaken:
			level, msg = slog.LevelDebug, "idem: abandoned lease taken over by someone else first"
		}
		if l.Enabled(ctx, level) {
			l.LogAttrs(ctx, level, msg,
				slog.String("table", e.Table), slog.String("scope", e.Scope), slog.String("key", e.Key),
				slog.Int64("token", e.Token), slog.String("step", e.Step), slog.Any("error", e.Err))
		}
	case EventRecoveryRound:
		if e.Err != nil && !errors.Is(e.Err, context.Canceled) && l.Enabled(ctx, slog.LevelWarn) {
			l.LogAttrs(ctx, slog.LevelWarn, "idem: recovery round stopped early",
				slog.String("table", e.Table), slog.Int64("listed", e.Rows), slog.Duration("took", e.Duration), slog.Any("error", e.Err))
		}
	case EventPurge:
		level := slog.LevelInfo
		if e.Err != nil {
			level = slog.LevelWarn
		}
		if l.Enabled(ctx, level) {
			l.LogAttrs(ctx, level, "idem: purge",
				slog.String("table", e.Table), slog.Int64("deleted", e.Rows), slog.Int("batches", e.Batches),
				slog.Duration("took", e.Duration), slog.Any("error", e.Err))
		}
	}
}

// claimed reports a decided claim.
func (c *core) claimed(ctx context.Context, req Request, o Outcome, started time.Time, readFirst bool) {
	c.settled.observe(o)
	var wait time.Duration
	if !started.IsZero() {
		wait = time.Since(started)
	}
	c.emit(ctx, Event{Kind: EventClaim, Scope: req.Scope, Key: req.Key, Outcome: o, Wait: wait, ReadFirst: readFirst})
}

// startClock returns the time now when anything observes, else zero.
func (c *core) startClock() time.Time {
	if !c.observing() {
		return time.Time{}
	}
	return time.Now()
}
