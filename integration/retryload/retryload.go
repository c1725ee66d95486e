// Package retryload drives a bounded load through an idem store the way
// clients that retry use it, while a fault strikes the topology under it
// (a pooler dropping connections, a failover, a killed primary), and checks
// what every topology suite promises:
//
//   - every intention has exactly one effect, and its record, completed,
//     beside it (the record's body names the one execution that committed);
//   - every call that ended in ErrCommitUnknown is resolved by a later call
//     of the same intention (a replay, or the work done once);
//   - no key is left pending;
//   - every answer a client got, first or replayed, is byte for byte the
//     stored one.
//
// The load is bounded in intentions, calls per intention, time per call and
// time in all; nothing waits longer.
package retryload

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Defaults of [Load]'s bounds.
const (
	DefaultWorkers     = 16
	DefaultIntentions  = 300
	DefaultTimeout     = 3 * time.Minute
	DefaultCallTimeout = 10 * time.Second
	DefaultMaxCalls    = 200
)

// Load is one run: a store, how an execution writes its effect, how the
// effects are read back, and the fault.
type Load[TTx any] struct {
	// Store is the store under test; its table exists.
	Store *idem.Store[TTx]
	// Insert writes the effect of one execution of key in tx: one row
	// holding key and nonce (unique per execution).
	Insert func(ctx context.Context, tx TTx, key, nonce string) error
	// Effects reads every effect row back: the nonces of each key.
	Effects func(ctx context.Context) (map[string][]string, error)
	// Fault runs once FaultAfter intentions are done, while the others
	// go on; keys past FaultAfter + 4×Workers wait until it returns, so
	// that the load cannot end before the fault struck. Nil: no fault.
	Fault func(ctx context.Context) error
	// FaultAfter is how many intentions are done before Fault runs; a
	// third of Intentions when zero.
	FaultAfter int
	// Bounds; the package's defaults when zero.
	Workers, Intentions, MaxCalls int
	Timeout, CallTimeout          time.Duration
	// Scope of the requests; "retryload POST /orders" when empty.
	Scope string
	// Pause after a retryable error, doubled after each further one of the
	// same intention, up to MaxPause; 50 ms and 1 s when zero.
	Pause, MaxPause time.Duration
	// Marks names errors of the backend to count apart in Report.Errors
	// and Report.Retries (postgres.ErrStandby as "standby", say); a
	// retryable error that matches one counts under its name instead of
	// its Meaning or its retry's cause.
	Marks map[string]error

	obs *retries
}

// Observer is an idem.Observer to give the store's Config.Observer: it
// counts the retries Do makes on its own for the load's calls (of its
// Scope) into the Report.
func (l *Load[TTx]) Observer() idem.Observer {
	if l.obs == nil {
		l.obs = &retries{byCause: map[string]int{}, mark: l.mark, scope: func() string { return l.Scope }}
	}
	return l.obs
}

// retries counts the load's EventRetry by cause, or by the name of the
// Mark its error matches. Retries of other scopes (FirstCommit's probe)
// are not the load's.
type retries struct {
	mu      sync.Mutex
	byCause map[string]int
	mark    func(error) string
	scope   func() string
}

func (r *retries) Observe(_ context.Context, e idem.Event) {
	if e.Kind != idem.EventRetry || e.Scope != r.scope() {
		return
	}
	cause := e.Cause
	if name := r.mark(e.Err); name != "" {
		cause = name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byCause[cause]++
}

// Report is what a run saw.
type Report struct {
	// Took is the time from the first call to the last answer.
	Took time.Duration
	// Calls is the number of Do calls in all.
	Calls int
	// CommitUnknown counts calls that returned ErrCommitUnknown; Resolved
	// counts how the intentions that met an unknown outcome (such a call,
	// or a call whose own deadline passed) ended ("won" or "replay").
	CommitUnknown int
	Resolved      map[string]int
	// Errors counts the retryable errors calls returned, by meaning
	// ("unavailable", "commit-unknown", ...).
	Errors map[string]int
	// Retries counts the transactions Do ran again on its own, by cause
	// ("unavailable", "serialization", ...) or Mark, when the store's
	// Config.Observer is the Load's Observer.
	Retries map[string]int
}

// Struck reports whether the fault left a mark: a call failed or ended
// unknown, or Do retried on its own.
func (r Report) Struck() bool {
	return r.CommitUnknown > 0 || len(r.Errors) > 0 || len(r.Retries) > 0
}

func (r Report) String() string {
	return fmt.Sprintf("%d calls in %v; %d commits with an unknown outcome, resolved as %v; retryable errors %v; Do's own retries %v",
		r.Calls, r.Took.Round(time.Millisecond), r.CommitUnknown, r.Resolved, r.Errors, r.Retries)
}

// answer is what a client got for one successful call.
type answer struct {
	outcome idem.Outcome
	resp    idem.Response
}

// run is the state of one Run.
type run[TTx any] struct {
	l    *Load[TTx]
	t    testing.TB
	ctx  context.Context
	keys []string
	// finished counts the intentions that ended, done or given up.
	finished atomic.Int64
	held     chan struct{}

	mu      sync.Mutex
	report  Report
	answers map[string][]answer
}

// Run drives every intention until it is done (a committed win or a
// replay), runs the fault meanwhile, then checks the invariants, reporting
// each violation on t. It returns what it saw.
func (l *Load[TTx]) Run(t testing.TB) Report {
	t.Helper()
	l.defaults()
	ctx, cancel := context.WithTimeout(context.Background(), l.Timeout)
	defer cancel()
	r := &run[TTx]{l: l, t: t, ctx: ctx, held: make(chan struct{}), answers: map[string][]answer{},
		report: Report{Resolved: map[string]int{}, Errors: map[string]int{}}}
	prefix := make([]byte, 4)
	_, _ = rand.Read(prefix)
	for i := range l.Intentions {
		r.keys = append(r.keys, fmt.Sprintf("%s-%04d", hex.EncodeToString(prefix), i))
	}
	begin := time.Now()
	r.drive()
	r.report.Took = time.Since(begin)
	if l.obs != nil {
		l.obs.mu.Lock()
		r.report.Retries = maps.Clone(l.obs.byCause)
		clear(l.obs.byCause)
		l.obs.mu.Unlock()
	}
	t.Logf("retryload: %d intentions, %d workers: %v", l.Intentions, l.Workers, r.report)
	r.check()
	return r.report
}

func (l *Load[TTx]) defaults() {
	if l.Workers <= 0 {
		l.Workers = DefaultWorkers
	}
	if l.Intentions <= 0 {
		l.Intentions = DefaultIntentions
	}
	if l.MaxCalls <= 0 {
		l.MaxCalls = DefaultMaxCalls
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.CallTimeout <= 0 {
		l.CallTimeout = DefaultCallTimeout
	}
	// The fault runs once FaultAfter intentions ended and keys past
	// FaultAfter + 4×Workers wait for it: both must be within the load.
	if l.FaultAfter <= 0 || l.FaultAfter+4*l.Workers >= l.Intentions {
		l.FaultAfter = max(0, min(l.Intentions/3, l.Intentions-4*l.Workers-1))
	}
	if l.Scope == "" {
		l.Scope = "retryload POST /orders"
	}
	if l.Pause <= 0 {
		l.Pause = 50 * time.Millisecond
	}
	if l.MaxPause <= 0 {
		l.MaxPause = time.Second
	}
}

func (r *run[TTx]) request(key string) idem.Request {
	return idem.Request{Scope: r.l.Scope, Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
}

// work is one execution of key: its effect, and an answer that names it.
func (r *run[TTx]) work(key string) idem.Func[TTx] {
	return func(ctx context.Context, tx TTx) (idem.Response, error) {
		b := make([]byte, 8)
		_, _ = rand.Read(b)
		nonce := hex.EncodeToString(b)
		if err := r.l.Insert(ctx, tx, key, nonce); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: 201, Header: map[string][]string{"Content-Type": {"text/plain"}}, Body: []byte(key + "/" + nonce)}, nil
	}
}

// drive runs the workers and the fault.
func (r *run[TTx]) drive() {
	queue := make(chan string)
	var wg sync.WaitGroup
	for range r.l.Workers {
		wg.Go(func() {
			for key := range queue {
				r.intention(key)
				r.finished.Add(1)
			}
		})
	}
	var ferr error
	var fwg sync.WaitGroup
	fwg.Go(func() {
		defer close(r.held)
		if r.l.Fault == nil {
			return
		}
		for r.finished.Load() < int64(r.l.FaultAfter) {
			select {
			case <-r.ctx.Done():
				ferr = r.ctx.Err()
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		ferr = r.l.Fault(r.ctx)
	})
	for i, key := range r.keys {
		if i == r.l.FaultAfter+4*r.l.Workers {
			<-r.held
		}
		queue <- key
	}
	close(queue)
	wg.Wait()
	fwg.Wait()
	if ferr != nil {
		r.t.Errorf("retryload: fault: %v", ferr)
	}
}

// intention calls Do for key until it is done, within MaxCalls calls and
// the run's time.
func (r *run[TTx]) intention(key string) {
	unknown := false
	pause := r.l.Pause
	for call := 1; call <= r.l.MaxCalls; call++ {
		ctx, cancel := context.WithTimeout(r.ctx, r.l.CallTimeout)
		res, err := r.l.Store.Do(ctx, r.request(key), r.work(key))
		cancel()
		r.mu.Lock()
		r.report.Calls++
		r.mu.Unlock()
		if err == nil && (res.Committed || res.Outcome == idem.Replay) {
			r.mu.Lock()
			r.answers[key] = append(r.answers[key], answer{res.Outcome, res.Response})
			if unknown {
				r.report.Resolved[res.Outcome.String()]++
			}
			r.mu.Unlock()
			return
		}
		switch {
		case err == nil && res.Outcome == idem.InFlight:
			// Another call of this key holds it (a retry racing the
			// call whose connection broke): come back later.
		case err == nil:
			r.t.Errorf("retryload: key %s: Do returned %v without committing", key, res.Outcome)
			return
		case errors.Is(err, idem.ErrCommitUnknown):
			unknown = true
			r.mu.Lock()
			r.report.CommitUnknown++
			r.mu.Unlock()
		case errors.Is(err, context.DeadlineExceeded) && r.ctx.Err() == nil:
			// The call's own time ran out: a client gives up on the
			// answer and tries again, not knowing what happened.
			unknown = true
		case !idem.Retryable(err) || r.ctx.Err() != nil:
			r.t.Errorf("retryload: key %s: call %d: %v", key, call, err)
			return
		}
		if err != nil {
			r.mu.Lock()
			r.report.Errors[r.l.meaning(err)]++
			r.mu.Unlock()
		}
		select {
		case <-r.ctx.Done():
		case <-time.After(pause):
		}
		pause = min(2*pause, r.l.MaxPause)
	}
	r.t.Errorf("retryload: key %s: not done after %d calls", key, r.l.MaxCalls)
}

// check reads the effects and the records back and reports every
// intention that broke a promise.
func (r *run[TTx]) check() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	effects, err := r.l.Effects(ctx)
	if err != nil {
		r.t.Errorf("retryload: read the effects: %v", err)
		return
	}
	bad := 0
	for _, key := range r.keys {
		if msg := r.checkKey(ctx, key, effects[key]); msg != "" {
			bad++
			if bad <= 20 {
				r.t.Errorf("retryload: key %s: %s", key, msg)
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(effects)) {
		if !slices.Contains(r.keys, key) {
			r.t.Errorf("retryload: an effect for key %s, which no intention has", key)
		}
	}
	if bad > 20 {
		r.t.Errorf("retryload: %d keys broke a promise in all", bad)
	}
}

// checkKey says what is wrong with key, or "".
func (r *run[TTx]) checkKey(ctx context.Context, key string, nonces []string) string {
	if len(nonces) != 1 {
		return fmt.Sprintf("%d effects, want exactly one", len(nonces))
	}
	rec, err := r.l.Store.Lookup(ctx, r.l.Scope, key)
	if err != nil {
		return fmt.Sprintf("no record beside its effect: %v", err)
	}
	if !rec.Completed {
		return "its record is pending"
	}
	want := []byte(key + "/" + nonces[0])
	if !bytes.Equal(rec.Response.Body, want) {
		return fmt.Sprintf("the record answers %q, but the execution that committed is %q", rec.Response.Body, want)
	}
	answers := r.answers[key]
	if len(answers) == 0 {
		return "no call was answered"
	}
	for _, a := range answers {
		if a.resp.Status != rec.Response.Status || !bytes.Equal(a.resp.Body, rec.Response.Body) ||
			fmt.Sprint(a.resp.Header) != fmt.Sprint(rec.Response.Header) {
			return fmt.Sprintf("a client got %v %d %v %q, the stored answer is %d %v %q",
				a.outcome, a.resp.Status, a.resp.Header, a.resp.Body, rec.Response.Status, rec.Response.Header, rec.Response.Body)
		}
	}
	return ""
}

// meaning is the name of the first of Marks (by name) err matches, else
// Meaning(err).
func (l *Load[TTx]) meaning(err error) string {
	if name := l.mark(err); name != "" {
		return name
	}
	return Meaning(err)
}

// mark is the name of the first of Marks (by name) err matches, or "".
func (l *Load[TTx]) mark(err error) string {
	for _, name := range slices.Sorted(maps.Keys(l.Marks)) {
		if errors.Is(err, l.Marks[name]) {
			return name
		}
	}
	return ""
}

// Meaning names the meaning a retryable error carries: "commit-unknown",
// "unavailable", "serialization", "deadlock", "lock-timeout",
// "retries-exhausted", "call-timeout" (the call's own deadline) or "other".
func Meaning(err error) string {
	for _, m := range []struct {
		name string
		err  error
	}{
		{"commit-unknown", idem.ErrCommitUnknown}, {"unavailable", idem.ErrUnavailable}, {"serialization", idem.ErrSerialization},
		{"deadlock", idem.ErrDeadlock}, {"lock-timeout", idem.ErrLockTimeout}, {"retries-exhausted", idem.ErrRetriesExhausted},
		{"call-timeout", context.DeadlineExceeded},
	} {
		if errors.Is(err, m.err) {
			return m.name
		}
	}
	return "other"
}
