package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/internal/backoff"
)

// DefaultRecoveryInterval is how often RunRecovery looks for abandoned
// leases when Recovery.Interval is 0.
const DefaultRecoveryInterval = 30 * time.Second

// DefaultRecoveryLimit is the Recovery.Limit used when it is 0.
const DefaultRecoveryLimit = 100

// recoveryWidening is how far a round widens its listing past leases it
// cannot resume (of an unknown scope, or whose takeover failed): up to this
// many times Recovery.Limit records.
const recoveryWidening = 16

// Recovery says which function resumes the abandoned work of each
// operation, and how RunRecovery paces itself.
//
// A resumed function has no request at hand: it gets the lease a takeover
// gave it (Lease.Step and its data say how far the work got, Record.Scope
// and Record.Key whose work it is, DownstreamKey the same provider keys as
// every earlier holder) and does what is left, exactly as a retry of the
// request would when it takes the work over. Record in each step's data
// what a later holder needs to go on.
type Recovery[TTx any] struct {
	// Operations maps an operation, as idem.Scope's second argument (and
	// the transports: idemhttp's `POST "/orders/{id}/pay"`, idemgrpc's
	// `rpc:"/orders.v1.Orders/Pay"`, ...) names it, to the function that
	// resumes its work, for every principal. An operation Scope had to
	// hash in a long scope is found too.
	Operations map[string]LeaseFunc[TTx]
	// Scopes maps a whole scope to its function, for scopes not built with
	// idem.Scope. It is looked up before Operations.
	Scopes map[string]LeaseFunc[TTx]

	// Interval is the pause between the end of one round and the start
	// of the next, before jitter. Default: DefaultRecoveryInterval.
	Interval time.Duration
	// Jitter spreads the pauses as PurgeSchedule.Jitter does: each is
	// Interval times a random factor in [1-Jitter, 1+Jitter], and the
	// first round starts after a random share of Jitter*Interval. In
	// [0, 1); 0 means DefaultPurgeJitter, and a negative value means none.
	Jitter float64
	// Limit is the most leases one round tries to resume. Default:
	// DefaultRecoveryLimit.
	Limit int
	// Concurrency is how many resumed functions run at once. Default: 1.
	Concurrency int

	// Report, when set, gets every round when it ends, on RunRecovery's
	// goroutine (the next round waits for it).
	Report func(RecoveryRound)
	// Logger, when set, logs a round that failed (warn) and each round's
	// counts with the time of the next (debug). The store's own
	// Config.Logger logs each lease a round could not resume, and every
	// takeover.
	Logger *slog.Logger
}

// RecoveryOutcome says what RunRecovery did with one abandoned lease.
type RecoveryOutcome int

const (
	// RecoveryCompleted: the lease was taken over, its function resumed
	// the work and its response was stored.
	RecoveryCompleted RecoveryOutcome = iota + 1
	// RecoveryFailed: the lease could not be taken over (a database
	// error), or its function failed, panicked or answered with a status
	// the store does not store (Config.StoreStatus), or the response could
	// not be stored. The record stays pending with its last recovery
	// point; a lease the runner took over is left to lapse (see
	// RunRecovery).
	RecoveryFailed
	// RecoveryTaken: someone else got there first: another runner, or a
	// retry of the request, took the lease over (InFlight), completed the
	// work (Replay) or the record is gone. Nothing was done; this is the
	// normal outcome of runners racing on every instance.
	RecoveryTaken
	// RecoveryUnknownScope: no function is registered for the record's
	// scope. The runner never guesses: the lease is not touched, and a
	// retry of the request (or another runner that knows the operation)
	// resumes it.
	RecoveryUnknownScope
)

// String names the outcome ("completed", "failed", "taken",
// "unknown-scope").
func (o RecoveryOutcome) String() string {
	switch o {
	case RecoveryCompleted:
		return "completed"
	case RecoveryFailed:
		return "failed"
	case RecoveryTaken:
		return "taken"
	case RecoveryUnknownScope:
		return "unknown-scope"
	}
	return "RecoveryOutcome(?)"
}

// RecoveryRound is one round RunRecovery ran.
type RecoveryRound struct {
	// Started is when the round began; Took how long it ran.
	Started time.Time
	Took    time.Duration
	// Listed is how many abandoned leases the round looked at; the others
	// count each outcome.
	Listed                            int
	Completed, Failed, Taken, Unknown int
	// Err is why the round stopped early (a listing that failed, ctx
	// ended), if it did. The schedule goes on.
	Err error
}

// count adds one lease's outcome.
func (r *RecoveryRound) count(o RecoveryOutcome) {
	switch o {
	case RecoveryCompleted:
		r.Completed++
	case RecoveryFailed:
		r.Failed++
	case RecoveryTaken:
		r.Taken++
	case RecoveryUnknownScope:
		r.Unknown++
	}
}

// RunRecovery resumes work whose lease holder is gone (it crashed, hung or
// released the lease, and no retry of the request came), now (after a
// jittered start) and then again after every interval, until ctx ends;
// then it returns ctx's error, with no goroutine of its own left.
//
// Each round lists abandoned leases, oldest first (Store.ExpiredLeases),
// and resumes up to r.Limit of them, r.Concurrency at a time: Store.Resume
// takes the lease over with a new fencing token, and the function
// registered for the record's scope runs as DoLease runs its function
// (a heartbeat extends the lease; its context ends with ctx or when the
// lease is lost), then its response is stored with Lease.Complete. A
// record of a scope no function is registered for is left alone and
// reported (RecoveryUnknownScope); the round lists further, up to 16 times
// r.Limit records, past those it cannot resume, so they do not starve the
// rest.
//
// When the function fails (an error, a panic, a status the store does not
// store, a response it cannot store), the lease is not released: it is
// left to lapse, within Config.Lease, and the record comes back in a later
// round behind older abandoned work. A record that fails every time thus
// costs one attempt per lease, per runner, never a busy loop, until its
// retention passes; a retry of the request meanwhile gets InFlight, then
// takes the work over itself. When the function fails because ctx ended
// (the runner stops), the lease is released instead, so another instance
// takes the work over at once. Completing or releasing after the function
// returned runs within Config.CommitTimeout even when ctx has ended.
//
// It is safe to run on every instance at once: a lease is taken over by
// exactly one of them, the others get RecoveryTaken; a live lease is never
// taken; and a holder whose lease was taken over can write nothing more
// (ErrLeaseLost). Every outcome is reported to Config.Observer
// (EventRecovery, and EventRecoveryRound for each round).
//
// It refuses, with ErrInvalidConfig, a nil store, no function at all, a
// nil function, an operation that begins with "sha256:", a negative
// interval, limit or concurrency, or a jitter of 1 or more; on a dialect
// without lease mode it fails as Store.Lease does.
func RunRecovery[TTx any](ctx context.Context, s *Store[TTx], r Recovery[TTx]) error {
	rc, err := newRecoverer(s, r)
	if err != nil {
		return err
	}
	pause := time.Duration(rand.Float64() * rc.cfg.Jitter * float64(rc.cfg.Interval))
	for {
		if err := backoff.Sleep(ctx, pause); err != nil {
			return err
		}
		round := rc.round(ctx)
		pause = time.Duration(float64(rc.cfg.Interval) * (1 + rc.cfg.Jitter*(2*rand.Float64()-1)))
		rc.log(ctx, round, pause)
		if rc.cfg.Report != nil {
			rc.cfg.Report(round)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// recoverer is a checked Recovery and its store.
type recoverer[TTx any] struct {
	s   *Store[TTx]
	cfg Recovery[TTx]
	// ops holds Operations, and each under its hashed form.
	ops map[string]LeaseFunc[TTx]
}

func newRecoverer[TTx any](s *Store[TTx], r Recovery[TTx]) (*recoverer[TTx], error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("%w: recovery on a nil Store", ErrInvalidConfig)
	case len(r.Operations)+len(r.Scopes) == 0:
		return nil, fmt.Errorf("%w: recovery with no function: set Recovery.Operations or Recovery.Scopes", ErrInvalidConfig)
	case r.Interval < 0:
		return nil, fmt.Errorf("%w: recovery interval %v is negative", ErrInvalidConfig, r.Interval)
	case r.Jitter >= 1:
		return nil, fmt.Errorf("%w: recovery jitter %v is not below 1", ErrInvalidConfig, r.Jitter)
	case r.Limit < 0:
		return nil, fmt.Errorf("%w: recovery limit %d is negative", ErrInvalidConfig, r.Limit)
	case r.Concurrency < 0:
		return nil, fmt.Errorf("%w: recovery concurrency %d is negative", ErrInvalidConfig, r.Concurrency)
	}
	if _, err := s.leaser(); err != nil {
		return nil, err
	}
	ops := make(map[string]LeaseFunc[TTx], 2*len(r.Operations))
	for op, fn := range r.Operations {
		if fn == nil {
			return nil, fmt.Errorf("%w: nil recovery function for operation %q", ErrInvalidConfig, op)
		}
		if op == "" || strings.HasPrefix(op, "sha256:") {
			return nil, fmt.Errorf("%w: recovery operation %q is empty or begins with \"sha256\"", ErrInvalidConfig, op)
		}
		ops[op] = fn
		ops[hashedOperation(op)] = fn
	}
	for scope, fn := range r.Scopes {
		if fn == nil {
			return nil, fmt.Errorf("%w: nil recovery function for scope %q", ErrInvalidConfig, scope)
		}
	}
	if r.Interval == 0 {
		r.Interval = DefaultRecoveryInterval
	}
	switch {
	case r.Jitter == 0:
		r.Jitter = DefaultPurgeJitter
	case r.Jitter < 0:
		r.Jitter = 0
	}
	if r.Limit == 0 {
		r.Limit = DefaultRecoveryLimit
	}
	if r.Concurrency == 0 {
		r.Concurrency = 1
	}
	return &recoverer[TTx]{s: s, cfg: r, ops: ops}, nil
}

// funcFor is the function registered for scope, or nil.
func (rc *recoverer[TTx]) funcFor(scope string) LeaseFunc[TTx] {
	if fn, ok := rc.cfg.Scopes[scope]; ok {
		return fn
	}
	if op, ok := scopeOperation(scope); ok {
		return rc.ops[op]
	}
	return nil
}

// recordID names a record within a round.
type recordID struct{ scope, key string }

// round lists abandoned leases and resumes up to Limit of them. Where the
// oldest ones cannot be resumed, it lists again, twice as many, skipping
// those it has seen, up to recoveryWidening times Limit.
func (rc *recoverer[TTx]) round(ctx context.Context) (round RecoveryRound) {
	round.Started = time.Now()
	defer func() {
		round.Took = time.Since(round.Started)
		if rc.s.observing() {
			rc.s.emit(ctx, Event{Kind: EventRecoveryRound, Rows: int64(round.Listed), Duration: round.Took, Err: round.Err})
		}
	}()
	seen := map[recordID]bool{}
	tried := 0 // leases whose takeover was tried
	for want := rc.cfg.Limit; ; want = min(2*want, recoveryWidening*rc.cfg.Limit) {
		if err := ctx.Err(); err != nil {
			round.Err = err
			return round
		}
		recs, err := rc.s.ExpiredLeases(ctx, want)
		if err != nil {
			round.Err = err
			return round
		}
		var todo []Record
		for _, rec := range recs {
			id := recordID{rec.Scope, rec.Key}
			if seen[id] {
				continue
			}
			seen[id] = true
			round.Listed++
			if rc.funcFor(rec.Scope) == nil {
				rc.report(ctx, rec, recoveryReport{outcome: RecoveryUnknownScope})
				round.Unknown++
				continue
			}
			if tried+len(todo) < rc.cfg.Limit {
				todo = append(todo, rec)
			}
		}
		tried += len(todo)
		for _, o := range rc.resumeAll(ctx, todo) {
			round.count(o)
		}
		if len(recs) < want || tried >= rc.cfg.Limit || want >= recoveryWidening*rc.cfg.Limit {
			round.Err = ctx.Err()
			return round
		}
	}
}

// resumeAll resumes recs, Concurrency at a time, and returns their
// outcomes once every one has ended. Once ctx ends it starts no more.
func (rc *recoverer[TTx]) resumeAll(ctx context.Context, recs []Record) []RecoveryOutcome {
	outcomes := make([]RecoveryOutcome, len(recs))
	slots := make(chan struct{}, rc.cfg.Concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i, rec := range recs {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return outcomes[:i]
		}
		wg.Go(func() {
			defer func() { <-slots }()
			outcomes[i] = rc.resume(ctx, rec)
		})
	}
	wg.Wait()
	return outcomes
}

// recoveryReport is what became of one lease, for EventRecovery.
type recoveryReport struct {
	outcome RecoveryOutcome
	token   int64
	step    string
	took    time.Duration
	status  int
	err     error
}

func (rc *recoverer[TTx]) report(ctx context.Context, rec Record, r recoveryReport) {
	if rc.s.observing() {
		rc.s.emit(ctx, Event{Kind: EventRecovery, Scope: rec.Scope, Key: rec.Key, Recovery: r.outcome,
			Token: r.token, Step: r.step, Duration: r.took, Status: r.status, Err: r.err, Lease: true})
	}
}

// resume takes rec's lease over and runs its function on it, within a
// RecoveryObserver's start and done.
func (rc *recoverer[TTx]) resume(ctx context.Context, rec Record) RecoveryOutcome {
	if o, ok := rc.s.cfg.Observer.(RecoveryObserver); ok {
		var done func(RecoveryOutcome, error)
		ctx, done = o.StartRecovery(ctx, rec)
		r := rc.takeOver(ctx, rec)
		done(r.outcome, r.err)
		return r.outcome
	}
	return rc.takeOver(ctx, rec).outcome
}

// takeOver takes rec's lease over, runs its function on it and reports
// what became of it.
func (rc *recoverer[TTx]) takeOver(ctx context.Context, rec Record) (r recoveryReport) {
	defer func() { rc.report(ctx, rec, r) }()
	fn := rc.funcFor(rec.Scope)
	l, err := rc.s.Resume(ctx, rec.Scope, rec.Key)
	switch {
	case errors.Is(err, ErrNotFound):
		return recoveryReport{outcome: RecoveryTaken}
	case err != nil:
		return recoveryReport{outcome: RecoveryFailed, err: err}
	case l.Outcome != Won:
		// Another runner or a retry took it over (InFlight), or the work
		// was completed (Replay): the race's normal losing side.
		return recoveryReport{outcome: RecoveryTaken}
	}
	step, _ := l.Step()
	r = recoveryReport{token: l.Token(), step: step}
	started := time.Now()
	r.status, r.err = rc.run(ctx, l, fn)
	r.took = time.Since(started)
	r.outcome = RecoveryCompleted
	if r.err != nil {
		r.outcome = RecoveryFailed
	}
	return r
}

// run is DoLease's run of fn on a lease already held, but a failure leaves
// the lease to lapse rather than releasing it, unless ctx ended. It returns
// the stored status.
func (rc *recoverer[TTx]) run(ctx context.Context, l *Lease[TTx], fn LeaseFunc[TTx]) (int, error) {
	s := l.store
	finishCtx := func() (context.Context, context.CancelFunc) {
		return context.WithTimeoutCause(context.WithoutCancel(ctx), s.cfg.CommitTimeout, ErrCommitTimeout)
	}
	hb := l.startHeartbeat(ctx)
	defer hb.stop()
	resp, err := callRecovery(s.markRun(hb.work), l, fn)
	if err == nil && !s.cfg.StoreStatus(resp.Status) {
		err = fmt.Errorf("idem: recovery of key %q in scope %q answered status %d, which is not stored: the work is not done", l.req.Key, l.req.Scope, resp.Status)
	}
	if err != nil {
		if cause := context.Cause(hb.work); errors.Is(cause, ErrLeaseLost) && !errors.Is(err, ErrLeaseLost) {
			err = errors.Join(err, cause)
		}
		if ctx.Err() != nil && !errors.Is(err, ErrLeaseLost) {
			// The runner stops: hand the work on at once.
			fctx, cancel := finishCtx()
			defer cancel()
			if rerr := l.Release(fctx); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				err = errors.Join(err, rerr)
			}
		}
		return 0, err
	}
	fctx, cancel := finishCtx()
	defer cancel()
	if _, err := l.Complete(fctx, resp, nil); err != nil {
		return 0, err
	}
	return resp.Status, nil
}

// callRecovery calls fn, turning a panic into an error: a runner on every
// instance must not bring them all down, round after round, over one
// record.
func callRecovery[TTx any](ctx context.Context, l *Lease[TTx], fn LeaseFunc[TTx]) (resp Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("idem: recovery function of key %q in scope %q panicked: %v", l.req.Key, l.req.Scope, p)
		}
	}()
	return fn(ctx, l)
}

func (rc *recoverer[TTx]) log(ctx context.Context, round RecoveryRound, next time.Duration) {
	l := rc.cfg.Logger
	if l == nil {
		return
	}
	level := slog.LevelDebug
	if round.Err != nil && ctx.Err() == nil {
		level = slog.LevelWarn
	}
	l.LogAttrs(ctx, level, "idem: recovery round",
		slog.Int("listed", round.Listed), slog.Int("completed", round.Completed), slog.Int("failed", round.Failed),
		slog.Int("taken", round.Taken), slog.Int("unknown_scope", round.Unknown),
		slog.Duration("took", round.Took), slog.Duration("next_in", next), slog.Any("error", round.Err))
}
