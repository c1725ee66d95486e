package idemhttp_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// TestNoResponseIsLogged: a handler that returns without answering gets a
// 500 "no-response" problem and an ERROR in the middleware's log that names
// the key and says what to do, under Wrap and WrapLease; a retry runs it
// again.
func TestNoResponseIsLogged(t *testing.T) {
	for _, tc := range []struct {
		name string
		wrap func(*idemhttp.Middleware[*sql.Tx], http.Handler) http.Handler
		want string
	}{
		{"Wrap", (*idemhttp.Middleware[*sql.Tx]).Wrap, "rolled back"},
		{"WrapLease", (*idemhttp.Middleware[*sql.Tx]).WrapLease, "lease released"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			mw, err := idemhttp.New(newStore(t), idemhttp.Config{
				Principal: func(*http.Request) string { return "p" },
				Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
				Unrouted:  true,
			})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			h := tc.wrap(mw, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { runs++ }))
			for i := 1; i <= 2; i++ {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
				req.Header.Set(idemhttp.HeaderKey, "silent-1")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"code":"no-response"`) {
					t.Fatalf("attempt %d: %d %s, want 500 no-response", i, rec.Code, rec.Body)
				}
				if runs != i {
					t.Fatalf("attempt %d: the handler ran %d times, want %d (nothing stored, so every retry runs it)", i, runs, i)
				}
			}
			line := logged.String()
			for _, want := range []string{"level=ERROR", "without writing a response", tc.want, "ImplicitOK", "key=silent-1"} {
				if !strings.Contains(line, want) {
					t.Errorf("log %q lacks %q", line, want)
				}
			}
		})
	}
}

// TestFailWithNotAnOutcomeError: a failure reported with Fail whose error
// happens to wrap idem.ErrNotAnOutcome is a failure: 500 handler-failed
// and logged, nothing stored, and under WrapLease the lease released (a
// retry resumes it), never taken for a rolled-back answer or a forgotten
// lease.
func TestFailWithNotAnOutcomeError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wrap   func(*idemhttp.Middleware[*sql.Tx], http.Handler) http.Handler
		status int // 503 under WrapLease: the lease is released for a retry to resume
	}{
		{"Wrap", (*idemhttp.Middleware[*sql.Tx]).Wrap, http.StatusInternalServerError},
		{"WrapLease", (*idemhttp.Middleware[*sql.Tx]).WrapLease, http.StatusServiceUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			mw, err := idemhttp.New(newStore(t), idemhttp.Config{
				Principal: func(*http.Request) string { return "p" },
				Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
				Unrouted:  true,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := tc.wrap(mw, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusAccepted) // begun, then failed
				idemhttp.Fail(w, r, fmt.Errorf("payment provider: %w", idem.ErrNotAnOutcome))
			}))
			req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
			req.Header.Set(idemhttp.HeaderKey, "fail-1")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status || !strings.Contains(rec.Body.String(), `"code":"handler-failed"`) {
				t.Errorf("%d %s; want %d handler-failed", rec.Code, rec.Body, tc.status)
			}
			if !strings.Contains(logged.String(), "payment provider") {
				t.Errorf("log %q lacks the handler's error", logged.String())
			}
		})
	}
}
