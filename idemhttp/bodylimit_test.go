package idemhttp_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// statusError is a framework's error with the HTTP status it answers.
type statusError struct{ status int }

func (e statusError) Error() string   { return "framework: request body refused" }
func (e statusError) StatusCode() int { return e.status }

// failingBody yields some bytes, then fails with err.
type failingBody struct {
	sent bool
	err  error
}

func (b *failingBody) Read(p []byte) (int, error) {
	if b.sent {
		return 0, b.err
	}
	b.sent = true
	return copy(p, `{"item":`), nil
}

func (b *failingBody) Close() error { return nil }

// TestBodyLimitBefore: a body over a limit set before the middleware (an
// http.MaxBytesReader, or a framework's reader failing with an error whose
// StatusCode is 413) gets 413 body-too-large naming what it knows of the
// limit, like a body over Config.MaxRequestBody, and the handler does not
// run; any other read error is 400 body-unreadable.
func TestBodyLimitBefore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		body   func(w http.ResponseWriter, r *http.Request) io.ReadCloser
		status int
		code   string
		detail string
	}{
		{"MaxBytesReader before", func(w http.ResponseWriter, r *http.Request) io.ReadCloser {
			return http.MaxBytesReader(w, r.Body, 4)
		}, http.StatusRequestEntityTooLarge, "body-too-large", "larger than 4 bytes"},
		{"StatusCode 413", func(http.ResponseWriter, *http.Request) io.ReadCloser {
			return &failingBody{err: statusError{http.StatusRequestEntityTooLarge}}
		}, http.StatusRequestEntityTooLarge, "body-too-large", "larger than this endpoint accepts"},
		{"wrapped StatusCode 413", func(http.ResponseWriter, *http.Request) io.ReadCloser {
			return &failingBody{err: errors.Join(errors.New("read"), statusError{http.StatusRequestEntityTooLarge})}
		}, http.StatusRequestEntityTooLarge, "body-too-large", "larger than this endpoint accepts"},
		{"StatusCode 400", func(http.ResponseWriter, *http.Request) io.ReadCloser {
			return &failingBody{err: statusError{http.StatusBadRequest}}
		}, http.StatusBadRequest, "body-unreadable", "could not be read"},
		{"plain error", func(http.ResponseWriter, *http.Request) io.ReadCloser {
			return &failingBody{err: errors.New("connection reset")}
		}, http.StatusBadRequest, "body-unreadable", "could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mw, err := idemhttp.New(newStore(t), idemhttp.Config{
				Principal: func(*http.Request) string { return "p" },
				Unrouted:  true,
			})
			if err != nil {
				t.Fatal(err)
			}
			ran := false
			h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				ran = true
				w.WriteHeader(http.StatusCreated)
			}))
			limit := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Body = tc.body(w, r)
				h.ServeHTTP(w, r)
			})
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
			req.ContentLength = -1 // sent chunked: only the reader finds the limit
			req.Header.Set(idemhttp.HeaderKey, "key-1")
			rec := httptest.NewRecorder()
			limit.ServeHTTP(rec, req)
			var p struct{ Code, Detail string }
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("answer %d %q is not a problem: %v", rec.Code, rec.Body, err)
			}
			if rec.Code != tc.status || p.Code != tc.code || !strings.Contains(p.Detail, tc.detail) {
				t.Fatalf("answer %d %q, want %d %s saying %q", rec.Code, rec.Body, tc.status, tc.code, tc.detail)
			}
			if ran {
				t.Fatal("the handler ran")
			}
		})
	}
}
