package idemhttp

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
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
// on every attempt. It retries what a retry can fix: network errors (a
// refused, reset or dropped connection, a timeout, a temporary DNS failure)
// and the statuses 409, 429, 502, 503 and 504, re-sending the same body.
// It never retries what will not change by asking again: other statuses (a
// 400, 413 or 422), a replayed answer (Idempotent-Replayed: true), a
// request that cannot be sent (no URL, an unsupported scheme, a malformed
// header), a certificate the client rejects, or a host that does not exist.
// Between attempts it waits the server's Retry-After (seconds or an HTTP
// date), else an exponential backoff from BaseDelay with jitter (between
// half and all of the step); every wait is capped by MaxDelay. It stops
// when the request's context ends or after MaxAttempts, returning the last
// response (or the last error).
//
// The body is re-sent from req.GetBody (http.NewRequest sets it for
// in-memory bodies). A body without GetBody is read into memory up to
// MaxBufferedBody bytes before the first attempt; a longer one is streamed
// in a single attempt that is not retried, since it cannot be sent again
// (the key still makes a retry of your own safe).
//
// Use one Transport per client; it is safe for concurrent use:
//
//	client := &http.Client{Transport: &idemhttp.Transport{}}
//
// To retry one intention across separate calls (after a process restart,
// say), make the key yourself with NewKey, keep it, and set the header. Do
// the same if the http.Client follows redirects of non-safe requests (307,
// 308): each hop is a RoundTrip of its own, and gets a key of its own.
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
}

// RoundTrip sends req, retrying as the type describes. It does not change
// req; it closes req.Body, as every RoundTripper must.
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
	maxAttempts := cmpOr(t.MaxAttempts, DefaultMaxAttempts)
	if !body.again {
		maxAttempts = 1
	}
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
				return nil, fmt.Errorf("idemhttp: rewind the body of %s %s for attempt %d: %w", req.Method, req.URL.Redacted(), attempt, err)
			}
			out.Body = rc
			out.GetBody = nil
			if body.again {
				out.GetBody = body.get
			}
		}
		resp, err := t.base().RoundTrip(out)
		if attempt >= maxAttempts || !retryable(ctx, resp, err) {
			if err != nil && attempt > 1 {
				err = fmt.Errorf("idemhttp: %s %s with key %q: attempt %d of %d: %w", req.Method, req.URL.Redacted(), key, attempt, maxAttempts, err)
			}
			return resp, err
		}
		wait := t.delay(attempt, resp, time.Now())
		last := err
		if resp != nil {
			last = fmt.Errorf("status %s", resp.Status)
			drain(resp.Body)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, fmt.Errorf("idemhttp: %s %s with key %q: stopped after %d attempts (last: %v): %w", req.Method, req.URL.Redacted(), key, attempt, last, err)
		}
	}
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
	step := cmpOr(t.BaseDelay, DefaultBaseDelay)
	for i := 1; i < n && step < maxDelay; i++ {
		step *= 2
	}
	step = min(step, maxDelay)
	return step/2 + time.Duration(mathrand.Int64N(int64(step/2)+1))
}

// retryable reports whether an attempt that ended with resp or err may be
// sent again with a chance of another outcome.
func retryable(ctx context.Context, resp *http.Response, err error) bool {
	if err != nil {
		return ctx.Err() == nil && transient(err)
	}
	if resp.Header.Get(HeaderReplayed) == "true" {
		return false // a stored answer: asking again replays it again
	}
	switch resp.StatusCode {
	case http.StatusConflict, http.StatusTooManyRequests,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// transient reports whether a network error may go away on its own: a
// connection refused, reset or cut short, a timeout, a temporary DNS
// failure. Everything else (a request that cannot be sent, a rejected
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

func sleep(ctx context.Context, d time.Duration) error {
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

// cmpOr returns v, or def when v is not positive.
func cmpOr[T int | int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
