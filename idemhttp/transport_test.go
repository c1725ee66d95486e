package idemhttp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// attempt is what the test server saw of one request.
type attempt struct {
	method string
	key    string
	body   string
	at     time.Time
}

// script is a test server that answers attempt i with answers[i] (the last
// answer repeats) and records every attempt.
type script struct {
	mu       sync.Mutex
	attempts []attempt
	answers  []func(w http.ResponseWriter, r *http.Request)
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.attempts)
	s.attempts = append(s.attempts, attempt{r.Method, r.Header.Get(idemhttp.HeaderKey), string(body), time.Now()})
	answer := s.answers[min(n, len(s.answers)-1)]
	s.mu.Unlock()
	answer(w, r)
}

func (s *script) seen() []attempt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attempt(nil), s.attempts...)
}

func status(code int, header ...string) func(w http.ResponseWriter, r *http.Request) {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}
}

// hangUp closes the connection without an answer: a network error.
func hangUp(w http.ResponseWriter, r *http.Request) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func serve(t *testing.T, answers ...func(w http.ResponseWriter, r *http.Request)) (*script, *httptest.Server) {
	t.Helper()
	s := &script{answers: answers}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

// fast is a Transport with short waits, for tests.
func fast(maxAttempts int) *http.Client {
	return &http.Client{Transport: &idemhttp.Transport{MaxAttempts: maxAttempts, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestTransportSameKeyAndBodyOnEveryRetry(t *testing.T) {
	s, srv := serve(t, hangUp, status(503), status(502), status(504), status(429), status(409), status(201))
	const body = `{"customer":4711,"item":88}`
	resp, err := fast(10).Post(srv.URL+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("final status %d, want 201", resp.StatusCode)
	}
	seen := s.seen()
	if len(seen) != 7 {
		t.Fatalf("%d attempts, want 7 (one per scripted answer)", len(seen))
	}
	if !uuidV4.MatchString(seen[0].key) {
		t.Errorf("key %q is not a version 4 UUID", seen[0].key)
	}
	for i, a := range seen {
		if a.key != seen[0].key || a.body != body {
			t.Errorf("attempt %d: key %q body %q, want key %q body %q", i, a.key, a.body, seen[0].key, body)
		}
	}
}

func TestTransportNewKeyPerIntention(t *testing.T) {
	s, srv := serve(t, status(201))
	client := fast(3)
	for range 2 {
		resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if seen := s.seen(); len(seen) != 2 || seen[0].key == seen[1].key {
		t.Errorf("two intentions sent %+v, want two different keys", seen)
	}
}

// bodyOnly hides everything but Read and Close, so the request has no
// GetBody and the Transport must buffer it.
type bodyOnly struct{ io.Reader }

func (bodyOnly) Close() error { return nil }

func TestTransportKeepsCallerKeyAndBuffersBodyWithoutGetBody(t *testing.T) {
	s, srv := serve(t, status(503), hangUp, status(200))
	req, err := http.NewRequest(http.MethodPatch, srv.URL, bodyOnly{strings.NewReader("patch body")})
	if err != nil {
		t.Fatal(err)
	}
	if req.GetBody != nil {
		t.Fatal("test request has GetBody")
	}
	req.Header.Set(idemhttp.HeaderKey, "caller-key-1")
	resp, err := fast(5).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := s.seen()
	if len(seen) != 3 {
		t.Fatalf("%d attempts, want 3", len(seen))
	}
	for i, a := range seen {
		if a.key != "caller-key-1" || a.body != "patch body" {
			t.Errorf("attempt %d: key %q body %q, want the caller's key and the same body", i, a.key, a.body)
		}
	}
	if req.Header.Get(idemhttp.HeaderKey) != "caller-key-1" || len(req.Header) != 1 {
		t.Errorf("the caller's request was changed: %v", req.Header)
	}
}

func TestTransportSafeMethodsGetNoKey(t *testing.T) {
	s, srv := serve(t, status(503), status(200))
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions} {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := fast(3).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	seen := s.seen()
	if len(seen) != 4 { // the GET retried once after the 503
		t.Fatalf("%d attempts, want 4", len(seen))
	}
	for _, a := range seen {
		if a.key != "" {
			t.Errorf("%s carried key %q, want none", a.method, a.key)
		}
	}
	for _, method := range []string{http.MethodPut, http.MethodDelete, http.MethodPost} {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := fast(3).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, a := range s.seen()[4:] {
		if !uuidV4.MatchString(a.key) {
			t.Errorf("%s carried key %q, want a fresh key", a.method, a.key)
		}
	}
}

func TestTransportNeverRetriesFinalStatuses(t *testing.T) {
	for _, code := range []int{400, 401, 403, 404, 413, 422, 500, 501} {
		s, srv := serve(t, status(code), status(201))
		resp, err := fast(5).Post(srv.URL, "text/plain", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if n := len(s.seen()); n != 1 || resp.StatusCode != code || string(body) != http.StatusText(code) {
			t.Errorf("%d: %d attempts, got %d %q; want 1 attempt and the %d returned", code, n, resp.StatusCode, body, code)
		}
	}
}

func TestTransportReplayedAnswerIsFinal(t *testing.T) {
	// A handler's own 409, stored and replayed, will not change.
	s, srv := serve(t, status(409, idemhttp.HeaderReplayed, "true"), status(201))
	resp, err := fast(5).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := len(s.seen()); n != 1 || resp.StatusCode != 409 {
		t.Errorf("%d attempts, final %d; want the replayed 409 after 1 attempt", n, resp.StatusCode)
	}
}

// TestTransportHandlerConflictIsFinal: behind the middleware (its answers
// carry Idempotency-Retention) a 409 without Retry-After is the handler's
// own answer, stored or not, and is not asked again; the middleware's
// in-flight 409, with Retry-After, is.
func TestTransportHandlerConflictIsFinal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    func(http.ResponseWriter, *http.Request)
		attempts int
		final    int
	}{
		{"handler's 409", status(409, idemhttp.HeaderRetention, "86400"), 1, 409},
		{"in-flight 409", status(409, idemhttp.HeaderRetention, "86400", "Retry-After", "0"), 2, 201},
		{"409 from elsewhere", status(409), 2, 201},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := serve(t, tc.first, status(201))
			resp, err := fast(5).Post(srv.URL, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if n := len(s.seen()); n != tc.attempts || resp.StatusCode != tc.final {
				t.Errorf("%d attempts, final %d; want %d, %d", n, resp.StatusCode, tc.attempts, tc.final)
			}
		})
	}
}

func TestTransportAttemptsBounded(t *testing.T) {
	s, srv := serve(t, status(503))
	resp, err := fast(3).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := len(s.seen()); n != 3 || resp.StatusCode != 503 || string(body) != "Service Unavailable" {
		t.Errorf("%d attempts, final %d %q; want 3 and the last 503 with its body", n, resp.StatusCode, body)
	}

	s, srv = serve(t, hangUp)
	_, err = fast(4).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err == nil || !strings.Contains(err.Error(), "abandoned after 4 attempts") {
		t.Errorf("network errors every time: %v, want an error after 4 attempts", err)
	}
	if n := len(s.seen()); n < 4 {
		t.Errorf("%d attempts reached the server, want at least 4", n)
	}
}

func TestTransportHonoursRetryAfter(t *testing.T) {
	client := &http.Client{Transport: &idemhttp.Transport{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Second}}

	s, srv := serve(t, status(503, "Retry-After", "1"), status(201))
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := s.seen()
	if len(seen) != 2 {
		t.Fatalf("%d attempts, want 2", len(seen))
	}
	if gap := seen[1].at.Sub(seen[0].at); gap < 950*time.Millisecond || gap > 3*time.Second {
		t.Errorf("Retry-After: 1 (seconds): retried after %v, want about 1s", gap)
	}

	date := time.Now().Add(2 * time.Second).UTC().Truncate(time.Second)
	s, srv = serve(t, status(429, "Retry-After", date.Format(http.TimeFormat)), status(201))
	resp, err = client.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen = s.seen()
	if len(seen) != 2 {
		t.Fatalf("%d attempts, want 2", len(seen))
	}
	if seen[1].at.Before(date.Add(-50*time.Millisecond)) || seen[1].at.After(date.Add(2*time.Second)) {
		t.Errorf("Retry-After: %s (HTTP date): retried at %v, want at that time", date.Format(http.TimeFormat), seen[1].at)
	}

	// MaxDelay caps a long Retry-After.
	_, srv = serve(t, status(503, "Retry-After", "3600"), status(201))
	start := time.Now()
	resp, err = fast(3).Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if elapsed := time.Since(start); resp.StatusCode != 201 || elapsed > 2*time.Second {
		t.Errorf("Retry-After: 3600 with MaxDelay 20ms: %d after %v, want 201 quickly", resp.StatusCode, elapsed)
	}
}

func TestTransportBackoffGrowsAndIsCapped(t *testing.T) {
	s, srv := serve(t, status(503), status(503), status(503), status(503), status(503), status(201))
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 6, BaseDelay: 20 * time.Millisecond, MaxDelay: 80 * time.Millisecond}}
	resp, err := client.Post(srv.URL, "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	seen := s.seen()
	if len(seen) != 6 {
		t.Fatalf("%d attempts, want 6", len(seen))
	}
	// Steps 20, 40, 80, 80, 80 ms, each jittered to between half and all.
	for i, step := range []time.Duration{20, 40, 80, 80, 80} {
		step *= time.Millisecond
		if gap := seen[i+1].at.Sub(seen[i].at); gap < step/2 || gap > step+time.Second {
			t.Errorf("wait %d: %v, want between %v and about %v", i+1, gap, step/2, step)
		}
	}
}

func TestTransportContextStopsRetries(t *testing.T) {
	s, srv := serve(t, status(503, "Retry-After", "30"))
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 100, MaxDelay: time.Minute}}
	start := time.Now()
	_, err := client.Do(req)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want the context's deadline", err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("returned after %v, want soon after the 200ms deadline", elapsed)
	}
	if n := len(s.seen()); n != 1 {
		t.Errorf("%d attempts, want 1 (then waiting on Retry-After when the context ended)", n)
	}
}

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := idemhttp.NewKey()
		if !uuidV4.MatchString(k) || seen[k] {
			t.Fatalf("NewKey() = %q: not a fresh version 4 UUID", k)
		}
		seen[k] = true
	}
}

// TestTransportBodyClosed: the caller's body is closed, retried or not.
func TestTransportBodyClosed(t *testing.T) {
	_, srv := serve(t, status(503), status(201))
	for _, withGetBody := range []bool{true, false} {
		body := &closeCounter{Reader: bytes.NewReader([]byte("x"))}
		req, _ := http.NewRequest(http.MethodPost, srv.URL, body)
		if withGetBody {
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader("x")), nil }
		}
		resp, err := fast(3).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if body.closed.Load() == 0 {
			t.Errorf("GetBody set: %v: the caller's body was never closed", withGetBody)
		}
	}
}

type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestTransportNilHeader: a request built without a Header gets a key and
// is sent, instead of panicking.
func TestTransportNilHeader(t *testing.T) {
	s, srv := serve(t, status(201))
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = nil // http.Client would fill it in; a RoundTripper is called directly too
	resp, err := (&idemhttp.Transport{}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if seen := s.seen(); len(seen) != 1 || !uuidV4.MatchString(seen[0].key) {
		t.Fatalf("attempts %+v, want one with a fresh key", seen)
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// roundTripFunc is a RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestTransportBoundsBufferedBody: a body without GetBody is held in memory
// only up to MaxBufferedBody; a longer one is streamed in one attempt that
// is not retried, and no more than the bound was read before it was sent.
func TestTransportBoundsBufferedBody(t *testing.T) {
	const limit = 16
	for _, tc := range []struct {
		name     string
		size     int
		attempts int
	}{
		{"at the bound: buffered and retried", limit, 3},
		{"over the bound: streamed once", limit + 1, 1},
		{"far over the bound: streamed once", 1 << 20, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := serve(t, status(503))
			payload := strings.Repeat("b", tc.size)
			src := &countingReader{r: strings.NewReader(payload)}
			var readBeforeFirstSend int64 = -1
			client := &http.Client{Transport: &idemhttp.Transport{
				MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, MaxBufferedBody: limit,
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					if readBeforeFirstSend < 0 {
						readBeforeFirstSend = src.n.Load()
					}
					return http.DefaultTransport.RoundTrip(r)
				}),
			}}
			req, err := http.NewRequest(http.MethodPost, srv.URL, io.NopCloser(src)) // no GetBody
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			seen := s.seen()
			if len(seen) != tc.attempts || resp.StatusCode != 503 {
				t.Fatalf("%d attempts, final %d; want %d and the 503", len(seen), resp.StatusCode, tc.attempts)
			}
			for i, a := range seen {
				if a.body != payload {
					t.Errorf("attempt %d carried %d bytes, want all %d", i, len(a.body), len(payload))
				}
			}
			if readBeforeFirstSend > limit+1 {
				t.Errorf("%d bytes read before the first attempt, want at most %d", readBeforeFirstSend, limit+1)
			}
		})
	}
}

// TestTransportRetriesOnlyWhatCanChange: errors a retry cannot fix are
// returned after one attempt; transient network errors are retried.
func TestTransportRetriesOnlyWhatCanChange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		attempts int
	}{
		{"malformed request", errors.New("net/http: invalid header field name"), 1},
		{"host does not exist", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "nowhere.invalid", IsNotFound: true}}, 1},
		{"temporary DNS failure", &net.OpError{Op: "dial", Err: &net.DNSError{Err: "server misbehaving", Name: "api.example", IsTemporary: true}}, 3},
		{"certificate rejected", &tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}, 1},
		{"connection refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, 3},
		{"connection reset", &net.OpError{Op: "read", Err: syscall.ECONNRESET}, 3},
		{"answer cut short", io.ErrUnexpectedEOF, 3},
		// net/http's own error, unexported: the server closed the
		// keep-alive connection the request went out on.
		{"server closed the idle connection", errors.New("http: server closed idle connection"), 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var calls atomic.Int64
			client := &http.Client{Transport: &idemhttp.Transport{
				MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
				Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
					calls.Add(1)
					return nil, tc.err
				}),
			}}
			_, err := client.Post("http://127.0.0.1:1/orders", "text/plain", strings.NewReader("x"))
			if err == nil || calls.Load() != int64(tc.attempts) {
				t.Fatalf("%d attempts (%v), want %d", calls.Load(), err, tc.attempts)
			}
		})
	}
	// An unsupported scheme, through the real transport.
	var calls atomic.Int64
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3, BaseDelay: time.Millisecond,
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls.Add(1)
			return http.DefaultTransport.RoundTrip(r)
		})}}
	req, err := http.NewRequest(http.MethodPost, "gopher://127.0.0.1/orders", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Transport.RoundTrip(req); err == nil || calls.Load() != 1 {
		t.Fatalf("unsupported scheme: %d attempts (%v), want 1", calls.Load(), err)
	}
}
