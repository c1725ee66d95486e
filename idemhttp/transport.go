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
	"net/http"
	"strconv"
	"strings"
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
)

// Transport is an http.RoundTripper that makes retries of non-safe requests
// safe and retries them.
//
// Each RoundTrip is one intention. If its method is not safe (anything but
// GET, HEAD, OPTIONS and TRACE) and the caller set no Idempotency-Key, it
// makes one with NewKey before the first attempt, and sends that same key
// on every attempt. It retries on network errors and on 409, 429, 502, 503
// and 504, re-sending the same body (from req.GetBody, or buffered once when
// the request has none); never on other statuses (a 400, 413 or 422 will
// not change by asking again), nor on a replayed answer
// (Idempotent-Replayed: true), which the server will replay again. Between attempts it waits the server's
// Retry-After (seconds or an HTTP date), else an exponential backoff from
// BaseDelay with jitter (between half and all of the step); every wait is
// capped by MaxDelay. It stops when the request's context ends or after
// MaxAttempts, returning the last response (or the last error).
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
}

// RoundTrip sends req, retrying as the type describes. It does not change
// req; it closes req.Body, as every RoundTripper must.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	getBody, err := rewindable(req)
	if err != nil {
		return nil, err
	}
	key := req.Header.Get(HeaderKey)
	if key == "" && !isSafe(req.Method) {
		key = NewKey()
	}
	maxAttempts := cmpOr(t.MaxAttempts, DefaultMaxAttempts)
	for attempt := 1; ; attempt++ {
		out := req.Clone(ctx)
		if key != "" {
			out.Header.Set(HeaderKey, key)
		}
		if getBody != nil {
			body, err := getBody()
			if err != nil {
				return nil, fmt.Errorf("idemhttp: rewind the body of %s %s for attempt %d: %w", req.Method, req.URL.Redacted(), attempt, err)
			}
			out.Body, out.GetBody = body, getBody
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
// sent again.
func retryable(ctx context.Context, resp *http.Response, err error) bool {
	if err != nil {
		var cert *tls.CertificateVerificationError
		return ctx.Err() == nil && !errors.As(err, &cert)
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

// rewindable returns a function giving a fresh copy of req's body for every
// attempt after the first (nil when there is no body), buffering the body
// once when req.GetBody is not set.
func rewindable(req *http.Request) (func() (io.ReadCloser, error), error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, nil
	}
	if req.GetBody != nil {
		first := req.Body
		used := false
		return func() (io.ReadCloser, error) {
			if !used {
				used = true
				return first, nil
			}
			return req.GetBody()
		}, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("idemhttp: buffer the body of %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	return func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, nil
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
func cmpOr[T int | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}
