package idemgrpc

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/internal/backoff"
)

// Defaults for Client's zero fields.
const (
	// DefaultMaxAttempts is how many times a call is sent at most, the
	// first time included.
	DefaultMaxAttempts = 5
	// DefaultBaseDelay is the backoff before the first retry.
	DefaultBaseDelay = 100 * time.Millisecond
	// DefaultMaxDelay caps every wait between attempts.
	DefaultMaxDelay = 10 * time.Second
)

// Client is the client half: a unary client interceptor that makes retries
// of a call safe and retries it.
//
// Each call is one intention. Unless the caller put an idempotency-key in
// the outgoing metadata (then that key is kept), it makes one with NewKey
// before the first attempt and sends that same key on every attempt. It
// retries what a retry can fix: Unavailable (the server or the store could
// not serve it, or a commit's outcome is unknown), Aborted (another call
// holds the key, or the transaction conflicted) and DeadlineExceeded while
// the call's own context is still alive (an attempt ran out of
// AttemptTimeout, or a proxy or the server gave up, like an HTTP 504). It
// never retries anything else: InvalidArgument (a bad
// key), FailedPrecondition (the key was used with another request) and
// every answer the server replayed are final. Between attempts it waits the
// server's RetryInfo delay, else an exponential backoff from BaseDelay with
// jitter; every wait is capped by MaxDelay. It stops after MaxAttempts or
// when the call's context ends, returning the last error.
//
// Install it on the connection:
//
//	conn, err := grpc.NewClient(target, grpc.WithChainUnaryInterceptor((&idemgrpc.Client{}).UnaryInterceptor()), ...)
//
// To retry one intention across separate calls (after a process restart,
// say), make the key with NewKey, keep it, and set it yourself with
// metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, key).
//
// Do not combine it with gRPC's own retry policy (service config
// retryPolicy) for the same methods: both would retry.
type Client struct {
	// MaxAttempts bounds the attempts of one call, the first included.
	// Default: DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay is the backoff before the first retry; it doubles with
	// every retry up to MaxDelay. Default: DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps every wait, a RetryInfo delay included. Default:
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// AttemptTimeout, when set, bounds each attempt; an attempt that runs
	// out (DeadlineExceeded while the call's context is alive) is retried
	// with the same key. Zero: attempts are bounded by the call's context
	// only.
	AttemptTimeout time.Duration
	// Protect reports whether a method (its full name) gets a key and
	// retries. Other calls pass through untouched. Default: DefaultProtect,
	// every method but gRPC's health and reflection services.
	Protect func(fullMethod string) bool
	// NewKey makes a key. Default: NewKey.
	NewKey func() string
}

// NewKey returns a fresh idempotency key: a random (version 4) UUID from
// crypto/rand. Make one per intention and reuse it for every retry of it.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// UnaryInterceptor returns the interceptor; see Client.
func (c *Client) UnaryInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		protect := c.Protect
		if protect == nil {
			protect = DefaultProtect
		}
		if !protect(method) {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		md, _ := metadata.FromOutgoingContext(ctx)
		if len(md.Get(MetadataKey)) == 0 {
			newKey := c.NewKey
			if newKey == nil {
				newKey = NewKey
			}
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, newKey())
		}
		maxAttempts := c.MaxAttempts
		if maxAttempts <= 0 {
			maxAttempts = DefaultMaxAttempts
		}
		for attempt := 1; ; attempt++ {
			var header metadata.MD
			err := c.attempt(ctx, method, req, reply, cc, invoker, append(opts, grpc.Header(&header)))
			if err == nil || attempt >= maxAttempts || !retryable(ctx, err, header) {
				return err
			}
			if backoff.Sleep(ctx, c.delay(attempt, err)) != nil {
				return err
			}
		}
	}
}

func (c *Client) attempt(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	if c.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.AttemptTimeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// retryable reports whether another attempt with the same key may get
// another answer.
func retryable(ctx context.Context, err error, header metadata.MD) bool {
	if ctx.Err() != nil {
		return false
	}
	if vals := header.Get(MetadataReplayed); len(vals) > 0 && vals[0] == "true" {
		return false // a stored answer: asking again replays it again
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// delay is the wait after attempt n failed with err: the server's RetryInfo
// when it sent one, else exponential backoff with jitter (between half and
// all of the step), capped by MaxDelay.
func (c *Client) delay(n int, err error) time.Duration {
	maxDelay := c.MaxDelay
	if maxDelay <= 0 {
		maxDelay = DefaultMaxDelay
	}
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return min(max(ri.GetRetryDelay().AsDuration(), 0), maxDelay)
		}
	}
	step := c.BaseDelay
	if step <= 0 {
		step = DefaultBaseDelay
	}
	return backoff.Half(backoff.Step(n, step, maxDelay))
}
