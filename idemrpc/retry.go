package idemrpc

import (
	"time"

	"github.com/idemkit/idem/internal/backoff"
)

// Defaults of Retry's zero fields, and of the adapters' Client.
const (
	// DefaultMaxAttempts is how many times a call is sent at most, the
	// first time included.
	DefaultMaxAttempts = 5
	// DefaultBaseDelay is the backoff before the first retry.
	DefaultBaseDelay = 100 * time.Millisecond
	// DefaultMaxDelay caps every wait between attempts.
	DefaultMaxDelay = 10 * time.Second
)

// Retry is the client's retry policy: how many attempts, how long between
// them. Zero fields mean their defaults.
type Retry struct {
	// MaxAttempts bounds the attempts of one call, the first included.
	MaxAttempts int
	// BaseDelay is the backoff before the first retry; it doubles with
	// every retry up to MaxDelay.
	BaseDelay time.Duration
	// MaxDelay caps every wait, the server's included.
	MaxDelay time.Duration
}

// Attempts is how many attempts a call gets at most.
func (r Retry) Attempts() int {
	if r.MaxAttempts <= 0 {
		return DefaultMaxAttempts
	}
	return r.MaxAttempts
}

// Delay is the wait after attempt n (1 for the first) failed: the
// server's delay when it sent one (a RetryInfo detail; fromServer), else
// an exponential backoff from BaseDelay with jitter (between half and all
// of the step); either capped by MaxDelay.
func (r Retry) Delay(n int, server time.Duration, fromServer bool) time.Duration {
	maxDelay := r.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	if fromServer {
		return min(max(server, 0), maxDelay)
	}
	step := r.BaseDelay
	if step <= 0 {
		step = DefaultBaseDelay
	}
	return backoff.Half(backoff.Step(n, step, maxDelay))
}

// Retryable reports whether another attempt with the same key may get
// another answer than the one with code: Unavailable (the server or the
// store could not serve it, or a commit's outcome is unknown), Aborted
// (another call holds the key, or the transaction conflicted) and
// DeadlineExceeded (an attempt ran out of time, or a proxy gave up) may;
// an answer the server marked replayed (MetadataReplayed) is stored, and
// asking again replays it again. The caller also stops when the call's own
// context has ended.
func Retryable(code Code, replayed bool) bool {
	if replayed {
		return false
	}
	switch code {
	case Unavailable, Aborted, DeadlineExceeded:
		return true
	}
	return false
}
