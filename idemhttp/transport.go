package idemhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem/internal/backoff"
)

// Defaults for Transport's zero fields.
const (
	// DefaultMaxAttempts is how many times a request is sent at most, the
	// first time included.
	DefaultMaxAttempts = 5
	// DefaultBaseDelay is the backoff before the first retry.
	DefaultBaseDelay = 200 * time.Millisecond
	// DefaultMaxDelay caps every wait between attempts.
	DefaultMaxDelay = 10 * time.Second
	// DefaultMaxBufferedBody is the largest body without GetBody that is
	// held in memory to be sent again (1 MiB, the middleware's default
	// request limit).
	DefaultMaxBufferedBody = 1 << 20
)

// Transport is an http.RoundTripper that makes retries of non-safe requests
// safe and retries them.
//
// Each RoundTrip is one intention. If its method is not safe (anything but
// GET, HEAD, OPTIONS and TRACE) and the caller set no Idempotency-Key, it
// makes one with NewKey before the first attempt, and sends that same key
// on every attempt; a key the caller set is kept. Safe methods are sent
// without a key, and retried all the same.
//
// What is retried, by default (DefaultRetry; Transport.Retry replaces it):
//
//   - every method, safe or not: a GET is retried like a POST;
//   - network errors a retry can fix: a refused, reset or dropped
//     connection, an HTTP/2 stream the server reset before answering
//     (RST_STREAM with INTERNAL_ERROR, REFUSED_STREAM or CANCEL, which is
//     what a server failing before its headers sends on HTTP/2), a
//     timeout (an attempt that ran out of AttemptTimeout included), a
//     temporary DNS failure;
//   - the statuses 409, 429, 502, 503 and 504, unless the response says
//     Idempotent-Replayed: true. A 409 from behind this package's
//     middleware (it carries Idempotency-Retention) is retried only with
//     Retry-After, which the middleware's "in-flight" 409 always carries:
//     without it, it is the handler's own answer ("already shipped"),
//     final whether it was stored or not. From any other server every
//     409 is retried until MaxAttempts; set Retry to leave an
//     application's 409 alone there (see the example on Retry).
//
// It never retries what will not change by asking again: other statuses (a
// 400, 413, 422 or 500), a replayed answer, a request that cannot be sent
// (no URL, an unsupported scheme, a malformed header), a certificate the
// client rejects, or a host that does not exist.
//
// Between attempts it calls OnRetry, then waits the server's Retry-After
// (seconds or an HTTP date), else an exponential backoff from BaseDelay
// with jitter (between half and all of the step); every wait is capped by
// MaxDelay. It stops after MaxAttempts or when the request's context ends.
//
// What RoundTrip returns when it stops:
//
//   - the last response, with its body intact and a nil error, whenever the
//     last attempt got one: a success, a final status, or a retryable
//     status when no attempt is left (the caller reads a 503's body as
//     with any client); its Request carries the key, in
//     resp.Request.Header.Get(HeaderKey);
//   - an *AbandonedError otherwise: the last attempt failed with a network
//     error or a timeout, or the context ended (during an attempt, or
//     while waiting between two: then it wraps ctx.Err()). It carries the
//     Key, the Attempts, the last Status and the last error, so the
//     intention can be sent again later with the same key.
//
// # Timeouts
//
// http.Client.Timeout bounds the whole of Do: every attempt, every wait
// between them and the reading of the body, together. Set AttemptTimeout to
// bound each attempt on its own, so a hung attempt is abandoned and retried
// with the same key, and bound the total with Client.Timeout or the
// request's context.
//
// # Bodies
//
// The body is re-sent from req.GetBody (http.NewRequest sets it for
// in-memory bodies). A body without GetBody is read into memory up to
// MaxBufferedBody bytes before the first attempt (one that turns out empty
// is sent as no body, not as an empty one of unknown length, which the
// middleware refuses); a longer one is streamed in a single attempt that
// is not retried, since it cannot be sent again (the key still makes a
// retry of your own safe).
//
// Use one Transport per client; it is safe for concurrent use:
//
//	client := &http.Client{Transport: &idemhttp.Transport{AttemptTimeout: 10 * time.Second}}
//
// To resume an abandoned intention (after a process restart, say), take the
// key from the *AbandonedError (or make it yourself with NewKey and keep it
// from the start), and set the Idempotency-Key header on the new request:
// the Transport keeps it. Do the same if the http.Client follows redirects
// of non-safe requests (307, 308): each hop is a RoundTrip of its own, and
// gets a key of its own.
type Transport struct {
	// Base sends each attempt. Default: http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts bounds the attempts of one request, the first included.
	// Default: DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay is the backoff step before the first retry; it doubles
	// with every retry up to MaxDelay. Default: DefaultBaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps every wait, a Retry-After included. Default:
	// DefaultMaxDelay.
	MaxDelay time.Duration
	// MaxBufferedBody bounds the bytes of a body without GetBody held to
	// be re-sent; a longer body is sent once, without retries. Default:
	// DefaultMaxBufferedBody.
	MaxBufferedBody int64
	// AttemptTimeout, when set, bounds each attempt from its start until
	// its response headers arrive (connecting, sending the request, the
	// server's work): an attempt that runs out is abandoned and, unless
	// the request's context ended, retried with the same key. Once the
	// headers have arrived the answer is decided, and its body, read
	// after RoundTrip returned, is bounded by the request's context (and
	// Client.Timeout) only; closing the body releases the attempt. Zero:
	// attempts are bounded by the request's context only.
	AttemptTimeout time.Duration
	// Retry reports whether an attempt that ended with resp (err nil) or
	// err (resp nil) is worth sending again with the same key. It is asked
	// only when another attempt is possible: attempts are left, the body
	// can be sent again and the context has not ended. req is the
	// caller's request; do not modify it, nor read resp.Body. Default:
	// DefaultRetry.
	//
	// To leave an application's 409 and every GET alone:
	//
	//	Retry: func(req *http.Request, resp *http.Response, err error) bool {
	//		if req.Method == http.MethodGet {
	//			return false
	//		}
	//		if resp != nil && resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") == "" {
	//			return false // not the middleware's in-flight 409
	//		}
	//		return idemhttp.DefaultRetry(req, resp, err)
	//	},
	Retry func(req *http.Request, resp *http.Response, err error) bool
	// OnRetry, when set, is called before each wait between attempts,
	// with the attempt that failed and the delay before the next: for
	// logs and metrics. It runs on RoundTrip's goroutine; keep it short.
	OnRetry func(RetryEvent)
}

// RoundTrip sends req, retrying as the type describes. It does not change
// req; it closes req.Body, as every RoundTripper must. Once an attempt was
// made, every error it returns is an *AbandonedError.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		closeBody(req)
		return nil, errors.New("idemhttp: request without a URL")
	}
	ctx := req.Context()
	body, err := t.rewindable(req)
	if err != nil {
		return nil, err
	}
	key := req.Header.Get(HeaderKey) // a nil Header has no key
	if key == "" && !isSafe(req.Method) {
		key = NewKey()
	}
	abandon := func(attempts, status int, err error) error {
		return &AbandonedError{Key: key, Attempts: attempts, Status: status, Err: err, method: req.Method, url: req.URL.Redacted()}
	}
	maxAttempts := cmpOr(t.MaxAttempts, DefaultMaxAttempts)
	if !body.again {
		maxAttempts = 1
	}
	retry := t.Retry
	if retry == nil {
		retry = DefaultRetry
	}
	status := 0 // the last attempt's
	for attempt := 1; ; attempt++ {
		out := req.Clone(ctx)
		if out.Header == nil {
			out.Header = make(http.Header)
		}
		if key != "" {
			out.Header.Set(HeaderKey, key)
		}
		if body.get != nil {
			rc, err := body.get()
			if err != nil {
				return nil, abandon(attempt-1, status, fmt.Errorf("rewind the body for attempt %d: %w", attempt, err))
			}
			out.Body = rc
			out.GetBody = nil
			if body.again {
				out.GetBody = body.get
			}
		}
		resp, err := t.send(ctx, out, attempt)
		status = 0
		if err != nil {
			if attempt >= maxAttempts || ctx.Err() != nil || !retry(req, nil, err) {
				return nil, abandon(attempt, 0, err)
			}
		} else {
			if resp.Request == nil {
				resp.Request = out // where the caller finds the key
			}
			status = resp.StatusCode
			if attempt >= maxAttempts || ctx.Err() != nil || !retry(req, resp, nil) {
				return resp, nil
			}
		}
		wait := t.delay(attempt, resp, time.Now())
		if t.OnRetry != nil {
			t.OnRetry(RetryEvent{Request: req, Key: key, Attempt: attempt, Status: status, Err: err, Delay: wait})
		}
		if resp != nil {
			drain(resp.Body)
		}
		if serr := backoff.Sleep(ctx, wait); serr != nil {
			if err != nil {
				serr = fmt.Errorf("%w (last attempt: %w)", serr, err)
			}
			return nil, abandon(attempt, status, serr)
		}
	}
}

// send makes one attempt. With AttemptTimeout, the attempt runs in a
// context of its own that ends when the timeout fires before the response
// headers arrived (the attempt's error then wraps
// context.DeadlineExceeded), or when the response body is closed.
func (t *Transport) send(ctx context.Context, out *http.Request, attempt int) (*http.Response, error) {
	if t.AttemptTimeout <= 0 {
		return t.base().RoundTrip(out)
	}
	actx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(t.AttemptTimeout, cancel)
	resp, err := t.base().RoundTrip(out.WithContext(actx))
	if !timer.Stop() { // it fired: this attempt is over, whatever came back
		if resp != nil {
			resp.Body.Close()
		}
		cancel()
		return nil, fmt.Errorf("attempt %d timed out after %v: %w", attempt, t.AttemptTimeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = cancelOnClose(resp.Body, cancel)
	return resp, nil
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

// delay is the wait after attempt n (n >= 1) failed with resp (nil for a
// network error): the server's Retry-After if it sent one, else the jittered
// backoff step; at most MaxDelay.
func (t *Transport) delay(n int, resp *http.Response, now time.Time) time.Duration {
	maxDelay := cmpOr(t.MaxDelay, DefaultMaxDelay)
	if resp != nil {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), now); ok {
			return min(d, maxDelay)
		}
	}
	return backoff.Half(backoff.Step(n, cmpOr(t.BaseDelay, DefaultBaseDelay), maxDelay))
}

// DefaultRetry is Transport's default retry rule: an error is worth
// another attempt when it may go away on its own (a refused, reset or
// dropped connection, an HTTP/2 stream reset with INTERNAL_ERROR,
// REFUSED_STREAM or CANCEL, a timeout, a temporary DNS failure); a response when
// its status is 409, 429, 502, 503 or 504 and it is not a replayed answer
// (Idempotent-Replayed: true: asking again replays it again), nor a 409
// that the middleware passed on from its handler (Idempotency-Retention
// without Retry-After: the handler's answer, stored or not). Every method
// is retried, safe ones included; req is not consulted. Call it from your
// own Transport.Retry to keep these rules for the cases you leave alone.
func DefaultRetry(req *http.Request, resp *http.Response, err error) bool {
	if err != nil {
		return transient(err)
	}
	if resp == nil {
		return false
	}
	if resp.Header.Get(HeaderReplayed) == "true" {
		return false // a stored answer: asking again replays it again
	}
	switch resp.StatusCode {
	case http.StatusConflict:
		// Behind the middleware only its in-flight 409 has Retry-After.
		return resp.Header.Get(HeaderRetention) == "" || resp.Header.Get("Retry-After") != ""
	case http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// transient reports whether a network error may go away on its own: a
// connection refused, reset or cut short, an HTTP/2 stream the server
// reset with INTERNAL_ERROR, REFUSED_STREAM or CANCEL, a timeout, a
// temporary DNS failure. Everything else (a request that cannot be sent, a rejected
// certificate, a host that does not exist) fails the same way again.
func transient(err error) bool {
	var (
		dnsErr *net.DNSError
		cert   *tls.CertificateVerificationError
		record tls.RecordHeaderError
		netErr net.Error
		opErr  *net.OpError
	)
	switch {
	case errors.As(err, &dnsErr):
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	case errors.As(err, &cert), errors.As(err, &record):
		return false
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE):
		return true
	case errors.As(err, &netErr) && netErr.Timeout():
		return true
	case errors.As(err, &opErr):
		return true // a dial, read or write that failed on the network
	case streamReset(err):
		return true // HTTP/2's dropped connection: the server reset the stream
	case strings.Contains(err.Error(), errServerClosedIdle):
		return true
	}
	return false
}

// errServerClosedIdle is the text of net/http's unexported error for a
// keep-alive connection the server closed as the request went out on it (a
// server restarting, say). net/http retries such a request itself when it
// may, and returns this when it did not or the retry met it again; with
// the key, another attempt is safe.
const errServerClosedIdle = "http: server closed idle connection"

// parseRetryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (a date in the past means now).
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		return time.Duration(min(secs, uint64(1<<32))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// body gives each attempt the request's body: get returns it (nil when
// there is none); again is false when it can be sent only once.
type body struct {
	get   func() (io.ReadCloser, error)
	again bool
}

// rewindable prepares req's body for the attempts: from req.GetBody when
// set, else buffered up to MaxBufferedBody bytes. A longer body without
// GetBody is streamed once: what was read ahead goes first, then the rest.
func (t *Transport) rewindable(req *http.Request) (body, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return body{again: true}, nil
	}
	if req.GetBody != nil {
		first := req.Body
		used := false
		return body{again: true, get: func() (io.ReadCloser, error) {
			if !used {
				used = true
				return first, nil
			}
			return req.GetBody()
		}}, nil
	}
	limit := cmpOr(t.MaxBufferedBody, DefaultMaxBufferedBody)
	b, err := io.ReadAll(io.LimitReader(req.Body, limit+1))
	if err != nil {
		req.Body.Close()
		return body{}, fmt.Errorf("idemhttp: buffer the body of %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	if int64(len(b)) > limit {
		rest := struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), req.Body), req.Body}
		return body{get: func() (io.ReadCloser, error) { return rest, nil }}, nil
	}
	req.Body.Close()
	if len(b) == 0 {
		// No body, rather than an empty one of unknown length, which
		// net/http would send chunked (HTTP/1.1) or without a length
		// (HTTP/2), and which the middleware cannot tell from a body a
		// middleware drained.
		return body{again: true, get: func() (io.ReadCloser, error) { return http.NoBody, nil }}, nil
	}
	return body{again: true, get: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }}, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// isSafe reports whether method is safe (RFC 9110 section 9.2.1): it asks
// for nothing to change, so it needs no key.
func isSafe(method string) bool {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// NewKey returns a fresh idempotency key: a random (version 4) UUID from
// crypto/rand, 122 random bits. Make one per intention, before the first
// attempt, and reuse it for every retry of that intention.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func drain(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10)) // lets the connection be reused
	body.Close()
}

// cmpOr returns v, or def when v is not positive.
func cmpOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
