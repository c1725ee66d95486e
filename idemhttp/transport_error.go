package idemhttp

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// AbandonedError is the error Transport.RoundTrip returns when it gives up
// on an intention without a response to return: the last attempt failed
// with a network error or ran out of Transport.AttemptTimeout and no
// attempt is left (or the error is one a retry cannot fix), the request's
// context ended during an attempt or between two, or the body could not be
// rewound for the next attempt. An http.Client returns it inside a
// *url.Error; errors.As reaches it.
//
// The server may or may not have done the work. To finish the intention
// later (after the outage, or from a job that outlives this process), send
// it again with the same Key: set the Idempotency-Key header yourself on the
// new request and Transport keeps it. The server then replays the first
// answer or does the work once.
//
//	var ab *idemhttp.AbandonedError
//	if errors.As(err, &ab) && ab.Key != "" {
//		saveForLater(ab.Key) // later: req.Header.Set(idemhttp.HeaderKey, key)
//	}
//
// When the attempts run out on a status (a 503, say), RoundTrip returns
// that last response instead, with its body intact, as net/http does for
// any status; its Request carries the key:
// resp.Request.Header.Get(idemhttp.HeaderKey).
type AbandonedError struct {
	// Key is the Idempotency-Key every attempt carried: the caller's or
	// the one Transport made. "" for a safe method sent without one.
	Key string
	// Attempts is how many attempts were sent (0 when none was).
	Attempts int
	// Status is the last attempt's status code, 0 when it got no
	// response.
	Status int
	// Err is why it stopped: the last attempt's error, or the context's
	// error (ctx.Err()) when the context ended between attempts, then
	// wrapping the last attempt's error too when it had one.
	Err error

	method, url string
}

// Error names the request, the key, the attempts and the cause.
func (e *AbandonedError) Error() string {
	last := ""
	if e.Status != 0 {
		last = ", last status " + strconv.Itoa(e.Status)
	}
	plural := "s"
	if e.Attempts == 1 {
		plural = ""
	}
	return fmt.Sprintf("idemhttp: %s %s with key %q abandoned after %d attempt%s%s: %v", e.method, e.url, e.Key, e.Attempts, plural, last, e.Err)
}

// Unwrap returns Err, so errors.Is sees the network or context error.
func (e *AbandonedError) Unwrap() error { return e.Err }

// Timeout reports whether Err is a timeout, so url.Error.Timeout and
// net.Error checks still see one through this wrapper.
func (e *AbandonedError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.Err, &t) && t.Timeout()
}

// RetryEvent describes an attempt that failed and is about to be retried:
// Transport.OnRetry receives one before each wait.
type RetryEvent struct {
	// Request is the caller's request. Do not modify it.
	Request *http.Request
	// Key is the Idempotency-Key of every attempt ("" for a safe method
	// sent without one).
	Key string
	// Attempt is the number of the attempt that failed, 1 for the first.
	Attempt int
	// Status is its status code, 0 when it got no response.
	Status int
	// Err is its error, nil when it got a response.
	Err error
	// Delay is the wait before the next attempt.
	Delay time.Duration
}

// cancelBody cancels an attempt's context when the response body is
// closed, so the body stays readable after RoundTrip returned.
type cancelBody struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// cancelBodyWriter is a cancelBody whose body is also writable, as
// net/http's is for a 101 Switching Protocols response.
type cancelBodyWriter struct {
	cancelBody
	w io.Writer
}

func (b *cancelBodyWriter) Write(p []byte) (int, error) { return b.w.Write(p) }

func cancelOnClose(body io.ReadCloser, cancel func()) io.ReadCloser {
	if w, ok := body.(io.Writer); ok {
		return &cancelBodyWriter{cancelBody{body, cancel}, w}
	}
	return &cancelBody{body, cancel}
}
