package retryload

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// RecoveryLimit bounds a fault run beside the load and the wait for the
// first commit after it.
const RecoveryLimit = 2 * time.Minute

// FaultBeside sets l.Fault to start fault in a goroutine of its own, on a
// context of parent bounded by RecoveryLimit, so that the load goes on
// while it strikes; once fault returns, FirstCommit measures how long the
// topology took to commit a claim through l.Store again. After l.Run, call
// the returned function: it fails t if the load ended before the fault
// ran, or if the fault or the probe failed, and returns that time.
func (l *Load[TTx]) FaultBeside(parent context.Context, fault func(ctx context.Context) error) (recovered func(t testing.TB) time.Duration) {
	var (
		started atomic.Bool
		done    = make(chan struct{})
		took    time.Duration
		err     error
	)
	l.Fault = func(context.Context) error {
		started.Store(true)
		go func() {
			defer close(done)
			ctx, cancel := context.WithTimeout(parent, RecoveryLimit)
			defer cancel()
			begin := time.Now()
			if err = fault(ctx); err == nil {
				took, err = FirstCommit(ctx, l.Store, begin)
			}
		}()
		return nil
	}
	return func(t testing.TB) time.Duration {
		t.Helper()
		if !started.Load() {
			t.Fatal("retryload: the load ended before its fault ran")
		}
		<-done // bounded by RecoveryLimit
		if err != nil {
			t.Fatalf("retryload: the fault, or the first commit after it: %v", err)
		}
		return took
	}
}

// FirstCommit calls Do on fresh keys (of a scope of their own, writing
// nothing) every 50 ms until one commits, and returns the time from begin.
func FirstCommit[TTx any](ctx context.Context, s *idem.Store[TTx], begin time.Time) (time.Duration, error) {
	for i := 0; ; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		key := fmt.Sprintf("probe-%d-%d", begin.UnixNano(), i)
		res, err := s.Do(cctx, idem.Request{Scope: "probe", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/probe", nil)},
			func(context.Context, TTx) (idem.Response, error) { return idem.Response{Status: 204}, nil })
		cancel()
		if err == nil && res.Committed {
			return time.Since(begin), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no claim committed since the fault %v ago: %w", time.Since(begin), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
