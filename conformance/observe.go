package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// Observer sees, from outside the dialect, what racing clients do in their
// transactions: when each Begin and each statement the dialect sends starts
// and returns, and how it ended. A case uses it to prove contention instead
// of hoping for it: the winner holds the key until k losers are waiting
// inside their claims, and afterwards the case checks that those waits
// lasted through the winner's hold, and that every retry had a cause.
//
// A client is a goroutine whose context was tagged with AsClient. Work
// without a tag (a holder's transaction, a fixture's statements) is recorded
// as client -1 and never counted as a waiting loser.
//
// Where writers wait for each other on the whole database
// (Capabilities.DatabaseWriteLock) a loser waits in Begin, before its claim
// runs; elsewhere it waits in the claim's statements.
type Observer struct {
	writeLock bool
	classify  func(error) error

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every change
	ops     []*op
	begins  map[int]int // client -> transactions begun
	// step, when set, makes racing clients send their statements in
	// lockstep (see lockstep).
	step *lockstep
}

// lockstep holds each racing client's j-th statement of a transaction
// until k clients have come to their j-th statement, or wait has passed:
// the clients read before any of them writes, the interleaving a guard
// that reads and then writes must survive.
type lockstep struct {
	k       int
	wait    time.Duration
	arrived map[int]int           // statement index -> clients there
	open    map[int]chan struct{} // closed when k arrived
}

// inLockstep makes the clients' statements go in lockstep from now on:
// the j-th statement of each transaction waits until k clients reached
// theirs, or at most wait.
func (o *Observer) inLockstep(k int, wait time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.step = &lockstep{k: k, wait: wait, arrived: map[int]int{}, open: map[int]chan struct{}{}}
}

// barrier waits for the other clients at statement j, when in lockstep.
func (o *Observer) barrier(client, j int) {
	o.mu.Lock()
	s := o.step
	if s == nil || client < 0 {
		o.mu.Unlock()
		return
	}
	ch, ok := s.open[j]
	if !ok {
		ch = make(chan struct{})
		s.open[j] = ch
	}
	s.arrived[j]++
	if s.arrived[j] == s.k {
		close(ch)
	}
	o.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(s.wait):
	}
}

type opKind int

const (
	opBegin opKind = iota + 1
	opStatement
	opCommit
)

func (k opKind) String() string {
	switch k {
	case opBegin:
		return "Begin"
	case opStatement:
		return "statement"
	case opCommit:
		return "Commit"
	}
	return "op"
}

// op is one Begin, statement or Commit of a client's attempt.
type op struct {
	client, attempt int
	kind            opKind
	start, end      time.Time
	done            bool
	err             error
}

// Wait is a client found waiting: the Begin or statement it was inside
// when AwaitWaiting returned.
type Wait struct {
	// Client is the client's AsClient number.
	Client int
	// Since is when the Begin or statement started.
	Since time.Time
	op    *op
}

type clientKey struct{}

// AsClient tags ctx with a client number, so an Observer can tell racing
// clients apart (numbers from 0; the store's Do passes the values of its
// context on to Begin and to every statement).
func AsClient(ctx context.Context, client int) context.Context {
	return context.WithValue(ctx, clientKey{}, client)
}

func clientOf(ctx context.Context) int {
	if c, ok := ctx.Value(clientKey{}).(int); ok {
		return c
	}
	return -1
}

// Observe returns d wrapped so that o records its transactions. The
// transactions it begins keep every optional ability of d's (like
// WrappedTx), so the backend's production path runs. Pass it as
// FixtureOptions.Wrap.
func Observe[TTx any](d dialect.Driver[TTx], o *Observer) dialect.Driver[TTx] {
	o.mu.Lock()
	o.writeLock = d.Dialect().Capabilities().DatabaseWriteLock
	o.classify = d.Dialect().Classify
	o.mu.Unlock()
	return observedDriver[TTx]{Driver: d, o: o}
}

// NewObserver returns an Observer that has seen nothing yet.
func NewObserver() *Observer {
	return &Observer{changed: make(chan struct{}), begins: map[int]int{}}
}

// reset forgets what o saw, for the next race of a case.
func (o *Observer) reset() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops, o.begins, o.step = nil, map[int]int{}, nil
	o.notify()
}

func (o *Observer) start(client, attempt int, kind opKind) *op {
	o.mu.Lock()
	defer o.mu.Unlock()
	p := &op{client: client, attempt: attempt, kind: kind, start: time.Now()}
	o.ops = append(o.ops, p)
	o.notify()
	return p
}

// finish ends p; a later error (from Rows.Close, say) is added to it.
func (o *Observer) finish(p *op, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !p.done {
		p.done, p.end = true, time.Now()
	}
	if p.err == nil {
		p.err = err
	}
	o.notify()
}

func (o *Observer) notify() {
	close(o.changed)
	o.changed = make(chan struct{})
}

// waitsLocked returns the clients now inside a Begin (on a database write
// lock) or a statement (elsewhere), one Wait each, in client order.
func (o *Observer) waitsLocked() []Wait {
	kind := opStatement
	if o.writeLock {
		kind = opBegin
	}
	byClient := map[int]Wait{}
	for _, p := range o.ops {
		if p.client >= 0 && p.kind == kind && !p.done {
			byClient[p.client] = Wait{Client: p.client, Since: p.start, op: p}
		}
	}
	waits := make([]Wait, 0, len(byClient))
	for _, w := range byClient {
		waits = append(waits, w)
	}
	slices.SortFunc(waits, func(a, b Wait) int { return a.Client - b.Client })
	return waits
}

// AwaitWaiting waits until at least k clients are waiting inside their
// claims (inside Begin on a database write lock) and returns them. After
// timeout it returns the ones it saw and an error that says the race did
// not happen.
func (o *Observer) AwaitWaiting(k int, timeout time.Duration) ([]Wait, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		waits, changed, where := o.waitsLocked(), o.changed, o.where()
		o.mu.Unlock()
		if len(waits) >= k {
			return waits, nil
		}
		select {
		case <-changed:
		case <-deadline.C:
			return waits, fmt.Errorf("after %v only %d of %d losers were waiting inside %s while the winner held the key: "+
				"the race ran (almost) sequentially and proves nothing, or the claim does not wait for the key's holder", timeout, len(waits), k, where)
		}
	}
}

func (o *Observer) where() string {
	if o.writeLock {
		return "Begin (writers wait on the whole database)"
	}
	return "their claims"
}

// StillWaiting reports an error unless every client in waits is still
// waiting inside its claim (inside Begin on a database write lock). Called
// after the winner held the key for a while, it shows that the losers were
// blocked by the winner, not merely slow: a claim that does not wait
// returns within milliseconds.
func (o *Observer) StillWaiting(waits []Wait) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	now := map[int]bool{}
	for _, w := range o.waitsLocked() {
		now[w.Client] = true
	}
	var errs []error
	for _, w := range waits {
		if !now[w.Client] {
			errs = append(errs, fmt.Errorf("client %d was waiting inside %s, and no longer is although the winner still holds the key: its claim did not wait for the winner", w.Client, o.where()))
		}
	}
	return errors.Join(errs...)
}

// Begins returns how many transactions client began.
func (o *Observer) Begins(client int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.begins[client]
}

// CheckRetries reports an error unless each client's transactions follow
// the rules of retrying: Do began another one only after an attempt met an
// error the dialect classifies as retryable; on a database write lock no
// client began more than one (a loser's claim runs after the winner
// committed and replays); and no client in waited began more than two (a
// loser that waited for the winner replays at once, or after one retry
// when the database makes it start over on a fresh snapshot).
func (o *Observer) CheckRetries(waited []Wait) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	classify := o.classify
	if classify == nil {
		classify = func(err error) error { return err }
	}
	failed := map[[2]int]error{} // client, attempt -> a retryable error it met
	for _, p := range o.ops {
		if p.client >= 0 && p.err != nil && retryable(classify(p.err)) {
			failed[[2]int{p.client, p.attempt}] = p.err
		}
	}
	var errs []error
	for client, n := range o.begins {
		if client < 0 {
			continue
		}
		for a := 1; a < n; a++ {
			if failed[[2]int{client, a}] == nil {
				errs = append(errs, fmt.Errorf("client %d began %d transactions, but its attempt %d met no error the dialect classifies as retryable", client, n, a))
			}
		}
		if o.writeLock && n > 1 {
			errs = append(errs, fmt.Errorf("client %d began %d transactions on a database whose writers serialise at BEGIN, want 1 (last retryable error: %v)", client, n, failed[[2]int{client, n - 1}]))
		}
	}
	for _, w := range waited {
		if n := o.begins[w.Client]; n > 2 {
			errs = append(errs, fmt.Errorf("client %d waited for the winner, then began %d transactions, want at most 2: once the winner committed, its next attempt must find the record", w.Client, n))
		}
	}
	return errors.Join(errs...)
}

func retryable(err error) bool {
	return errors.Is(err, idem.ErrSerialization) || errors.Is(err, idem.ErrDeadlock) || errors.Is(err, idem.ErrUnavailable)
}

// observedDriver records the transactions it begins.
type observedDriver[TTx any] struct {
	dialect.Driver[TTx]
	o *Observer
}

func (d observedDriver[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	client := clientOf(ctx)
	d.o.mu.Lock()
	d.o.begins[client]++
	attempt := d.o.begins[client]
	d.o.mu.Unlock()
	p := d.o.start(client, attempt, opBegin)
	tx, err := d.Driver.Begin(ctx, opts)
	d.o.finish(p, err)
	if err != nil {
		return nil, err
	}
	return &observedTx[TTx]{Tx: tx, o: d.o, client: client, attempt: attempt}, nil
}

// observedTx records the statements a dialect sends in a transaction. Like
// WrappedTx, it keeps the optional abilities of the transaction it wraps.
type observedTx[TTx any] struct {
	dialect.Tx[TTx]
	o               *Observer
	client, attempt int
	statements      int // sent so far
}

var (
	_ dialect.Pipeliner      = (*observedTx[any])(nil)
	_ dialect.Preparer       = (*observedTx[any])(nil)
	_ dialect.CommitDeferrer = (*observedTx[any])(nil)
)

func (t *observedTx[TTx]) begin(kind opKind) *op {
	if kind == opStatement {
		t.o.barrier(t.client, t.statements)
		t.statements++
	}
	return t.o.start(t.client, t.attempt, kind)
}

func (t *observedTx[TTx]) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	p := t.begin(opStatement)
	n, err := t.Tx.Exec(ctx, query, args...)
	t.o.finish(p, err)
	return n, err
}

func (t *observedTx[TTx]) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	p := t.begin(opStatement)
	rows, err := t.Tx.Query(ctx, query, args...)
	return t.rows(p, rows, err)
}

func (t *observedTx[TTx]) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	p := t.begin(opStatement)
	n, err := dialect.ExecPrepared(ctx, t.Tx, query, args...)
	t.o.finish(p, err)
	return n, err
}

func (t *observedTx[TTx]) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	p := t.begin(opStatement)
	rows, err := dialect.QueryPrepared(ctx, t.Tx, query, args...)
	return t.rows(p, rows, err)
}

func (t *observedTx[TTx]) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	p := t.begin(opStatement)
	err := dialect.Pipeline(ctx, t.Tx, stmts...)
	t.o.finish(p, err)
	return err
}

func (t *observedTx[TTx]) DeferToCommit(stmt dialect.Statement) bool {
	return dialect.DeferToCommit(t.Tx, stmt)
}

func (t *observedTx[TTx]) Commit(ctx context.Context) error {
	p := t.begin(opCommit)
	err := t.Tx.Commit(ctx)
	t.o.finish(p, err)
	return err
}

// rows ends the statement's op when its first row (or its end) arrives: a
// driver may return from Query before the statement stops waiting.
func (t *observedTx[TTx]) rows(p *op, rows dialect.Rows, err error) (dialect.Rows, error) {
	if err != nil {
		t.o.finish(p, err)
		return nil, err
	}
	return &observedRows{Rows: rows, o: t.o, p: p}, nil
}

type observedRows struct {
	dialect.Rows
	o *Observer
	p *op
}

func (r *observedRows) Next() bool {
	ok := r.Rows.Next()
	var err error
	if !ok {
		err = r.Rows.Err()
	}
	r.o.finish(r.p, err)
	return ok
}

func (r *observedRows) Err() error {
	err := r.Rows.Err()
	r.o.finish(r.p, err)
	return err
}

func (r *observedRows) Close() error {
	err := r.Rows.Close()
	r.o.finish(r.p, err)
	return err
}
