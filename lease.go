package idem

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/internal/backoff"
)

// Lease mode is for work that calls something outside the database (a
// payment provider, an email API, another service): the claim commits on
// its own as a pending record holding a lease and a fencing token, the work
// runs outside any long transaction, and completion commits the response in
// a transaction guarded by the token, with the caller's final writes. The
// holder records recovery points (RecordStep: a named step with a small
// payload, committed with that step's own writes) and sends
// DownstreamKey(step) to the provider as its idempotency key. If the holder
// crashes or hangs, its lease expires and exactly one retry takes the work
// over with a new token, sees the last recovery point and resumes from
// there; the stale holder's writes are refused with ErrLeaseLost.
//
// A key's tokens only grow, across all its lifetimes: a record deleted (by
// Purge, Delete or ForceDelete) and claimed afresh gets a token above every
// token it had, so a holder that lost its lease long ago is refused on the
// new record too.
//
// The guarantee: the key's response is stored at most once and every retry
// gets it; steps recorded are never redone by a takeover that honours them;
// an external call is made at least once per step a holder starts, and
// exactly once in effect when the provider honours the downstream key.

// Limits of a recovery point.
const (
	// MaxStepName is the longest step name: 1 to MaxStepName bytes of
	// printable ASCII, like a key.
	MaxStepName = 255
	// MaxStepData is the largest payload of a step: a provider's charge id
	// or a small JSON object, not a document.
	MaxStepData = 64 << 10
)

// ErrInvalidStep means a step name is empty, too long or not printable ASCII, or
// its payload is over MaxStepData. Nothing is written.
var ErrInvalidStep = errors.New("idem: invalid step")

// Lease is what Store.Lease returns: on Won, a held lease on the key's
// work; otherwise what a loser found (Replay, Mismatch or InFlight) in the
// embedded Result, and the methods that write refuse with ErrNotClaimed.
//
// A held lease is safe for use by several goroutines (DoLease extends it
// in the background while the work runs).
type Lease[TTx any] struct {
	Result
	store *Store[TTx]
	req   Request

	resumed   bool
	token     int64
	createdAt time.Time

	// writing serialises the holder's writes (Extend, RecordStep,
	// Complete, Release): an extension racing a release must not revive
	// the lease the release ended.
	writing sync.Mutex

	mu       sync.Mutex
	until    time.Time
	step     string
	stepData []byte
	ended    bool
	// heldUntil is, on this process's monotonic clock, how long the lease
	// is known to be held: from the start of the last write that set its
	// end, less a margin (see leaseMargin).
	heldUntil time.Time
}

// leaseMargin is how much sooner than its recorded end a holder stops
// counting on its lease: the start of the write that set the end is taken
// as the database's time of that write, and the clocks' rates may differ.
func leaseMargin(lease time.Duration) time.Duration { return lease / 10 }

// Token is the lease's fencing token: greater than every token the key
// had before, across takeovers and across records deleted and claimed
// afresh. Zero for a loser.
func (l *Lease[TTx]) Token() int64 { return l.token }

// Resumed reports whether this lease took over work another holder began
// and did not finish (its lease expired or was released): check Step and
// resume from there.
func (l *Lease[TTx]) Resumed() bool { return l.resumed }

// Step returns the last recovery point: recorded by an earlier holder when
// the lease resumed work, or by this holder since. "" when none. data is a
// copy.
func (l *Lease[TTx]) Step() (name string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.step, slices.Clone(l.stepData)
}

// Until is when the lease ends, by the store's clock (or the database's):
// as the claim set it, moved by each Extend and RecordStep. Zero for a
// loser.
func (l *Lease[TTx]) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// DownstreamKey returns the idempotency key to send to another service for
// step: derived from the scope, the key, the time the intention was first
// claimed and the step name, so it is the same for every holder of this
// intention (across retries and takeovers) and different for a new
// intention after the retention window. Send it with the step's external
// call: a provider that honours idempotency keys then does the step once,
// however often a takeover repeats the call. A lease that was not won has
// no intention to name: ErrNotClaimed. An invalid step name is ErrInvalidStep.
func (l *Lease[TTx]) DownstreamKey(step string) (string, error) {
	if l.Outcome != Won {
		return "", fmt.Errorf("%w: downstream key of a lease whose outcome is %v (key %q)", ErrNotClaimed, l.Outcome, l.req.Key)
	}
	if err := validateStep(step, nil); err != nil {
		return "", err
	}
	return downstreamKey(l.req.Scope, l.req.Key, l.createdAt, step), nil
}

func downstreamKey(scope, key string, createdAt time.Time, step string) string {
	var h Hasher
	h.AddString("idem downstream key v1")
	h.AddString(scope)
	h.AddString(key)
	h.AddString(fmt.Sprint(createdAt.UnixMicro()))
	h.AddString(step)
	f := h.Sum()
	return "idem_" + hex.EncodeToString(f[:20])
}

// held checks that l is a lease this caller holds and may write under.
func (l *Lease[TTx]) held(op string) error {
	if l.Outcome != Won {
		return fmt.Errorf("%w: %s on a lease whose outcome is %v (key %q)", ErrNotClaimed, op, l.Outcome, l.req.Key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return fmt.Errorf("%w: %s after the lease of key %q was completed or released", ErrLeaseLost, op, l.req.Key)
	}
	return nil
}

func (l *Lease[TTx]) fence() dialect.FenceArgs {
	return dialect.FenceArgs{
		Scope: l.req.Scope, Key: l.req.Key, Token: l.token, Fingerprint: l.req.Fingerprint[:],
		Now: l.store.now(), Lease: l.store.cfg.Lease,
	}
}

// extended records a write that moved the lease's end to until, begun at
// began (this process's clock).
func (l *Lease[TTx]) extended(until, began time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.until = until
	l.heldUntil = began.Add(l.store.cfg.Lease - leaseMargin(l.store.cfg.Lease))
}

// knownHeldUntil is how long, on this process's clock, the lease is known
// to be held.
func (l *Lease[TTx]) knownHeldUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.heldUntil
}

// leaser returns the dialect's lease mode, or why it cannot run.
func (c *core) leaser() (dialect.Leaser, error) {
	leaser, ok := c.d.(dialect.Leaser)
	if !ok {
		return nil, fmt.Errorf("idem: lease mode on %s: %w: the dialect does not implement dialect.Leaser", c.d.Name(), errors.ErrUnsupported)
	}
	if c.leaseErr != nil {
		return nil, fmt.Errorf("idem: lease mode: %w", c.leaseErr)
	}
	return leaser, nil
}

// Lease claims req's key in lease mode, in a short transaction of its own
// that commits the claim. On Won the caller holds the lease: it does the
// work (RecordStep after each step, Extend while it takes long), then
// Complete or Release. A key whose lease expired (its holder crashed or
// hung, or released it) is taken over: Resumed and Step say where the work
// stands. While another holder's lease is live, Lease waits for it, up to
// Config.WaitBound, to complete (Replay) or expire (takeover); then it
// returns InFlight with the record (its LeaseUntil says when to retry). A
// completed key replays; another fingerprint is a Mismatch. On a dialect
// without lease mode (no dialect.Leaser) Lease, DoLease, Resume and
// ExpiredLeases fail with an error wrapping errors.ErrUnsupported.
func (s *Store[TTx]) Lease(ctx context.Context, req Request) (*Lease[TTx], error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	leaser, err := s.leaser()
	if err != nil {
		return nil, err
	}
	started := time.Now()
	deadline := started.Add(s.cfg.WaitBound)
	pause := 10 * time.Millisecond
	l, err := s.acquire(ctx, leaser, req, nil)
	for err == nil && l.Outcome == InFlight && time.Now().Before(deadline) {
		// Wait for the holder: poll the record, cheaply, outside any
		// transaction, and claim again only when it may have changed hands.
		if err := backoff.Sleep(ctx, min(pause, time.Until(deadline))); err != nil {
			return nil, s.failed(ctx, "wait for the lease of", req, err)
		}
		pause = min(2*pause, 250*time.Millisecond)
		rec, found, lerr := s.d.Lookup(ctx, s.pool, s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
		if lerr == nil && found && rec.State == dialect.Pending && !rec.LeaseExpired && !rec.LeaseUntil.IsZero() &&
			bytes32(rec.Fingerprint) == req.Fingerprint {
			l.Record, _ = toRecord(rec)
			continue
		}
		// Anything else (a read that failed, too) is for the claim to
		// decide.
		l, err = s.acquire(ctx, leaser, req, nil)
	}
	if err == nil && s.observing() {
		s.emit(ctx, Event{Kind: EventClaim, Scope: req.Scope, Key: req.Key, Outcome: l.Outcome, Wait: time.Since(started), Lease: true})
	}
	return l, err
}

// takeover is what a lost lease claim may do next, as the key's record
// says.
type takeover int

const (
	noTakeover  takeover = iota
	takeExpired          // no live record: its retention passed (or it vanished)
	resumeLease          // pending for this request, its lease ended
)

// acquire runs one lease claim, retried like Do's transactions: the
// insert, and only when the record it lost to may be taken over, the
// takeover in a transaction of its own. With resume, the record Resume
// read, it never inserts nor starts a new intention.
func (s *Store[TTx]) acquire(ctx context.Context, leaser dialect.Leaser, req Request, resume *Record) (*Lease[TTx], error) {
	var l *Lease[TTx]
	err := s.retry(ctx, req, func() error {
		var err error
		l, err = s.acquireOnce(ctx, leaser, req, resume)
		return err
	})
	if err != nil {
		var stopped *stoppedError
		if errors.As(err, &stopped) {
			err = fmt.Errorf("%w (last error: %w)", stopped.ctxErr, stopped.last)
		}
		if errors.Is(err, ErrNotFound) {
			return nil, err
		}
		return nil, s.failed(ctx, "lease", req, err)
	}
	return l, nil
}

// errVanished: the record a lease claim lost to was deleted before it
// could be taken over; a retry may then insert.
var errVanished = dialect.Classified(dialect.ErrSerialization, errors.New("idem: the key's record vanished during the lease claim"))

func (s *Store[TTx]) acquireOnce(ctx context.Context, leaser dialect.Leaser, req Request, resume *Record) (*Lease[TTx], error) {
	resumeOnly := resume != nil
	var (
		won, found bool
		rec        dialect.Record
		began      time.Time
		// released: the record taken over had its lease released (for
		// Resume, as it read the record).
		released = resumeOnly && !resume.Completed && !resume.LeaseUntil.IsZero() && resume.LeaseUntil.Equal(resume.CreatedAt)
	)
	a := dialect.LeaseArgs{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint[:],
		Retention: s.cfg.Retention, Lease: s.cfg.Lease, WaitBound: s.cfg.WaitBound,
	}
	read := dialect.LookupArgs{Scope: req.Scope, Key: req.Key}
	// start marks a statement that may set the lease's end: this
	// process's clock first, so the lease is never counted on past the
	// end the store's clock (read after it) gives it.
	start := func() {
		began = time.Now()
		a.Now = s.now()
		read.Now = a.Now
	}
	next := resumeLease
	if !resumeOnly {
		err := s.tx(ctx, req, true, s.cfg.WaitBound, func(q dialect.Queryer) error {
			start()
			var err error
			if won, err = leaser.InsertLease(ctx, q, s.table, a); err != nil {
				return err
			}
			// A lost insert writes nothing more here (see dialect.Leaser):
			// this read decides whether a takeover is worth a transaction.
			if rec, found, err = s.d.Lookup(ctx, q, s.table, read); err == nil && won && !found {
				return errVanished // roll the claim back rather than leave it unheld
			}
			return err
		})
		switch {
		case errors.Is(err, ErrLockTimeout) && ctx.Err() == nil:
			return s.lostLease(req, s.waitedOut(ctx, req)), nil
		case err != nil:
			return nil, err
		case won:
			return s.heldLease(ctx, req, rec, began, false, false)
		}
		released = found && releasedLease(rec)
		next = noTakeover
		if !found {
			next = takeExpired
		} else if rec.State == dialect.Pending && !rec.LeaseUntil.IsZero() && rec.LeaseExpired && bytes32(rec.Fingerprint) == req.Fingerprint {
			next = resumeLease
		}
		if next == noTakeover {
			res, err := s.judge(req, rec)
			return s.lostLease(req, res), err
		}
	}
	err := s.tx(ctx, req, true, s.cfg.WaitBound, func(q dialect.Queryer) error {
		start()
		var err error
		if next == takeExpired {
			won, err = leaser.TakeExpired(ctx, q, s.table, a)
		} else {
			won, err = leaser.ResumeLease(ctx, q, s.table, a)
		}
		if err != nil {
			return err
		}
		if rec, found, err = s.d.Lookup(ctx, q, s.table, read); err == nil && won && !found {
			return errVanished
		}
		return err
	})
	switch {
	case errors.Is(err, ErrLockTimeout) && ctx.Err() == nil:
		return s.lostLease(req, s.waitedOut(ctx, req)), nil
	case err != nil:
		return nil, err
	case !found && resumeOnly:
		return nil, s.noLiveRecord(ctx, s.pool, req)
	case !found:
		return nil, errVanished
	case won:
		return s.heldLease(ctx, req, rec, began, next == resumeLease, released)
	}
	res, err := s.judge(req, rec)
	return s.lostLease(req, res), err
}

// bytes32 is a stored fingerprint as a Fingerprint (zero if malformed;
// judge reports that).
func bytes32(b []byte) (f Fingerprint) {
	if len(b) == len(f) {
		copy(f[:], b)
	}
	return f
}

// lostLease is a loser's Lease: what it found, and methods that refuse.
func (s *Store[TTx]) lostLease(req Request, res Result) *Lease[TTx] {
	return &Lease[TTx]{Result: res, store: s, req: req}
}

// heldLease is the Lease of a won claim whose record is rec, written by a
// statement that began at began.
// resumed says it took over an ended lease of the same intention, released
// that the lease had been released rather than let lapse.
func (s *Store[TTx]) heldLease(ctx context.Context, req Request, rec dialect.Record, began time.Time, resumed, released bool) (*Lease[TTx], error) {
	r, err := toRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("idem: key %q in scope %q: %w", req.Key, req.Scope, err)
	}
	l := &Lease[TTx]{Result: Result{Outcome: Won, Record: r}, store: s, req: req, resumed: resumed,
		token: r.Token, createdAt: r.CreatedAt, step: r.Step, stepData: slices.Clone(r.StepData)}
	l.extended(r.LeaseUntil, began)
	if resumed && s.observing() {
		s.emit(ctx, Event{Kind: EventTakeover, Scope: req.Scope, Key: req.Key, Token: r.Token, Step: r.Step, Lease: true, Released: released})
	}
	return l, nil
}

// tx runs fn once in a short READ COMMITTED transaction of the core's,
// begun within wait (SQLite's write lock), and commits. Its error is
// classified; a COMMIT whose outcome is unknown is reported (as lease
// mode's when lease is set).
func (s *Store[TTx]) tx(ctx context.Context, req Request, lease bool, wait time.Duration, fn func(q dialect.Queryer) error) error {
	tx, err := s.driver.Begin(ctx, dialect.BeginOptions{Isolation: sql.LevelReadCommitted, WaitBound: wait})
	if err != nil {
		return s.d.Classify(err)
	}
	if err := fn(tx); err != nil {
		rollback(ctx, tx)
		return s.d.Classify(err)
	}
	return s.committed(ctx, req, lease, tx)
}

// committed commits tx and reports a COMMIT whose outcome is unknown.
func (s *Store[TTx]) committed(ctx context.Context, req Request, lease bool, tx dialect.Tx[TTx]) error {
	err := s.d.Classify(tx.Commit(ctx))
	if errors.Is(err, ErrCommitUnknown) && s.observing() {
		s.emit(ctx, Event{Kind: EventCommitUnknown, Scope: req.Scope, Key: req.Key, Err: err, Lease: lease})
	}
	return err
}

// inTx runs fn with tx, retried like Do's transactions on errors a retry
// may cure, within the holder's wait bound.
func (s *Store[TTx]) inTx(ctx context.Context, req Request, op string, fn func(q dialect.Queryer) error) error {
	err := s.retry(ctx, req, func() error { return s.tx(ctx, req, true, s.cfg.HolderWaitBound, fn) })
	if err != nil {
		return s.failed(ctx, op, req, err)
	}
	return nil
}

// Extend moves the lease's end to Config.Lease from now. It fails with
// ErrLeaseLost when the lease was taken over.
func (l *Lease[TTx]) Extend(ctx context.Context) error {
	l.writing.Lock()
	defer l.writing.Unlock()
	if err := l.held("extend"); err != nil {
		return err
	}
	leaser := l.store.d.(dialect.Leaser)
	var until, began time.Time
	err := l.store.inTx(ctx, l.req, "extend the lease of", func(q dialect.Queryer) error {
		began = time.Now()
		var err error
		until, err = leaser.ExtendLease(ctx, q, l.store.table, l.fence())
		return err
	})
	if err == nil {
		l.extended(until, began)
	}
	return err
}

// RecordStep records a recovery point: step finished, with data (at most
// MaxStepData bytes) for whoever resumes the work. fn, when not nil, makes
// the step's own database writes in the same transaction, so the writes
// and the recovery point commit together or not at all. The lease is
// extended too. It fails with ErrLeaseLost, writing nothing, when the lease
// was taken over; fn's error is returned unchanged, after a rollback. The
// lease's writes take turns: fn must not call Extend, RecordStep, Complete
// or Release of the same lease.
func (l *Lease[TTx]) RecordStep(ctx context.Context, step string, data []byte, fn func(ctx context.Context, tx TTx) error) error {
	if err := validateStep(step, data); err != nil {
		return err
	}
	l.writing.Lock()
	defer l.writing.Unlock()
	if err := l.held("record step " + step); err != nil {
		return err
	}
	leaser := l.store.d.(dialect.Leaser)
	var until, began time.Time
	err := l.fencedTx(ctx, "record step "+step+" of", fn, func(q dialect.Queryer) error {
		began = time.Now()
		var err error
		until, err = leaser.RecordStep(ctx, q, l.store.table, dialect.StepArgs{FenceArgs: l.fence(), Step: step, Data: data})
		return err
	})
	if err != nil {
		return err
	}
	l.extended(until, began)
	l.mu.Lock()
	l.step, l.stepData = step, slices.Clone(data)
	l.mu.Unlock()
	return nil
}

// fencedTx runs write (a fenced statement) then fn in one transaction and
// commits, retried like Do's transactions. The fenced write goes first: it
// holds the row until COMMIT, so no takeover slips in between it and fn's
// writes. fn's own error is returned unchanged after a rollback, unless a
// retry may cure it.
func (l *Lease[TTx]) fencedTx(ctx context.Context, op string, fn func(ctx context.Context, tx TTx) error, write func(q dialect.Queryer) error) error {
	s := l.store
	var fnErr error
	err := s.retry(ctx, l.req, func() error {
		fnErr = nil
		tx, err := s.driver.Begin(ctx, dialect.BeginOptions{WaitBound: s.cfg.HolderWaitBound})
		if err != nil {
			return s.d.Classify(err)
		}
		if err := write(tx); err != nil {
			rollback(ctx, tx)
			return s.d.Classify(err)
		}
		if fn != nil {
			if err := fn(ctx, tx.Native()); err != nil {
				rollback(ctx, tx)
				if classified := s.d.Classify(err); retryable(classified) {
					return classified
				}
				fnErr = err
				return nil
			}
		}
		return s.committed(ctx, l.req, true, tx)
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return s.failed(ctx, op, l.req, err)
	}
	return nil
}

// Complete stores resp as the key's outcome and ends the lease, in a
// transaction guarded by the lease's token; fn, when not nil, makes the
// caller's final database writes in it. A response whose status
// Config.StoreStatus refuses (5xx, 400, 408, 422, 425, 429 by default) is
// not stored: the lease is released instead, so a retry of the same request
// resumes the work from the last recovery point, and the result has
// Committed false. A released lease keeps the key for this request: to
// free it for a corrected request, Forget the lease instead. It fails with
// ErrLeaseLost, storing nothing, when the lease was taken over. A response
// it cannot store (too large, an invalid status) is refused before
// anything is written; the lease stays held (DoLease then releases it).
// When a statement of fn failed and the database aborted the transaction
// (see ErrTxAborted), nothing is stored: a client error (4xx) is returned
// as Do returns it (Committed false, Result.NotStored set) and the lease
// released; any other response is an error matching ErrTxAborted, and the
// lease stays held.
func (l *Lease[TTx]) Complete(ctx context.Context, resp Response, fn func(ctx context.Context, tx TTx) error) (Result, error) {
	if err := resp.validate(); err != nil {
		return Result{}, err
	}
	l.writing.Lock()
	defer l.writing.Unlock()
	if err := l.held("complete"); err != nil {
		return Result{}, err
	}
	if !l.store.cfg.StoreStatus(resp.Status) {
		if err := l.release(ctx); err != nil {
			return Result{}, err
		}
		return Result{Outcome: Won, Response: resp}, nil
	}
	header, body, err := l.store.encodeResponse(resp)
	if err != nil {
		return Result{}, err
	}
	leaser := l.store.d.(dialect.Leaser)
	answered := fn // fn, telling its own error from the commit's
	fnFailed := false
	if fn != nil {
		answered = func(ctx context.Context, tx TTx) error {
			err := fn(ctx, tx)
			fnFailed = err != nil
			return err
		}
	}
	err = l.fencedTx(ctx, "complete the lease of", answered, func(q dialect.Queryer) error {
		a := dialect.CompleteLeaseArgs{FenceArgs: l.fence(), Status: resp.Status, Header: header, Body: body, Retention: l.store.cfg.Retention}
		return leaser.CompleteLease(ctx, q, l.store.table, a)
	})
	if errors.Is(err, ErrTxAborted) && !fnFailed {
		// A statement of fn failed and fn went on: its COMMIT rolled back.
		res, err := unstored(l.req, resp, err)
		if err != nil {
			return Result{}, err
		}
		if err := l.release(ctx); err != nil {
			return Result{}, err
		}
		return res, nil
	}
	if err != nil {
		return Result{}, err
	}
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
	if l.store.observing() {
		l.store.emit(ctx, Event{Kind: EventStored, Scope: l.req.Scope, Key: l.req.Key, Status: resp.Status,
			HeaderBytes: len(header), BodyBytes: len(body), Lease: true})
	}
	return Result{Outcome: Won, Response: resp, Committed: true}, nil
}

// Release ends the lease at once without storing a response: for a
// transient failure (a provider timed out, say). The record stays pending
// with its recovery point, and the next claim of the key takes the work
// over and resumes it. It fails with ErrLeaseLost when the lease was
// already taken over.
func (l *Lease[TTx]) Release(ctx context.Context) error {
	l.writing.Lock()
	defer l.writing.Unlock()
	return l.release(ctx)
}

// Forget ends the lease and deletes the key's record, storing nothing: for
// work that never began (the request failed validation, see
// ErrNotAnOutcome). The key is then free, and the next request with it (a
// corrected one, with another fingerprint, included) claims it afresh; a
// released lease would instead keep the key for this request, so a
// corrected request would be a Mismatch. The deletion is fenced: it
// happens in a transaction that first extends the lease with its token,
// and it raises the key's token floor, so tokens never repeat. Work that
// recorded a step has begun (an external call was made under this
// intention's DownstreamKey): Forget refuses it, changing nothing, with an
// error matching ErrWorkBegan and ErrInvalidResponse; Release it
// instead. It fails with ErrLeaseLost when the lease was taken over.
func (l *Lease[TTx]) Forget(ctx context.Context) error {
	l.writing.Lock()
	defer l.writing.Unlock()
	if err := l.held("forget"); err != nil {
		return err
	}
	if step, _ := l.Step(); step != "" {
		return fmt.Errorf("%w: %w: key %q recorded step %q, so its work began; release the lease instead",
			ErrInvalidResponse, ErrWorkBegan, l.req.Key, step)
	}
	a, err := l.store.admin("forget")
	if err != nil {
		return err
	}
	leaser := l.store.d.(dialect.Leaser)
	err = l.fencedTx(ctx, "forget the lease of", nil, func(q dialect.Queryer) error {
		// The extension proves the lease is still this holder's and locks
		// its row for the deletion.
		if _, err := leaser.ExtendLease(ctx, q, l.store.table, l.fence()); err != nil {
			return err
		}
		_, err := a.Delete(ctx, q, l.store.table, dialect.DeleteArgs{Scope: l.req.Scope, Key: l.req.Key, Force: true, Now: l.store.now()})
		return err
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
	return nil
}

// releasedLease reports whether rec's lease was ended by Release: a release
// sets the lease's end to the claim's time (dialect.Leaser.ReleaseLease),
// which no lease granted or extended ends at.
func releasedLease(rec dialect.Record) bool {
	return rec.State == dialect.Pending && !rec.LeaseUntil.IsZero() && rec.LeaseUntil.Equal(rec.CreatedAt)
}

// release is Release, with the lease's writes already serialised.
func (l *Lease[TTx]) release(ctx context.Context) error {
	if err := l.held("release"); err != nil {
		return err
	}
	leaser := l.store.d.(dialect.Leaser)
	err := l.store.inTx(ctx, l.req, "release the lease of", func(q dialect.Queryer) error {
		return leaser.ReleaseLease(ctx, q, l.store.table, l.fence())
	})
	if err == nil {
		l.mu.Lock()
		l.ended = true
		l.mu.Unlock()
	}
	return err
}

// ExpiredLeases lists up to limit keys whose lease expired before their
// work completed (the holder crashed, hung or released it) while their
// retention runs: work nobody is doing. A recovery routine resumes each
// with Resume; so does any retry of the key.
func (s *Store[TTx]) ExpiredLeases(ctx context.Context, limit int) ([]Record, error) {
	leaser, err := s.leaser()
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d is not positive", ErrInvalidConfig, limit)
	}
	recs, err := leaser.ExpiredLeases(ctx, s.pool, s.table, dialect.ExpiredLeasesArgs{Now: s.now(), Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("idem: list expired leases on %s: %w", s.d.Name(), s.d.Classify(err))
	}
	out := make([]Record, 0, len(recs))
	for _, rec := range recs {
		r, err := toRecord(rec)
		if err != nil {
			return nil, fmt.Errorf("idem: key %q in scope %q: %w", rec.Key, rec.Scope, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// Resume takes over the expired lease of a key, as a retry of the request
// that claimed it would, for a recovery routine that has no request at hand
// (see ExpiredLeases). It only ever resumes the intention it finds: it
// does not wait, never inserts a record and never takes over one whose
// retention passed. A key whose lease is live again gives InFlight, a key
// completed meanwhile Replay. It returns ErrNotFound when the key has no
// live record, also when the record vanished between its read and the
// takeover.
func (s *Store[TTx]) Resume(ctx context.Context, scope, key string) (*Lease[TTx], error) {
	leaser, err := s.leaser()
	if err != nil {
		return nil, err
	}
	rec, err := s.Lookup(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	req := Request{Scope: scope, Key: key, Fingerprint: rec.Fingerprint}
	started := time.Now()
	l, err := s.acquire(ctx, leaser, req, &rec)
	if err == nil && s.observing() {
		s.emit(ctx, Event{Kind: EventClaim, Scope: req.Scope, Key: req.Key, Outcome: l.Outcome, Wait: time.Since(started), Lease: true})
	}
	return l, err
}

// validateStep checks a recovery point.
func validateStep(step string, data []byte) error {
	if why := printableASCII(step, MaxStepName); why != "" {
		return fmt.Errorf("%w: name %q: %s", ErrInvalidStep, step, why)
	}
	if len(data) > MaxStepData {
		return fmt.Errorf("%w: %d bytes of data, at most %d", ErrInvalidStep, len(data), MaxStepData)
	}
	return nil
}
