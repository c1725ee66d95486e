package idem

import (
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Lease mode is for work that calls something outside the database (a
// payment provider, an email API, another service): the claim commits on
// its own as a pending record holding a lease and a fencing token, the work
// runs outside any long transaction, and completion commits the response in
// a transaction guarded by the token, with the caller's final writes. The
// holder records recovery points (RecordStep: a named step with a small
// payload, committed with that step's own writes) and sends
// DownstreamKey(step) to the provider as its idempotency key. If the holder crashes or hangs, its
// lease expires and exactly one retry takes the work over with the next
// token, sees the last recovery point and resumes from there; the stale
// holder's writes are refused with ErrLeaseLost.
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
// embedded Result, and the methods that write refuse with ErrNotWon.
//
// A held lease is safe for use by several goroutines (DoLease extends it
// in the background while the work runs).
type Lease[TTx any] struct {
	Result
	store *Store[TTx]
	req   Request

	mu        sync.Mutex
	resumed   bool
	token     int64
	createdAt time.Time
	until     time.Time
	step      string
	stepData  []byte
	ended     bool
}

// Token is the lease's fencing token: 1 for a fresh lease, one more for
// every takeover. Zero for a loser.
func (l *Lease[TTx]) Token() int64 { return l.token }

// Resumed reports whether this lease took over work another holder began
// and did not finish (its lease expired or was released): check Step and
// resume from there.
func (l *Lease[TTx]) Resumed() bool { return l.resumed }

// Step returns the last recovery point: recorded by an earlier holder when
// the lease resumed work, or by this holder since. "" when none.
func (l *Lease[TTx]) Step() (name string, data []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.step, l.stepData
}

// Until is when the lease ends, as read when it was taken (later extensions
// move it; by the store's clock, or the database's).
func (l *Lease[TTx]) Until() time.Time { return l.until }

// DownstreamKey returns the idempotency key to send to another service for
// step: derived from the scope, the key, the time the intention was first
// claimed and the step name, so it is the same for every holder of this
// intention (across retries and takeovers) and different for a new
// intention after the retention window. Send it with the step's external
// call: a provider that honours idempotency keys then does the step once,
// however often a takeover repeats the call.
func (l *Lease[TTx]) DownstreamKey(step string) string {
	return downstreamKey(l.req.Scope, l.req.Key, l.createdAt, step)
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
		return fmt.Errorf("%w: %s on a lease whose outcome is %v (key %q)", ErrNotWon, op, l.Outcome, l.req.Key)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return fmt.Errorf("%w: %s after the lease of key %q was completed or released", ErrLeaseLost, op, l.req.Key)
	}
	return nil
}

func (l *Lease[TTx]) fence() dialect.FenceArgs {
	return dialect.FenceArgs{Scope: l.req.Scope, Key: l.req.Key, Token: l.token, Now: l.store.now(), Lease: l.store.cfg.Lease}
}

// Lease claims req's key in lease mode, in a short transaction of its own
// that commits the claim. On Won the caller holds the lease: it does the
// work (RecordStep after each step, Extend while it takes long), then
// Complete or Release. A key whose lease expired (its holder crashed or
// hung, or released it) is taken over: Resumed and Step say where the work
// stands. While another holder's lease is live, Lease waits for it, up to
// Config.WaitBound, to complete (Replay) or expire (takeover); then it
// returns InFlight with the record (its LeaseUntil says when to retry). A
// completed key replays; another fingerprint is a Mismatch.
func (s *Store[TTx]) Lease(ctx context.Context, req Request) (*Lease[TTx], error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	leaser, ok := s.d.(dialect.Leaser)
	if !ok {
		return nil, fmt.Errorf("%w: the %s dialect has no lease mode (dialect.Leaser)", ErrInvalidConfig, s.d.Name())
	}
	deadline := time.Now().Add(s.cfg.WaitBound)
	pause := 10 * time.Millisecond
	l, err := s.acquire(ctx, leaser, req)
	for err == nil && l.Outcome == InFlight && time.Now().Before(deadline) {
		// Wait for the holder: poll the record, cheaply, outside any
		// transaction, and claim again only when it may have changed hands.
		if err := sleep(ctx, min(pause, time.Until(deadline))); err != nil {
			return nil, s.failed(ctx, "wait for the lease of", req, err)
		}
		pause = min(2*pause, 250*time.Millisecond)
		rec, found, lerr := s.d.Lookup(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: s.now()})
		if lerr != nil {
			return nil, s.failed(ctx, "wait for the lease of", req, s.d.Classify(lerr))
		}
		if found && rec.State == dialect.Pending && !rec.LeaseExpired {
			l.Record, _ = toRecord(rec)
			continue
		}
		l, err = s.acquire(ctx, leaser, req)
	}
	return l, err
}

// acquire runs one lease claim: insert, else take over, then read.
func (s *Store[TTx]) acquire(ctx context.Context, leaser dialect.Leaser, req Request) (*Lease[TTx], error) {
	a := dialect.LeaseArgs{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint[:], Now: s.now(),
		Retention: s.cfg.Retention, Lease: s.cfg.Lease, WaitBound: s.cfg.WaitBound,
	}
	var (
		won, resumed bool
		rec          dialect.Record
		found        bool
	)
	err := s.inTx(ctx, req, "lease", func(q dialect.Queryer) error {
		var err error
		if won, err = leaser.InsertLease(ctx, q, s.table, a); err != nil {
			return err
		}
		if !won {
			// Taken over only when its retention passed, or it is pending
			// for this fingerprint and its lease ended: the UPDATE says.
			if won, resumed, err = leaser.TakeLease(ctx, q, s.table, a); err != nil {
				return err
			}
		}
		rec, found, err = s.d.Lookup(ctx, q, s.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: a.Now})
		if err == nil && !found {
			// Purged or expired between the statements: claim again.
			err = dialect.Classified(dialect.ErrSerialization, errors.New("idem: the key's record vanished during the lease claim"))
		}
		return err
	})
	if err != nil {
		if errors.Is(err, ErrLockTimeout) && ctx.Err() == nil {
			return &Lease[TTx]{Result: Result{Outcome: InFlight}, store: s, req: req}, nil
		}
		return nil, err
	}
	l := &Lease[TTx]{store: s, req: req}
	if !won {
		l.Result, err = s.judge(req, rec)
		return l, err
	}
	r, err := toRecord(rec)
	if err != nil {
		return nil, fmt.Errorf("idem: key %q in scope %q: %w", req.Key, req.Scope, err)
	}
	l.Outcome, l.Record, l.resumed = Won, r, resumed
	l.token, l.createdAt, l.until, l.step, l.stepData = r.Token, r.CreatedAt, r.LeaseUntil, r.Step, r.StepData
	if resumed && s.observing() {
		s.emit(ctx, Event{Kind: EventTakeover, Scope: req.Scope, Key: req.Key, Token: r.Token, Step: r.Step})
	}
	return l, nil
}

// inTx runs fn in a short READ COMMITTED transaction of the core's, and
// commits; retried like Do's transactions on errors a retry may cure.
func (s *Store[TTx]) inTx(ctx context.Context, req Request, op string, fn func(q dialect.Queryer) error) error {
	err := s.retry(ctx, req, func() error {
		tx, err := s.driver.Begin(ctx, dialect.BeginOptions{Isolation: sql.LevelReadCommitted, WaitBound: s.cfg.WaitBound})
		if err != nil {
			return s.d.Classify(err)
		}
		if err := fn(tx); err != nil {
			rollback(ctx, tx)
			return s.d.Classify(err)
		}
		return s.d.Classify(tx.Commit(ctx))
	})
	if err != nil {
		return s.failed(ctx, op, req, err)
	}
	return nil
}

// Extend moves the lease's end to Config.Lease from now. It fails with
// ErrLeaseLost when the lease was taken over.
func (l *Lease[TTx]) Extend(ctx context.Context) error {
	if err := l.held("extend"); err != nil {
		return err
	}
	leaser := l.store.d.(dialect.Leaser)
	return l.store.inTx(ctx, l.req, "extend the lease of", func(q dialect.Queryer) error {
		return leaser.ExtendLease(ctx, q, l.store.table, l.fence())
	})
}

// RecordStep records a recovery point: step finished, with data (at most
// MaxStepData bytes) for whoever resumes the work. fn, when not nil, makes
// the step's own database writes in the same transaction, so the writes
// and the recovery point commit together or not at all. The lease is
// extended too. It fails with ErrLeaseLost, writing nothing, when the lease
// was taken over; fn's error is returned unchanged, after a rollback.
func (l *Lease[TTx]) RecordStep(ctx context.Context, step string, data []byte, fn func(ctx context.Context, tx TTx) error) error {
	if err := validateStep(step, data); err != nil {
		return err
	}
	if err := l.held("record step " + step); err != nil {
		return err
	}
	leaser := l.store.d.(dialect.Leaser)
	err := l.fencedTx(ctx, "record step "+step+" of", fn, func(q dialect.Queryer) error {
		return leaser.RecordStep(ctx, q, l.store.table, dialect.StepArgs{FenceArgs: l.fence(), Step: step, Data: data})
	})
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.step, l.stepData = step, data
	l.mu.Unlock()
	return nil
}

// fencedTx runs write (a fenced statement) then fn in one transaction and
// commits, retried like Do's transactions. The fenced write goes first: it
// holds the row until COMMIT, so no takeover slips in between it and fn's
// writes. fn's own error is returned unchanged after a rollback, unless a
// retry may cure it.
func (l *Lease[TTx]) fencedTx(ctx context.Context, op string, fn func(ctx context.Context, tx TTx) error, write func(q dialect.Queryer) error) error {
	var fnErr error
	err := l.store.retry(ctx, l.req, func() error {
		fnErr = nil
		tx, err := l.store.driver.Begin(ctx, dialect.BeginOptions{WaitBound: l.store.cfg.WaitBound})
		if err != nil {
			return l.store.d.Classify(err)
		}
		if err := write(tx); err != nil {
			rollback(ctx, tx)
			return l.store.d.Classify(err)
		}
		if fn != nil {
			if err := fn(ctx, tx.Native()); err != nil {
				rollback(ctx, tx)
				if classified := l.store.d.Classify(err); retryable(classified) {
					return classified
				}
				fnErr = err
				return nil
			}
		}
		return l.store.d.Classify(tx.Commit(ctx))
	})
	if fnErr != nil {
		return fnErr
	}
	if err != nil {
		return l.store.failed(ctx, op, l.req, err)
	}
	return nil
}

// Complete stores resp as the key's outcome and ends the lease, in a
// transaction guarded by the lease's token; fn, when not nil, makes the
// caller's final database writes in it. A response whose status
// Config.StoreStatus refuses (5xx, 408, 425, 429 by default) is not stored:
// the lease is released instead, so a retry resumes the work from the last
// recovery point, and the result has Committed false. It fails with
// ErrLeaseLost, storing nothing, when the lease was taken over.
func (l *Lease[TTx]) Complete(ctx context.Context, resp Response, fn func(ctx context.Context, tx TTx) error) (Result, error) {
	if err := resp.validate(); err != nil {
		return Result{}, err
	}
	if err := l.held("complete"); err != nil {
		return Result{}, err
	}
	if !l.store.cfg.StoreStatus(resp.Status) {
		if err := l.Release(ctx); err != nil {
			return Result{}, err
		}
		return Result{Outcome: Won, Response: resp}, nil
	}
	header, body, err := l.store.encodeResponse(resp)
	if err != nil {
		return Result{}, err
	}
	leaser := l.store.d.(dialect.Leaser)
	err = l.fencedTx(ctx, "complete the lease of", fn, func(q dialect.Queryer) error {
		a := dialect.CompleteLeaseArgs{FenceArgs: l.fence(), Status: resp.Status, Header: header, Body: body, Retention: l.store.cfg.Retention}
		return leaser.CompleteLease(ctx, q, l.store.table, a)
	})
	if err != nil {
		return Result{}, err
	}
	l.mu.Lock()
	l.ended = true
	l.mu.Unlock()
	return Result{Outcome: Won, Response: resp, Committed: true}, nil
}

// Release ends the lease at once without storing a response: for a
// transient failure (a provider timed out, say). The record stays pending
// with its recovery point, and the next claim of the key takes the work
// over and resumes it. It fails with ErrLeaseLost when the lease was
// already taken over.
func (l *Lease[TTx]) Release(ctx context.Context) error {
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

// LeaseFunc is the work DoLease protects: it gets the held lease (Resumed,
// Step and DownstreamKey say what was done already; RecordStep each step
// as it finishes) and returns the response to store.
type LeaseFunc[TTx any] func(ctx context.Context, l *Lease[TTx]) (Response, error)

// DoLease runs fn in lease mode: Lease, then fn while a heartbeat extends
// the lease every third of Config.Lease, then Complete with fn's response
// (or Release when its status is not to be stored). If fn returns an error
// or panics, the lease is released, so a retry resumes from the last
// recovery point, and the error (or panic) comes back unchanged. Once fn
// has returned, completing or releasing no longer ends with ctx; it runs
// within Config.CommitTimeout. If the lease is lost while fn runs, fn's
// context is cancelled with ErrLeaseLost as its cause. Losers get Replay,
// Mismatch or InFlight without running fn.
func (s *Store[TTx]) DoLease(ctx context.Context, req Request, fn LeaseFunc[TTx]) (Result, error) {
	if fn == nil {
		return Result{}, fmt.Errorf("%w: nil function", ErrInvalidConfig)
	}
	l, err := s.Lease(ctx, req)
	if err != nil || l.Outcome != Won {
		if l == nil {
			return Result{}, err
		}
		return l.Result, err
	}
	// The work is done once fn returns: finishing it (completing or
	// releasing) must not end with a caller that hung up; CommitTimeout
	// bounds it instead, as in Do.
	finishCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.WithoutCancel(ctx), s.cfg.CommitTimeout)
	}
	workCtx, stop := l.heartbeat(ctx)
	returned := false
	defer func() {
		stop()
		if !returned { // fn panicked: let a retry resume at once
			fctx, cancel := finishCtx()
			defer cancel()
			_ = l.Release(fctx)
		}
	}()
	resp, err := fn(workCtx, l)
	returned = true
	stop()
	fctx, cancel := finishCtx()
	defer cancel()
	if err != nil {
		if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return Result{}, errors.Join(err, rerr)
		}
		return Result{}, err
	}
	return l.Complete(fctx, resp, nil)
}

// heartbeat extends l every third of the lease until stop is called. The
// returned context ends, with ErrLeaseLost as its cause, if an extension
// finds the lease taken over.
func (l *Lease[TTx]) heartbeat(ctx context.Context) (context.Context, func()) {
	workCtx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(max(l.store.cfg.Lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-workCtx.Done():
				return
			case <-t.C:
				if err := l.Extend(workCtx); errors.Is(err, ErrLeaseLost) {
					cancel(err)
					return
				}
			}
		}
	})
	var once sync.Once
	return workCtx, func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			cancel(nil)
		})
	}
}

// ExpiredLeases lists up to limit keys whose lease expired before their
// work completed (the holder crashed, hung or released it) while their
// retention runs: work nobody is doing. A recovery routine resumes each
// with Resume; so does any retry of the key.
func (s *Store[TTx]) ExpiredLeases(ctx context.Context, limit int) ([]Record, error) {
	leaser, ok := s.d.(dialect.Leaser)
	if !ok {
		return nil, fmt.Errorf("%w: the %s dialect has no lease mode (dialect.Leaser)", ErrInvalidConfig, s.d.Name())
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d is not positive", ErrInvalidConfig, limit)
	}
	recs, err := leaser.ExpiredLeases(ctx, s.driver.Pool(), s.table, dialect.ExpiredLeasesArgs{Now: s.now(), Limit: limit})
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
// (see ExpiredLeases). It does not wait: a key whose lease is live again
// gives InFlight. It returns ErrNotFound when the key has no live record.
func (s *Store[TTx]) Resume(ctx context.Context, scope, key string) (*Lease[TTx], error) {
	rec, err := s.Lookup(ctx, scope, key)
	if err != nil {
		return nil, err
	}
	leaser, ok := s.d.(dialect.Leaser)
	if !ok {
		return nil, fmt.Errorf("%w: the %s dialect has no lease mode (dialect.Leaser)", ErrInvalidConfig, s.d.Name())
	}
	return s.acquire(ctx, leaser, Request{Scope: scope, Key: key, Fingerprint: rec.Fingerprint})
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
