package idemecho_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/idemhttp"
)

// sendTo sends a request to h, as app.send sends one to the echo app.
func sendTo(t *testing.T, h http.Handler, method, path, key, body string) answer {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	req.Header.Set("X-Tenant", "tenant-1")
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

// TestUnderServeMux: echo mounted under an http.ServeMux ("/api/"). The
// mux's pattern never stands in for echo's route: with e.Use(mw.Wrap()) a
// path no echo route matches is echo's 404, key or not, never stored or
// replayed; where the adapter cannot tell an unmatched path (a middleware
// after Wrap in e.Use) or has no route yet (e.Pre), a protected request
// gets 500 route-missing, as without the mux. A matched route is
// protected under echo's template.
func TestUnderServeMux(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		install func(a *app)
		path    string
		key     string
		want    int
		problem string
	}{
		{"Use, matched", func(a *app) { a.e.Use(a.mw.Wrap()) }, "/api/orders/A-1", "key-1", http.StatusCreated, ""},
		{"Use, unmatched", func(a *app) { a.e.Use(a.mw.Wrap()) }, "/api/nothing", "key-1", http.StatusNotFound, ""},
		{"Use, unmatched, no key", func(a *app) { a.e.Use(a.mw.Wrap()) }, "/api/nothing", "", http.StatusNotFound, ""},
		{"Use before another middleware, unmatched", func(a *app) {
			a.e.Use(a.mw.Wrap(), func(next echo.HandlerFunc) echo.HandlerFunc {
				return func(c echo.Context) error { return next(c) }
			})
		}, "/api/nothing", "key-1", http.StatusInternalServerError, "route-missing"},
		{"Pre", func(a *app) { a.e.Pre(a.mw.Wrap()) }, "/api/orders/A-1", "key-1", http.StatusInternalServerError, "route-missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newApp(t)
			tc.install(a)
			a.e.POST("/api/orders/:id", a.create)
			mux := http.NewServeMux()
			mux.Handle("/api/", a.e)

			for i := range 2 {
				got := sendTo(t, mux, http.MethodPost, tc.path, tc.key, `{"item":"book"}`)
				if i == 1 && tc.want == http.StatusCreated {
					if got.status != tc.want || got.header.Get(idemhttp.HeaderReplayed) != "true" {
						t.Fatalf("second: %d %q %v, want a replay of the 201", got.status, got.body, got.header)
					}
					continue
				}
				if got.status != tc.want || got.problem() != tc.problem || got.header.Get(idemhttp.HeaderReplayed) != "" {
					t.Fatalf("attempt %d: %d %q %v, want %d %q, not replayed", i+1, got.status, got.body, got.header, tc.want, tc.problem)
				}
			}
			records := a.count(t, "idempotency_keys")
			if tc.want != http.StatusCreated {
				if records != 0 || a.runs.Load() != 0 {
					t.Fatalf("%d records and %d runs, want none", records, a.runs.Load())
				}
				return
			}
			if _, err := a.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, "/api/orders/:id"), tc.key); err != nil || records != 1 {
				t.Fatalf("%d records, none under echo's template (%v); want one", records, err)
			}
		})
	}
}
