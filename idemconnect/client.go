package idemconnect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"connectrpc.com/connect"

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
// Each call is one intention. Unless the caller set an Idempotency-Key
// header on the request (then that key is kept), it makes one with NewKey
// before the first attempt and sends that same key on every attempt; when
// the call returns it takes that key off the request again, so that a
// request value sent a second time is a new intention. It retries what a retry can fix: Unavailable (the server or the store could
// not serve it, or a commit's outcome is unknown), Aborted (another call
// holds the key, or the transaction conflicted) and DeadlineExceeded while
// the call's own context is still alive (an attempt ran out of
// AttemptTimeout, or the transport failed: connect reports that as
// Unavailable). A key that idem.ValidateKey refuses is not sent at all:
// the call fails with InvalidArgument. It never retries anything else, nor an answer the
// server marked replayed. Between attempts it waits the server's RetryInfo
// delay, else an exponential backoff from BaseDelay with jitter; every wait
// is capped by MaxDelay. When it gives up on a retryable answer (after
// MaxAttempts, or when the call's context ends) it returns a *GaveUpError
// holding the key and the last error.
//
// Install it on the client:
//
//	client := ordersv1connect.NewOrdersClient(http.DefaultClient, url,
//		connect.WithInterceptors((&idemconnect.Client{}).Interceptor()))
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
	// Protect reports whether a procedure gets a key and retries. Other
	// calls pass through untouched. Default: DefaultProtect.
	Protect func(spec connect.Spec) bool
	// NewKey makes a key. Default: NewKey.
	NewKey func() string
}

// GaveUpError is what Client returns when the last attempt of a call got a
// retryable answer: the key the attempts carried, so that the caller can
// try the same intention again later (set it as the Idempotency-Key
// header) and get its result, or have it done once. errors.As finds the
// last attempt's *connect.Error through it, and connect.CodeOf sees its
// code.
type GaveUpError struct {
	// Key is the idempotency key every attempt carried.
	Key string
	// Attempts is how many attempts were sent.
	Attempts int
	// Err is the last attempt's error.
	Err error
}

func (e *GaveUpError) Error() string {
	return fmt.Sprintf("idemconnect: gave up after %d attempts with key %q: %v", e.Attempts, e.Key, e.Err)
}

// Unwrap returns the last attempt's error.
func (e *GaveUpError) Unwrap() error { return e.Err }

// NewKey returns a fresh idempotency key: a random (version 4) UUID from
// crypto/rand. Make one per intention and reuse it for every retry of it.
func NewKey() string { return idemrpc.NewKey() }

// Interceptor returns the client interceptor; see Client. On a handler, and
// for streams, it does nothing.
func (c *Client) Interceptor() connect.Interceptor { return clientInterceptor{c} }

type clientInterceptor struct{ c *Client }

func (i clientInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	c := i.c
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		spec := req.Spec()
		protect := c.Protect
		if protect == nil {
			protect = DefaultProtect
		}
		if !spec.IsClient || !protect(spec) {
			return next(ctx, req)
		}
		key, made, err := idemrpc.ClientKey(req.Header().Values(HeaderKey), c.NewKey)
		if err != nil {
			// Not worth sending: the transport would refuse some such keys
			// with an error that looks retryable, the server all of them.
			return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("idemconnect: %w", err))
		}
		if made {
			req.Header().Set(HeaderKey, key)
			// The key is this call's: a caller that sends the same request
			// value again means a new intention, which must not replay.
			defer req.Header().Del(HeaderKey)
		}
		policy := idemrpc.Retry{MaxAttempts: c.MaxAttempts, BaseDelay: c.BaseDelay, MaxDelay: c.MaxDelay}
		for attempt := 1; ; attempt++ {
			resp, err := c.attempt(ctx, req, next)
			if err == nil || !retryable(ctx, err) {
				return resp, err
			}
			server, fromServer := RetryDelay(err)
			if attempt >= policy.Attempts() || backoff.Sleep(ctx, policy.Delay(attempt, server, fromServer)) != nil {
				return nil, &GaveUpError{Key: key, Attempts: attempt, Err: err}
			}
		}
	}
}

func (clientInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (clientInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (c *Client) attempt(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	if c.AttemptTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.AttemptTimeout)
		defer cancel()
	}
	return next(ctx, req)
}

// retryable reports whether another attempt with the same key may get
// another answer.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var ce *connect.Error
	replayed := errors.As(err, &ce) && ce.Meta().Get(HeaderReplayed) == "true"
	return idemrpc.Retryable(idemrpc.Code(connect.CodeOf(err)), replayed)
}
