package idemhttp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// abandoned returns the *AbandonedError inside err, failing the test when
// there is none.
func abandoned(t *testing.T, err error) *idemhttp.AbandonedError {
	t.Helper()
	var ab *idemhttp.AbandonedError
	if !errors.As(err, &ab) {
		t.Fatalf("err = %v (%T), want an *idemhttp.AbandonedError inside", err, err)
	}
	return ab
}

// TestTransportExhaustedStatusReturnsLastResponse: attempts that run out on
// a retryable status return the last response, body intact and no error,
// and its Request carries the key, even from a Base that sets no Request.
func TestTransportExhaustedStatusReturnsLastResponse(t *testing.T) {
	for _, tc := range []struct {
		name string
		base func(http.RoundTripper) http.RoundTripper
	}{
		{"net/http", func(rt http.RoundTripper) http.RoundTripper { return rt }},
		{"a Base that sets no Request", func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if resp != nil {
					resp.Request = nil
				}
				return resp, err
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := serve(t, status(503, "Retry-After", "0"))
			client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3, BaseDelay: time.Millisecond, Base: tc.base(http.DefaultTransport)}}
			resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatalf("err = %v, want the last 503", err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 503 || string(body) != "Service Unavailable" {
				t.Fatalf("got %d %q (%v), want the last 503 with its body", resp.StatusCode, body, err)
			}
			seen := s.seen()
			if len(seen) != 3 {
				t.Fatalf("%d attempts, want 3", len(seen))
			}
			if resp.Request == nil {
				t.Fatal("resp.Request is nil: the caller cannot find the key")
			}
			if got := resp.Request.Header.Get(idemhttp.HeaderKey); got != seen[0].key {
				t.Errorf("resp.Request carries key %q, want the one sent, %q", got, seen[0].key)
			}
		})
	}
}

// TestTransportExhaustedErrorsAbandoned: attempts that run out on network
// errors give an *AbandonedError with the key, the attempts, status 0 and
// the last error, through the *url.Error of http.Client.
func TestTransportExhaustedErrorsAbandoned(t *testing.T) {
	s, srv := serve(t, hangUp)
	_, err := fast(4).Post(srv.URL+"/orders", "text/plain", strings.NewReader("x"))
	var uerr *url.Error
	if !errors.As(err, &uerr) {
		t.Fatalf("err = %v (%T), want a *url.Error from http.Client", err, err)
	}
	ab := abandoned(t, err)
	seen := s.seen()
	if len(seen) == 0 || ab.Key != seen[0].key || !uuidV4.MatchString(ab.Key) {
		t.Fatalf("Key %q, want the key the server saw (%+v)", ab.Key, seen)
	}
	if ab.Attempts != 4 || ab.Status != 0 || ab.Err == nil {
		t.Errorf("Attempts %d Status %d Err %v, want 4, 0 and the last network error", ab.Attempts, ab.Status, ab.Err)
	}
	if !errors.Is(err, ab.Err) || errors.Unwrap(ab) != ab.Err {
		t.Errorf("the last error %v is not reachable from %v", ab.Err, err)
	}
	if !strings.Contains(err.Error(), ab.Key) || !strings.Contains(err.Error(), "POST") {
		t.Errorf("message %q names neither the method nor the key", err)
	}
}

// TestTransportFinalErrorAbandoned: an error a retry cannot fix, on the
// first attempt, is an *AbandonedError too, and the cause stays reachable.
func TestTransportFinalErrorAbandoned(t *testing.T) {
	certErr := &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}
	client := &http.Client{Transport: &idemhttp.Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return nil, certErr
	})}}
	req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:1/orders", strings.NewReader("x"))
	req.Header.Set(idemhttp.HeaderKey, "order-7")
	_, err := client.Do(req)
	ab := abandoned(t, err)
	var ce *tls.CertificateVerificationError
	if ab.Key != "order-7" || ab.Attempts != 1 || !errors.As(err, &ce) {
		t.Errorf("Key %q Attempts %d (%v), want the caller's key after 1 attempt, the certificate error reachable", ab.Key, ab.Attempts, err)
	}
}

// TestTransportContextEndsBetweenAttempts: the context ending while the
// Transport waits gives an *AbandonedError with the key and the last
// status or error, wrapping ctx.Err().
func TestTransportContextEndsBetweenAttempts(t *testing.T) {
	t.Run("deadline after a 503", func(t *testing.T) {
		s, srv := serve(t, status(503, "Retry-After", "30"))
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
		client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 10, MaxDelay: time.Minute}}
		_, err := client.Do(req)
		ab := abandoned(t, err)
		seen := s.seen()
		if len(seen) != 1 || ab.Key != seen[0].key || ab.Attempts != 1 || ab.Status != 503 {
			t.Errorf("Key %q Attempts %d Status %d after %d attempts, want the key sent, 1 and 503", ab.Key, ab.Attempts, ab.Status, len(seen))
		}
		if !errors.Is(ab.Err, context.DeadlineExceeded) {
			t.Errorf("Err = %v, want it to wrap the context's error", ab.Err)
		}
	})
	t.Run("cancelled after a network error", func(t *testing.T) {
		_, srv := serve(t, hangUp)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, strings.NewReader("x"))
		req.Header.Set(idemhttp.HeaderKey, "put-1")
		client := &http.Client{Transport: &idemhttp.Transport{
			MaxAttempts: 10, BaseDelay: 10 * time.Second, MaxDelay: time.Minute,
			OnRetry: func(idemhttp.RetryEvent) { cancel() }, // cancel as the wait begins
		}}
		_, err := client.Do(req)
		ab := abandoned(t, err)
		if ab.Key != "put-1" || ab.Attempts != 1 || ab.Status != 0 {
			t.Errorf("Key %q Attempts %d Status %d, want put-1, 1 and 0", ab.Key, ab.Attempts, ab.Status)
		}
		if !errors.Is(err, context.Canceled) || !errors.Is(err, io.EOF) {
			t.Errorf("err = %v, want context.Canceled and the last attempt's error", err)
		}
	})
}

// TestTransportResumeWithKey: the key of an abandoned intention, set on a
// new request, is the key the server sees again.
func TestTransportResumeWithKey(t *testing.T) {
	s, srv := serve(t, hangUp, hangUp, status(201))
	_, err := fast(2).Post(srv.URL, "application/json", strings.NewReader(`{"item":88}`))
	ab := abandoned(t, err)

	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(`{"item":88}`))
	req.Header.Set(idemhttp.HeaderKey, ab.Key)
	resp, err := fast(2).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := s.seen()
	if resp.StatusCode != 201 || len(seen) != 3 {
		t.Fatalf("resumed: %d after %d attempts, want 201 after 3", resp.StatusCode, len(seen))
	}
	for i, a := range seen {
		if a.key != ab.Key {
			t.Errorf("attempt %d carried key %q, want the abandoned intention's %q", i, a.key, ab.Key)
		}
	}
}

// TestTransportAttemptTimeout: an attempt that hangs is abandoned after
// AttemptTimeout and retried with the same key; attempts that keep hanging
// end in an *AbandonedError that is a timeout.
func TestTransportAttemptTimeout(t *testing.T) {
	hang := func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	}
	t.Run("retried", func(t *testing.T) {
		s, srv := serve(t, hang, status(201))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
		client := &http.Client{Transport: &idemhttp.Transport{AttemptTimeout: 100 * time.Millisecond, BaseDelay: time.Millisecond}}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("err = %v, want the second attempt's 201", err)
		}
		resp.Body.Close()
		seen := s.seen()
		if resp.StatusCode != 201 || len(seen) != 2 || seen[0].key != seen[1].key {
			t.Errorf("%d after attempts %+v, want 201 after 2 with one key", resp.StatusCode, seen)
		}
	})
	t.Run("exhausted", func(t *testing.T) {
		s, srv := serve(t, hang)
		client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 2, AttemptTimeout: 50 * time.Millisecond, BaseDelay: time.Millisecond}}
		start := time.Now()
		_, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
		ab := abandoned(t, err)
		if ab.Attempts != 2 || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Attempts %d, err %v, want 2 attempts that timed out", ab.Attempts, err)
		}
		var uerr *url.Error
		if !errors.As(err, &uerr) || !uerr.Timeout() {
			t.Errorf("url.Error.Timeout() is false for %v", err)
		}
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Errorf("took %v, want about 2 x 50ms", elapsed)
		}
		if n := len(s.seen()); n != 2 {
			t.Errorf("%d attempts reached the server, want 2", n)
		}
	})
}

// TestTransportAttemptTimeoutSlowBody: the body of an answer whose headers
// came within AttemptTimeout stays readable after RoundTrip returned, even
// past the timeout, and closing it ends the attempt's context.
func TestTransportAttemptTimeoutSlowBody(t *testing.T) {
	_, srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "first half,")
		http.NewResponseController(w).Flush()
		time.Sleep(250 * time.Millisecond)
		io.WriteString(w, " second half")
	})
	var (
		mu      sync.Mutex
		attempt context.Context
	)
	client := &http.Client{Transport: &idemhttp.Transport{
		AttemptTimeout: 100 * time.Millisecond,
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			attempt = r.Context()
			mu.Unlock()
			return http.DefaultTransport.RoundTrip(r)
		}),
	}}
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || string(body) != "first half, second half" {
		t.Fatalf("body %q (%v), want all of it, read after RoundTrip returned", body, err)
	}
	mu.Lock()
	actx := attempt
	mu.Unlock()
	if actx.Err() != nil {
		t.Fatalf("the attempt's context ended (%v) before the body was closed", actx.Err())
	}
	resp.Body.Close()
	select {
	case <-actx.Done():
	case <-time.After(time.Second):
		t.Error("closing the body did not end the attempt's context")
	}
}

// TestTransportRetryPolicy: Transport.Retry replaces the default rule, is
// asked with the caller's request, and can leave an application's 409 and
// GETs alone while the middleware's in-flight 409 is still retried.
func TestTransportRetryPolicy(t *testing.T) {
	var asked []string
	var mu sync.Mutex
	policy := func(req *http.Request, resp *http.Response, err error) bool {
		mu.Lock()
		asked = append(asked, req.Method)
		mu.Unlock()
		if req.Method == http.MethodGet {
			return false
		}
		if resp != nil && resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") == "" {
			return false
		}
		return idemhttp.DefaultRetry(req, resp, err)
	}
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3, BaseDelay: time.Millisecond, Retry: policy}}
	for _, tc := range []struct {
		name     string
		method   string
		answers  []func(http.ResponseWriter, *http.Request)
		attempts int
		final    int
	}{
		{"application 409: final", http.MethodPost, []func(http.ResponseWriter, *http.Request){status(409), status(201)}, 1, 409},
		{"in-flight 409: retried", http.MethodPost, []func(http.ResponseWriter, *http.Request){status(409, "Retry-After", "0"), status(201)}, 2, 201},
		{"GET 503: final", http.MethodGet, []func(http.ResponseWriter, *http.Request){status(503), status(200)}, 1, 503},
		{"POST 503: retried", http.MethodPost, []func(http.ResponseWriter, *http.Request){status(503), status(201)}, 2, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := serve(t, tc.answers...)
			req, _ := http.NewRequest(tc.method, srv.URL, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if n := len(s.seen()); n != tc.attempts || resp.StatusCode != tc.final {
				t.Errorf("%d attempts, final %d; want %d and %d", n, resp.StatusCode, tc.attempts, tc.final)
			}
		})
	}
	if len(asked) == 0 || asked[0] != http.MethodPost {
		t.Errorf("policy asked with methods %v, want the caller's", asked)
	}
}

// TestTransportOnRetry: OnRetry is called before every wait with the
// failed attempt's number, the key, its status or error and the delay.
func TestTransportOnRetry(t *testing.T) {
	s, srv := serve(t, status(503, "Retry-After", "0"), status(201))
	var events []idemhttp.RetryEvent
	calls := 0
	client := &http.Client{Transport: &idemhttp.Transport{
		BaseDelay: 5 * time.Millisecond, MaxDelay: 20 * time.Millisecond,
		OnRetry: func(e idemhttp.RetryEvent) { events = append(events, e) },
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if calls++; calls == 2 {
				return nil, syscall.ECONNRESET // the second attempt: a reset connection
			}
			return http.DefaultTransport.RoundTrip(r)
		}),
	}}
	resp, err := client.Post(srv.URL+"/orders", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := s.seen()
	if len(events) != 2 || calls != 3 || len(seen) != 2 {
		t.Fatalf("%d events for %d attempts (%d at the server), want 2 for 3 (2)", len(events), calls, len(seen))
	}
	for i, e := range events {
		if e.Attempt != i+1 || e.Key != seen[0].key || e.Request == nil || e.Request.Method != http.MethodPost {
			t.Errorf("event %d: attempt %d key %q request %v, want attempt %d, key %q and the caller's POST", i, e.Attempt, e.Key, e.Request, i+1, seen[0].key)
		}
	}
	if e := events[0]; e.Status != 503 || e.Err != nil || e.Delay != 0 {
		t.Errorf("first event: status %d err %v delay %v, want 503, no error and Retry-After's 0", e.Status, e.Err, e.Delay)
	}
	if e := events[1]; e.Status != 0 || !errors.Is(e.Err, syscall.ECONNRESET) || e.Delay < 5*time.Millisecond || e.Delay > 10*time.Millisecond {
		t.Errorf("second event: status %d err %v delay %v, want 0, the reset and a 5-10ms backoff", e.Status, e.Err, e.Delay)
	}
}

// rwBody is a response body that can also be written, as net/http's is
// for 101 Switching Protocols.
type rwBody struct {
	io.Reader
	written strings.Builder
}

func (b *rwBody) Write(p []byte) (int, error) { return b.written.Write(p) }
func (b *rwBody) Close() error                { return nil }

// TestTransportAttemptTimeoutKeepsWritableBody: with AttemptTimeout the
// body is wrapped (to end the attempt on Close) without hiding io.Writer.
func TestTransportAttemptTimeoutKeepsWritableBody(t *testing.T) {
	body := &rwBody{Reader: strings.NewReader("")}
	tr := &idemhttp.Transport{AttemptTimeout: time.Second, Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{}, Body: body, Request: r}, nil
	})}
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:1/ws", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	w, ok := resp.Body.(io.Writer)
	if !ok {
		t.Fatalf("the 101 body %T is no longer an io.Writer", resp.Body)
	}
	if _, err := io.WriteString(w, "hello"); err != nil || body.written.String() != "hello" {
		t.Errorf("write through the body: %v, %q", err, body.written.String())
	}
}
