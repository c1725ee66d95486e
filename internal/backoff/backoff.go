// Package backoff is the one exponential backoff and cancellable sleep
// that the retry loops of idem (Do) and of its clients (idemhttp.Transport,
// idemgrpc.Client, idemconnect.Client) share, so the doubling, the cap, the
// jitter and the way a context ends a wait are written once. Sleep also
// serves the other waits that a context must cut short: a lease's poll, the
// purge's pauses, the queue consumer's in-flight delay.
//
// Each caller keeps its own numbers (base step, cap) and its own jitter:
// Do spreads racing transactions with Full; the clients, which talk to a
// server that may be overloaded, never wait less than half a step (Half).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Step is the backoff step of attempt n (n >= 1): base doubled n-1 times,
// never more than limit. The doubling stops at limit, so a large n costs
// nothing and no limit overflows it. base and limit must be positive.
func Step(n int, base, limit time.Duration) time.Duration {
	step := base
	for i := 1; i < n && step < limit; i++ {
		if step > limit-step { // doubling passes the limit
			return limit
		}
		step *= 2
	}
	return min(step, limit)
}

// Full draws a pause uniformly from (0, d] ("full jitter"): the widest
// spread, for retries that race each other. d must be positive.
func Full(d time.Duration) time.Duration {
	return rand.N(d) + 1
}

// Half draws a pause uniformly from [d/2, d] ("equal jitter"): spread out,
// yet never much shorter than the step. d must not be negative.
func Half(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// Sleep waits d, or until ctx ends; then it returns ctx.Err(). A d of zero
// or less does not wait: it returns ctx.Err(), so a loop with no pause
// still stops when its context has ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
