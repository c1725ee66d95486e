package idemhttp_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Secrets of the test's senders, and the header each signs with.
var (
	stripeSecret = []byte("stripe-secret")
	githubSecret = []byte("github-secret")
)

const sigHeader = "X-Signature"

// sign is the test senders' signature: hex HMAC-SHA256 of the body.
func sign(secret []byte, body string) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(body))
	return hex.EncodeToString(mac.Sum(nil))
}

// verifyWith checks sign's signature in sigHeader.
func verifyWith(secret []byte) idemhttp.VerifyFunc {
	return func(r *http.Request, body []byte) error {
		got, err := hex.DecodeString(r.Header.Get(sigHeader))
		if err != nil || len(got) == 0 {
			return errors.New("no signature")
		}
		mac := hmac.New(sha256.New, secret)
		mac.Write(body)
		if !hmac.Equal(got, mac.Sum(nil)) {
			return errors.New("signature does not match")
		}
		return nil
	}
}

// webhookServer is a mux with two webhook senders and one API route on
// one store: "stripe" (key: the body's "id"), "github" (key: the
// X-GitHub-Delivery header), and "/orders" with the Idempotency-Key
// header. Every handler counts its runs, reads its whole body, and fails
// (500) when the body says "fail".
type webhookServer struct {
	store *idem.Store[*sql.Tx]
	mux   *http.ServeMux
	mu    sync.Mutex
	runs  map[string]int // by path
	// bodies the handlers read, by path.
	bodies map[string][]string
}

func newWebhookServer(t *testing.T, stripeCfg, githubCfg idemhttp.Config) *webhookServer {
	t.Helper()
	s := &webhookServer{store: newStore(t), mux: http.NewServeMux(), runs: map[string]int{}, bodies: map[string][]string{}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("handler: read body: %v", err)
		}
		s.mu.Lock()
		s.runs[r.URL.Path]++
		n := s.runs[r.URL.Path]
		s.bodies[r.URL.Path] = append(s.bodies[r.URL.Path], string(body))
		s.mu.Unlock()
		if strings.Contains(string(body), "fail") {
			idemhttp.Fail(w, r, errors.New("the handler failed"))
			return
		}
		fmt.Fprintf(w, "run %d", n)
	})
	quiet := slog.New(slog.DiscardHandler)
	for _, ep := range []struct {
		pattern string
		cfg     idemhttp.Config
	}{
		{"POST /webhooks/stripe", stripeCfg},
		{"POST /webhooks/github", githubCfg},
		{"POST /orders", idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }}},
	} {
		if ep.cfg.Logger == nil {
			ep.cfg.Logger = quiet
		}
		mw, err := idemhttp.New(s.store, ep.cfg)
		if err != nil {
			t.Fatal(err)
		}
		s.mux.Handle(ep.pattern, mw.Wrap(handler))
	}
	return s
}

// Configs of the two senders as the docs recommend them.
func stripeConfig() idemhttp.Config {
	return idemhttp.Config{
		Principal:   func(*http.Request) string { return "webhook:stripe" },
		Key:         idemhttp.JSONKeyFunc("id"),
		Verify:      verifyWith(stripeSecret),
		Fingerprint: idemhttp.TargetFingerprint,
	}
}

func githubConfig() idemhttp.Config {
	return idemhttp.Config{
		Principal:   func(*http.Request) string { return "webhook:github" },
		Key:         idemhttp.HeaderKeyFunc("X-GitHub-Delivery"),
		Verify:      verifyWith(githubSecret),
		Fingerprint: idemhttp.TargetFingerprint,
	}
}

// delivery is one request to a webhookServer and what it must get.
type delivery struct {
	path    string // "/webhooks/stripe", "/webhooks/github", "/orders"
	header  map[string]string
	body    string
	secret  []byte // signs the body; nil: no signature
	status  int
	code    string // the problem's code; "" for the handler's answer
	replay  bool   // Idempotent-Replayed: true
	ran     bool   // the handler ran for it
	records int64  // records in the store after it
}

func (s *webhookServer) send(t *testing.T, i int, d delivery) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, d.path, strings.NewReader(d.body))
	for k, v := range d.header {
		req.Header.Set(k, v)
	}
	if d.secret != nil {
		req.Header.Set(sigHeader, sign(d.secret, d.body))
	}
	s.mu.Lock()
	before := s.runs[d.path]
	s.mu.Unlock()
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, req)

	var p struct{ Code string }
	if rec.Header().Get("Content-Type") == "application/problem+json" {
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("delivery %d: problem body %q: %v", i, rec.Body, err)
		}
	}
	if rec.Code != d.status || p.Code != d.code {
		t.Errorf("delivery %d to %s: %d %q (%s), want %d %q", i, d.path, rec.Code, p.Code, strings.TrimSpace(rec.Body.String()), d.status, d.code)
	}
	if got := rec.Header().Get(idemhttp.HeaderReplayed) == "true"; got != d.replay {
		t.Errorf("delivery %d: replayed %v, want %v", i, got, d.replay)
	}
	s.mu.Lock()
	ran := s.runs[d.path] > before
	seen := s.bodies[d.path]
	s.mu.Unlock()
	if ran != d.ran {
		t.Errorf("delivery %d: handler ran %v, want %v", i, ran, d.ran)
	}
	if ran && seen[len(seen)-1] != d.body {
		t.Errorf("delivery %d: the handler read the body %q, want %q", i, seen[len(seen)-1], d.body)
	}
	counts, err := s.store.Counts(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := counts.Total(); got != d.records {
		t.Errorf("delivery %d: %d records in the store, want %d", i, got, d.records)
	}
}

// TestWebhooks drives the senders through deliveries, redeliveries,
// forgeries and malformed requests. A request that is refused (no key, a
// bad key, a bad signature, a body too large) claims nothing: the count of
// records stays, the handler does not run, and the genuine delivery with
// the same id is served afterwards as if the refused one had never come.
func TestWebhooks(t *testing.T) {
	stripe := func(body string, secret []byte) delivery {
		return delivery{path: "/webhooks/stripe", body: body, secret: secret}
	}
	github := func(id, body string, secret []byte) delivery {
		d := delivery{path: "/webhooks/github", body: body, secret: secret, header: map[string]string{}}
		if id != "" {
			d.header["X-GitHub-Delivery"] = id
		}
		return d
	}
	ok := func(d delivery, records int64) delivery {
		d.status, d.ran, d.records = http.StatusOK, true, records
		return d
	}
	replay := func(d delivery, records int64) delivery {
		d.status, d.replay, d.records = http.StatusOK, true, records
		return d
	}
	refused := func(d delivery, status int, code string, records int64) delivery {
		d.status, d.code, d.records = status, code, records
		return d
	}
	failed := func(d delivery, records int64) delivery {
		d.status, d.code, d.ran, d.records = http.StatusInternalServerError, "handler-failed", true, records
		return d
	}
	evt := `{"id":"evt_1","type":"invoice.paid"}`
	for _, tc := range []struct {
		name   string
		stripe func(*idemhttp.Config) // changes to stripeConfig
		steps  []delivery
	}{
		{name: "key from a header", steps: []delivery{
			ok(github("d-1", `{}`, githubSecret), 1),
		}},
		{name: "key from a body field", steps: []delivery{
			ok(stripe(evt, stripeSecret), 1),
		}},
		{name: "redelivery is a replay; the handler runs once", steps: []delivery{
			ok(stripe(evt, stripeSecret), 1),
			replay(stripe(evt, stripeSecret), 1),
			ok(github("d-1", `{}`, githubSecret), 2),
			replay(github("d-1", `{}`, githubSecret), 2),
			replay(github("d-1", `{}`, githubSecret), 2),
		}},
		{name: "a redelivery with other bytes is a replay under TargetFingerprint", steps: []delivery{
			ok(stripe(`{"id":"evt_1","attempt":1}`, stripeSecret), 1),
			replay(stripe(`{"id":"evt_1","attempt":2}`, stripeSecret), 1),
		}},
		{name: "a redelivery with other bytes is a mismatch under DefaultFingerprint",
			stripe: func(c *idemhttp.Config) { c.Fingerprint = nil },
			steps: []delivery{
				ok(stripe(`{"id":"evt_1","attempt":1}`, stripeSecret), 1),
				refused(stripe(`{"id":"evt_1","attempt":2}`, stripeSecret), http.StatusUnprocessableEntity, "key-mismatch", 1),
			}},
		{name: "missing header key: 400, nothing claimed", steps: []delivery{
			refused(github("", `{}`, githubSecret), http.StatusBadRequest, "key-missing", 0),
		}},
		{name: "missing body key: 400, nothing claimed", steps: []delivery{
			refused(stripe(`{"type":"invoice.paid"}`, stripeSecret), http.StatusBadRequest, "key-missing", 0),
			refused(stripe(`{"id":null}`, stripeSecret), http.StatusBadRequest, "key-missing", 0),
		}},
		{name: "invalid keys: 400, nothing claimed", steps: []delivery{
			refused(stripe(`{"id":""}`, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			refused(stripe(`{"id":"`+strings.Repeat("e", idem.MaxKeyBytes+1)+`"}`, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			refused(stripe(`{"id":"evt\u00e9"}`, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			refused(stripe(`{"id":{"nested":1}}`, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			refused(github("d\x01", `{}`, githubSecret), http.StatusBadRequest, "key-invalid", 0),
		}},
		{name: "JSON key from a body that is not JSON: 400, nothing claimed", steps: []delivery{
			refused(stripe(`id=evt_1`, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			refused(stripe(`["evt_1"]`, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			refused(stripe(``, stripeSecret), http.StatusBadRequest, "key-invalid", 0),
			ok(stripe(evt, stripeSecret), 1),
		}},
		{name: "JSON key from a body over MaxRequestBody: 413, nothing claimed",
			stripe: func(c *idemhttp.Config) { c.MaxRequestBody = int64(len(evt)) },
			steps: []delivery{
				refused(stripe(`{"id":"evt_1","type":"invoice.paid","more":1}`, stripeSecret), http.StatusRequestEntityTooLarge, "body-too-large", 0),
				ok(stripe(evt, stripeSecret), 1),
			}},
		{name: "bad signature: 401, nothing claimed; the genuine delivery then runs and is stored", steps: []delivery{
			refused(stripe(evt, []byte("guessed")), http.StatusUnauthorized, "unverified", 0),
			refused(stripe(evt, nil), http.StatusUnauthorized, "unverified", 0),
			refused(github("d-1", `{}`, stripeSecret), http.StatusUnauthorized, "unverified", 0),
			ok(stripe(evt, stripeSecret), 1),
			replay(stripe(evt, stripeSecret), 1),
			ok(github("d-1", `{}`, githubSecret), 2),
		}},
		{name: "a forged request after the delivery gets 401, not the stored answer", steps: []delivery{
			ok(stripe(evt, stripeSecret), 1),
			refused(stripe(evt, []byte("guessed")), http.StatusUnauthorized, "unverified", 1),
		}},
		{name: "verification comes before the key", steps: []delivery{
			refused(github("", `{}`, nil), http.StatusUnauthorized, "unverified", 0),
			refused(stripe(`not json`, nil), http.StatusUnauthorized, "unverified", 0),
		}},
		{name: "a VerifyError chooses the status",
			stripe: func(c *idemhttp.Config) {
				c.Verify = func(*http.Request, []byte) error {
					return fmt.Errorf("load secret: %w", &idemhttp.VerifyError{Status: http.StatusServiceUnavailable, Err: errors.New("vault down")})
				}
			},
			steps: []delivery{
				refused(stripe(evt, stripeSecret), http.StatusServiceUnavailable, "unverified", 0),
			}},
		{name: "a VerifyError with a status that is no error is 401",
			stripe: func(c *idemhttp.Config) {
				c.Verify = func(*http.Request, []byte) error {
					return &idemhttp.VerifyError{Status: http.StatusOK, Err: errors.New("no")}
				}
			},
			steps: []delivery{
				refused(stripe(evt, stripeSecret), http.StatusUnauthorized, "unverified", 0),
			}},
		{name: "a failed handler stores nothing; the redelivery does the work", steps: []delivery{
			failed(stripe(`{"id":"evt_1","fail":1}`, stripeSecret), 0),
			ok(stripe(evt, stripeSecret), 1),
			replay(stripe(evt, stripeSecret), 1),
		}},
		{name: "two senders and an API client with the same id: three records", steps: []delivery{
			ok(stripe(`{"id":"same-1"}`, stripeSecret), 1),
			ok(github("same-1", `{}`, githubSecret), 2),
			ok(delivery{path: "/orders", header: map[string]string{"X-Tenant": "webhook:stripe", idemhttp.HeaderKey: "same-1"}, body: `{}`}, 3),
			replay(stripe(`{"id":"same-1"}`, stripeSecret), 3),
			replay(github("same-1", `{}`, githubSecret), 3),
		}},
		{name: "nested and numeric body keys",
			stripe: func(c *idemhttp.Config) { c.Key = idemhttp.JSONKeyFunc("data", "id") },
			steps: []delivery{
				ok(stripe(`{"data":{"id":4711}}`, stripeSecret), 1),
				replay(stripe(`{"data":{"id":4711}}`, stripeSecret), 1),
				replay(stripe(`{"data":{"id":"4711"}}`, stripeSecret), 1), // "4711" is the same key
				refused(stripe(`{"data":"evt_1"}`, stripeSecret), http.StatusBadRequest, "key-invalid", 1),
				refused(stripe(`{"data":{}}`, stripeSecret), http.StatusBadRequest, "key-missing", 1),
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := stripeConfig()
			if tc.stripe != nil {
				tc.stripe(&cfg)
			}
			s := newWebhookServer(t, cfg, githubConfig())
			for i, d := range tc.steps {
				s.send(t, i, d)
			}
		})
	}
}

// TestWebhookInsideAPIMiddleware: a webhook's middleware (Config.Verify,
// Config.Key) inside another middleware of the same store, such as an
// API-wide one with KeyOptional in front of every route, never lets a
// request past its signature check: a request with an Idempotency-Key of
// its own, which the outer middleware claims, is refused as nested instead
// of passed through unverified.
func TestWebhookInsideAPIMiddleware(t *testing.T) {
	store := newStore(t)
	quiet := slog.New(slog.DiscardHandler)
	api, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "api" }, KeyOptional: true, Unrouted: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	cfg := stripeConfig()
	cfg.Logger = quiet
	hooks, err := idemhttp.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", hooks.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		fmt.Fprint(w, "done")
	})))
	h := api.Wrap(mux)
	for i, tc := range []struct {
		name   string
		key    string // Idempotency-Key; "" for none
		secret []byte
		status int
		ran    bool
	}{
		{"forged, no key: the webhook's check refuses it", "", nil, http.StatusUnauthorized, false},
		{"forged, with a key the outer middleware claims", "anything", nil, http.StatusInternalServerError, false},
		{"signed, no key: the webhook's middleware alone protects it", "", stripeSecret, http.StatusOK, true},
	} {
		body := fmt.Sprintf(`{"id":"evt_%d"}`, i)
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(body))
		if tc.key != "" {
			req.Header.Set(idemhttp.HeaderKey, tc.key)
		}
		if tc.secret != nil {
			req.Header.Set(sigHeader, sign(tc.secret, body))
		}
		rec := httptest.NewRecorder()
		before := runs
		h.ServeHTTP(rec, req)
		if rec.Code != tc.status || (runs > before) != tc.ran {
			t.Errorf("%s: %d %s, handler ran %v; want %d, ran %v", tc.name, rec.Code, strings.TrimSpace(rec.Body.String()), runs > before, tc.status, tc.ran)
		}
	}
	counts, err := store.Counts(t.Context(), idem.ScopePrefix("api"))
	if err != nil || counts.Total() != 0 {
		t.Errorf("the outer middleware's records: %+v (%v); want none stored", counts, err)
	}
}

// TestTargetFingerprint: a redelivery with other bytes fingerprints the
// same; the same event id sent to another target of the route (another
// tenant's webhook path, another host or query) does not, so it is a
// mismatch and never a replay of the first target's answer.
func TestTargetFingerprint(t *testing.T) {
	req := func(target, body string) *http.Request {
		return httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	}
	const route = "/webhooks/{tenant}"
	base := idemhttp.TargetFingerprint(req("http://a.example/webhooks/t1", ""), route, []byte(`{"id":"evt_1","attempt":1}`))
	if got := idemhttp.TargetFingerprint(req("http://a.example/webhooks/t1", ""), route, []byte(`{"attempt":2,"id":"evt_1"}`)); got != base {
		t.Error("a redelivery with other body bytes fingerprints differently")
	}
	for _, other := range []string{"http://a.example/webhooks/t2", "http://b.example/webhooks/t1", "http://a.example/webhooks/t1?x=1"} {
		if idemhttp.TargetFingerprint(req(other, ""), route, nil) == base {
			t.Errorf("%s fingerprints like http://a.example/webhooks/t1", other)
		}
	}
}
