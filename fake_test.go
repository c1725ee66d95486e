package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// Raw errors the fake "database" raises; fakeDriver.Classify maps them the
// way a real dialect maps its typed driver errors.
var (
	errRawSerialization = errors.New("fake: could not serialize access")
	errRawDeadlock      = errors.New("fake: deadlock detected")
	errRawLockTimeout   = errors.New("fake: lock not available")
	errRawCommitLost    = errors.New("fake: connection lost during COMMIT")
	errRawConnLost      = errors.New("fake: connection reset by peer")
)

var fakeClasses = []struct{ raw, meaning error }{
	{errRawSerialization, dialect.ErrSerialization},
	{errRawDeadlock, dialect.ErrDeadlock},
	{errRawLockTimeout, dialect.ErrLockTimeout},
	{errRawCommitLost, dialect.ErrCommitUnknown},
	{errRawConnLost, dialect.ErrUnavailable},
}

// fakeTx is a transaction of the fake driver; it only records how it ended.
type fakeTx struct {
	d          *fakeDriver
	n          int // 1 for the first Begin
	opts       dialect.BeginOptions
	committed  bool
	rolledBack bool
}

func (t *fakeTx) Exec(context.Context, string, ...any) (int64, error) { return 0, nil }
func (t *fakeTx) Query(context.Context, string, ...any) (dialect.Rows, error) {
	return nil, errors.New("fake: Query is not scripted")
}
func (t *fakeTx) Native() *fakeTx { return t }

func (t *fakeTx) Commit(context.Context) error {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	t.d.commits++
	if t.d.commitErr != nil {
		return t.d.commitErr
	}
	t.committed = true
	return nil
}

func (t *fakeTx) Rollback(context.Context) error {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	if !t.committed {
		t.rolledBack = true
	}
	return nil
}

// fakeDriver is a scripted dialect.Driver and dialect.Dialect: no database,
// just the answers each case needs, and a record of what the core did.
type fakeDriver struct {
	mu sync.Mutex

	// Scripts; nil means: Begin succeeds, Claim wins, Complete succeeds.
	beginErr  func(n int) error
	claim     func(ctx context.Context, n int, a dialect.ClaimArgs) (dialect.ClaimResult, error)
	complete  func(a dialect.CompleteArgs) error
	lookup    func(a dialect.LookupArgs) (dialect.Record, bool, error)
	commitErr error
	purge     []purgeStep
	caps      dialect.Capabilities

	// What happened.
	txs       []*fakeTx
	claims    int
	completes []dialect.CompleteArgs
	commits   int
	purges    []dialect.PurgeArgs
	lookups   int
}

// purgeStep is one scripted PurgeBatch answer.
type purgeStep struct {
	n   int64
	err error
	// took is how long the batch takes.
	took time.Duration
}

var (
	_ dialect.Driver[*fakeTx] = (*fakeDriver)(nil)
	_ dialect.Dialect         = (*fakeDriver)(nil)
)

func (f *fakeDriver) Dialect() dialect.Dialect { return f }
func (f *fakeDriver) Pool() dialect.Queryer    { return &fakeTx{d: f} }

func (f *fakeDriver) Wrap(tx *fakeTx) (dialect.Queryer, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil fake tx", dialect.ErrBadTx)
	}
	return tx, nil
}

func (f *fakeDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*fakeTx], error) {
	f.mu.Lock()
	n := len(f.txs) + 1
	tx := &fakeTx{d: f, n: n, opts: opts}
	script := f.beginErr
	f.mu.Unlock()
	if script != nil {
		if err := script(n); err != nil {
			f.mu.Lock()
			f.txs = append(f.txs, &fakeTx{d: f, n: n, opts: opts, rolledBack: true})
			f.mu.Unlock()
			return nil, err
		}
	}
	f.mu.Lock()
	f.txs = append(f.txs, tx)
	f.mu.Unlock()
	return tx, nil
}

func (f *fakeDriver) Name() string                        { return "fake" }
func (f *fakeDriver) Capabilities() dialect.Capabilities  { return f.caps }
func (f *fakeDriver) Schema(dialect.Table) dialect.Schema { return dialect.Schema{} }
func (f *fakeDriver) Lookup(_ context.Context, _ dialect.Queryer, _ dialect.Table, a dialect.LookupArgs) (dialect.Record, bool, error) {
	f.mu.Lock()
	f.lookups++
	script := f.lookup
	f.mu.Unlock()
	if script == nil {
		return dialect.Record{}, false, nil
	}
	return script(a)
}

func (f *fakeDriver) Claim(ctx context.Context, q dialect.Queryer, _ dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	f.mu.Lock()
	f.claims++
	n := f.claims
	script := f.claim
	f.mu.Unlock()
	if script == nil {
		return dialect.ClaimResult{Won: true}, nil
	}
	return script(ctx, n, a)
}

func (f *fakeDriver) Complete(_ context.Context, _ dialect.Queryer, _ dialect.Table, a dialect.CompleteArgs) error {
	f.mu.Lock()
	script := f.complete
	f.mu.Unlock()
	if script != nil {
		if err := script(a); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.completes = append(f.completes, a)
	f.mu.Unlock()
	return nil
}

func (f *fakeDriver) Purge(ctx context.Context, q dialect.Queryer, _ dialect.Table, a dialect.PurgeArgs) (int64, error) {
	if _, ok := q.(*fakeTx); !ok {
		return 0, fmt.Errorf("fake: Purge ran on a %T, not a transaction the core began", q)
	}
	f.mu.Lock()
	f.purges = append(f.purges, a)
	i := len(f.purges) - 1
	f.mu.Unlock()
	if i >= len(f.purge) {
		return 0, fmt.Errorf("fake: Purge called %d times, scripted %d", i+1, len(f.purge))
	}
	step := f.purge[i]
	time.Sleep(step.took)
	return step.n, step.err
}

func (f *fakeDriver) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	for _, c := range fakeClasses {
		if errors.Is(err, c.raw) {
			return dialect.Classified(c.meaning, err)
		}
	}
	return err
}

// openTxs counts transactions that were begun but neither committed nor
// rolled back.
func (f *fakeDriver) openTxs() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	open := 0
	for _, tx := range f.txs {
		if !tx.committed && !tx.rolledBack {
			open++
		}
	}
	return open
}

func (f *fakeDriver) begins() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.txs)
}

// newFakeStore returns a store on a fresh fake driver.
func newFakeStore(cfg idem.Config) (*idem.Store[*fakeTx], *fakeDriver, error) {
	f := &fakeDriver{}
	s, err := idem.New[*fakeTx](f, cfg)
	return s, f, err
}
