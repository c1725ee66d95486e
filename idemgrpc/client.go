package idemgrpc

import (
	"context"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/internal/backoff"
)

// Defaults for Client's zero fields.
const (
	// DefaultMaxAttempts is how many times a call is sent at most, the
	// first time included.
	DefaultMaxAttempts = idemrpc.DefaultMaxAttempts
	// DefaultBaseDelay is the backoff before the first retry.
	DefaultBaseDelay = idemrpc.DefaultBaseDelay
	// DefaultMaxDelay caps every wait between attempts.
	DefaultMaxDelay = idemrpc.DefaultMaxDelay
)

// Client is the client half: a unary client interceptor that makes retries
// of a call safe and retries it.
//
// Each call is one intention. Unless the caller put an idempotency-key in
// the outgoing metadata (then that key is kept), it makes one with NewKey
// before the first attempt and sends that same key on every attempt. A
// caller's key the server would refuse (one idem.ValidateKey refuses, or
// more than one) is not sent at all: the call fails with InvalidArgument.
// It retries what a retry can fix: Unavailable (the server or the store could
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
	// every method but gRPC's own services (health, reflection, channelz,
	// CSDS).
	Protect func(fullMethod string) bool
	// NewKey makes a key. Default: NewKey.
	NewKey func() string
}

// NewKey returns a fresh idempotency key: a random (version 4) UUID from
// crypto/rand. Make one per intention and reuse it for every retry of it.
func NewKey() string { return idemrpc.NewKey() }

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
		key, made, err := idemrpc.ClientKey(md.Get(MetadataKey), c.NewKey)
		if err != nil {
			// Not worth sending: the transport would refuse some such keys
			// with an error that looks retryable, the server all of them.
			return status.Error(codes.InvalidArgument, "idemgrpc: "+err.Error())
		}
		if made {
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
		}
		policy := idemrpc.Retry{MaxAttempts: c.MaxAttempts, BaseDelay: c.BaseDelay, MaxDelay: c.MaxDelay}
		for attempt := 1; ; attempt++ {
			var header metadata.MD
			err := c.attempt(ctx, method, req, reply, cc, invoker, append(opts, grpc.Header(&header)))
			if err == nil || attempt >= policy.Attempts() || !retryable(ctx, err, header) {
				return err
			}
			server, fromServer := retryInfo(err)
			if backoff.Sleep(ctx, policy.Delay(attempt, server, fromServer)) != nil {
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
	vals := header.Get(MetadataReplayed)
	return idemrpc.Retryable(idemrpc.Code(status.Code(err)), len(vals) > 0 && vals[0] == "true")
}

// retryInfo is the delay of err's RetryInfo detail, and whether it has one.
func retryInfo(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}
