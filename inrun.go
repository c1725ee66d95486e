package idem

import "context"

// runKey is the context key under which Do and DoLease mark the context
// they give their function: its value is the *Store running it.
type runKey struct{}

// inRun returns ctx marked as the context of a function s runs.
func (s *Store[TTx]) inRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, runKey{}, s)
}

// InRun reports whether ctx is (or derives from) the context that this
// store's Do or DoLease gave the function it runs: the caller is inside a
// run of s, with the key claimed and, under Do, its transaction open.
//
// A transport adapter uses it to let a call through that an outer
// interceptor or middleware of the same store already protects (the same
// interceptor chained twice, say): a second claim of the key from inside
// the first's run would wait for the first's own transaction and give up.
// The handler then works in the outer run's transaction. Another Store,
// even on the same table, is not this one.
func (s *Store[TTx]) InRun(ctx context.Context) bool {
	owner, _ := ctx.Value(runKey{}).(*Store[TTx])
	return owner == s && s != nil
}
