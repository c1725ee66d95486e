package conformance

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// faults wraps a store's driver so that a case can cut the store off from
// its database, or act right before the store's next transaction begins.
type faults[TTx any] struct {
	dialect.Driver[TTx]
	cut atomic.Bool

	mu     sync.Mutex
	before func()
}

// errCut is what Begin fails with while the database is cut off.
var errCut = errors.New("conformance: the database is unreachable (cut off by the case)")

// Begin blocks while the database is cut off, until ctx ends, and then
// fails as unavailable; otherwise it runs the hook set by beforeNextBegin,
// once, and begins.
func (f *faults[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	if f.cut.Load() {
		<-ctx.Done()
		return nil, dialect.Classified(dialect.ErrUnavailable, errors.Join(errCut, ctx.Err()))
	}
	f.mu.Lock()
	hook := f.before
	f.before = nil
	f.mu.Unlock()
	if hook != nil {
		hook()
	}
	return f.Driver.Begin(ctx, opts)
}

// beforeNextBegin runs hook right before the store's next Begin.
func (f *faults[TTx]) beforeNextBegin(hook func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.before = hook
}

// setupFaults is setup with a faults wrapper on the store's driver. The
// fixture's own statements (Exec, Count) and every pool statement still
// reach the database; faults.Driver is the driver without the wrapper.
func setupFaults[TTx any](t *testing.T, b Backend[TTx], cfg idem.Config) (*env[TTx], *faults[TTx]) {
	t.Helper()
	var fl *faults[TTx]
	f := NewFixture(t, b, FixtureOptions[TTx]{Config: cfg, Wrap: func(d dialect.Driver[TTx]) dialect.Driver[TTx] {
		fl = &faults[TTx]{Driver: d}
		return fl
	}})
	return &env[TTx]{Fixture: f, effects: createEffects(f)}, fl
}
