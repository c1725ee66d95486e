package idemhttp_test

import (
	"bytes"
	"database/sql"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemhttp/idemhttptest"
	"github.com/idemkit/idem/idemtest"
)

// openSQLite returns a driver on a fresh database file for one test.
func openSQLite(t *testing.T) dialect.Driver[*sql.Tx] {
	return idemtest.SQLiteDriver(t)
}

// TestMiddleware runs the backend-independent HTTP suite on SQLite. The
// PostgreSQL and MySQL packages call idemhttptest.Run the same way.
func TestMiddleware(t *testing.T) {
	idemhttptest.Run(t, conformance.Backend[*sql.Tx]{Name: "sqlite/file", Open: openSQLite})
}

func newStore(t *testing.T) *idem.Store[*sql.Tx] {
	t.Helper()
	return idemtest.NewSQLite(t, idem.Config{}).Store
}

// TestNewRejectsBadConfig: every Config New refuses is an error that
// wraps idem.ErrInvalidConfig and names what is wrong.
func TestNewRejectsBadConfig(t *testing.T) {
	store := newStore(t)
	principal := func(*http.Request) string { return "p" }
	for _, tc := range []struct {
		name  string
		store *idem.Store[*sql.Tx]
		cfg   idemhttp.Config
		want  string
	}{
		{"nil store", nil, idemhttp.Config{Principal: principal}, "nil store"},
		{"no principal", store, idemhttp.Config{}, "Principal"},
		{"method with space", store, idemhttp.Config{Principal: principal, Methods: []string{"PO ST"}}, "token"},
		{"empty method", store, idemhttp.Config{Principal: principal, Methods: []string{""}}, "token"},
		{"negative body limit", store, idemhttp.Config{Principal: principal, MaxRequestBody: -1}, "MaxRequestBody"},
		{"negative Retry-After", store, idemhttp.Config{Principal: principal, RetryAfter: -1}, "RetryAfter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := idemhttp.New(tc.store, tc.cfg)
			if !errors.Is(err, idem.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want an error wrapping idem.ErrInvalidConfig that names %s", mw, err, tc.want)
			}
		})
	}
}

// TestConfiguredMethods protects PUT, and leaves POST alone when not listed.
func TestConfiguredMethods(t *testing.T) {
	store := newStore(t)
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal: func(*http.Request) string { return "p" },
		Methods:   []string{http.MethodPut},
		Unrouted:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, ok := idemhttp.Tx[*sql.Tx](r.Context()); ok {
			w.Write([]byte("in a transaction"))
		}
	}))
	for method, want := range map[string]int{http.MethodPut: http.StatusBadRequest, http.MethodPost: http.StatusOK} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(method, "/x", nil))
		if rec.Code != want {
			t.Errorf("%s without a key: %d, want %d", method, rec.Code, want)
		}
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPut, "/x", nil)
	req.Header.Set(idemhttp.HeaderKey, "k")
	h.ServeHTTP(rec, req)
	if rec.Body.String() != "in a transaction" {
		t.Errorf("PUT with a key: %d %q, want the handler inside a transaction", rec.Code, rec.Body)
	}
}

// TestTxType: Tx reports false for another transaction type.
func TestTxType(t *testing.T) {
	store := newStore(t)
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "p" }, Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	var sqlOK, connOK bool
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, sqlOK = idemhttp.Tx[*sql.Tx](r.Context())
		_, connOK = idemhttp.Tx[*sql.Conn](r.Context())
		w.WriteHeader(http.StatusNoContent)
	}))
	req := httptest.NewRequest(http.MethodPost, "/x", strings.NewReader("b"))
	req.Header.Set(idemhttp.HeaderKey, "k")
	h.ServeHTTP(httptest.NewRecorder(), req)
	if !sqlOK || connOK {
		t.Errorf("Tx[*sql.Tx] ok=%v, Tx[*sql.Conn] ok=%v; want true, false", sqlOK, connOK)
	}
	if _, ok := idemhttp.Tx[*sql.Tx](t.Context()); ok {
		t.Error("Tx outside the middleware reported true")
	}
}

// TestFailOutsideMiddleware writes a 500 problem.
func TestFailOutsideMiddleware(t *testing.T) {
	rec := httptest.NewRecorder()
	idemhttp.Fail(rec, httptest.NewRequest(http.MethodPost, "/x", nil), sql.ErrConnDone)
	if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("Fail outside the middleware: %d %v, want a 500 problem", rec.Code, rec.Header())
	}
}

// TestPrincipalMissingIsLogged: a request whose Principal is "" is refused
// with 403 and a warning that names the request and says where the
// middleware belongs; the handler does not run.
func TestPrincipalMissingIsLogged(t *testing.T) {
	var logged bytes.Buffer
	mw, err := idemhttp.New(newStore(t), idemhttp.Config{
		Principal: func(*http.Request) string { return "" },
		Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
		Unrouted:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	h := mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { ran = true }))
	req := httptest.NewRequest(http.MethodPost, "/orders/7", strings.NewReader("{}"))
	req.Header.Set(idemhttp.HeaderKey, "k1")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "principal-missing") {
		t.Errorf("answer %d %s, want 403 principal-missing", rec.Code, rec.Body)
	}
	if ran {
		t.Error("the handler ran for a request without a principal")
	}
	line := logged.String()
	for _, want := range []string{"level=WARN", "without a principal", "after authentication", "method=POST", "path=/orders/7"} {
		if !strings.Contains(line, want) {
			t.Errorf("log %q lacks %q", line, want)
		}
	}
}

func TestDefaultStoreHeader(t *testing.T) {
	for name, want := range map[string]bool{"Date": false, "Set-Cookie": false, "Authentication-Info": false, "Proxy-Authentication-Info": false,
		"Location": true, "Content-Type": true, "Etag": true} {
		if got := idemhttp.DefaultStoreHeader(name); got != want {
			t.Errorf("DefaultStoreHeader(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestDefaultRoute: the route is the one WithRoute set, else the ServeMux
// pattern without its method (the scope holds the method), else "".
func TestDefaultRoute(t *testing.T) {
	for _, tc := range []struct{ pattern, path, want string }{
		{"POST /orders/{id}", "/orders/7", "/orders/{id}"},
		{"/orders/{id}", "/orders/7", "/orders/{id}"},
		{"POST example.com/orders/{id}", "http://example.com/orders/7", "example.com/orders/{id}"},
	} {
		mux := http.NewServeMux()
		var got string
		mux.HandleFunc(tc.pattern, func(w http.ResponseWriter, r *http.Request) { got = idemhttp.DefaultRoute(r) })
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, tc.path, nil))
		if got != tc.want {
			t.Errorf("route under the ServeMux pattern %q = %q, want %q", tc.pattern, got, tc.want)
		}
	}
	r := httptest.NewRequest(http.MethodPost, "/orders/7?x=1", nil)
	if got := idemhttp.DefaultRoute(r); got != "" {
		t.Errorf("route without a pattern = %q, want none", got)
	}
	if got := idemhttp.DefaultRoute(idemhttp.WithRoute(r, "/orders/:id")); got != "/orders/:id" {
		t.Errorf("route set with WithRoute = %q, want /orders/:id", got)
	}
}

// TestReplayOfNoStatus: a record stored without an HTTP status (by a queue
// consumer, under the same scope) replays as 200 with its payload, never a
// panic.
func TestReplayOfNoStatus(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{})
	d, store := lite.Driver, lite.Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "p" }, Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	var route string
	mux := http.NewServeMux()
	mux.Handle("POST /jobs", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		route = r.Pattern
		w.WriteHeader(http.StatusOK)
	})))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/jobs", strings.NewReader("b"))
		req.Header.Set(idemhttp.HeaderKey, "k")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}
	send() // learn the scope and fingerprint the middleware uses, with a first record
	if route == "" {
		t.Fatal("the handler did not run")
	}
	// Overwrite the stored answer with a status-less one, as a consumer's
	// store would have written under that scope.
	if _, err := d.Pool().Exec(t.Context(), "UPDATE idempotency_keys SET status = 0, body = X'646f6e65'"); err != nil {
		t.Fatal(err)
	}
	rec := send()
	if rec.Code != http.StatusOK || rec.Body.String() != "done" || rec.Header().Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay of a status-less record: %d %q %v, want 200 with the payload", rec.Code, rec.Body, rec.Header())
	}
}
