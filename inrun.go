package idem

import "context"

// runMark is the context key under which Do and DoLease mark the context
// they give their function.
type runMark struct{}

// storeRun is one run of a store's function, and the run it is inside.
type storeRun struct {
	store *core
	outer *storeRun
}

// markRun returns ctx marked as the context of a function that c's Do or
// DoLease runs (see Store.InRun).
func (c *core) markRun(ctx context.Context) context.Context {
	outer, _ := ctx.Value(runMark{}).(*storeRun)
	return context.WithValue(ctx, runMark{}, &storeRun{store: c, outer: outer})
}

// InRun reports whether ctx is, or derives from, the context that Do or
// DoLease of this Store gave its function: code running inside one of the
// store's runs. An adapter asks it to tell a request its own middleware
// already protects (installed twice on one route, say) from a new one:
// claiming that request's key again, from a second transaction, would
// wait on the first run's own claim and answer InFlight. It keys on the
// Store value: two Stores on one table are two stores; a nil Store is in
// no run.
func (s *Store[TTx]) InRun(ctx context.Context) bool {
	if s == nil {
		return false
	}
	for run, _ := ctx.Value(runMark{}).(*storeRun); run != nil; run = run.outer {
		if run.store == &s.core {
			return true
		}
	}
	return false
}
