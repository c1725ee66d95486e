package idemhttp_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/aborting"
)

// syncBuffer is a log destination for handlers on other goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAnswerAfterAbortedTransaction: through the Transport, a handler whose
// transaction a failed statement aborted. Its 409 reaches the client, not
// stored, after one attempt (it is the handler's answer, which the
// Transport does not retry), and the middleware logs a WARN with the
// store's cause. Its
// 201 claims work that was rolled back: 500 "handler-failed", logged as an
// ERROR, not retried.
func TestAnswerAfterAbortedTransaction(t *testing.T) {
	for _, tc := range []struct {
		answer, status   int
		attempts         int
		level, notLevel  string
		code, clientBody string
	}{
		{answer: 409, status: 409, attempts: 1, level: "level=WARN", notLevel: "level=ERROR", clientBody: "email taken"},
		{answer: 201, status: 500, attempts: 1, level: "level=ERROR", code: `"code":"handler-failed"`},
	} {
		t.Run(http.StatusText(tc.answer), func(t *testing.T) {
			lite := idemtest.NewSQLite(t, idem.Config{})
			store, err := idem.New[*sql.Tx](aborting.Driver{Driver: lite.Driver}, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var logged syncBuffer
			mw, err := idemhttp.New(store, idemhttp.Config{
				Principal: func(*http.Request) string { return "tenant-1" },
				Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			mux := http.NewServeMux()
			mux.Handle("POST /accounts", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(tc.answer)
				io.WriteString(w, `{"error":"email taken"}`)
			})))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			attempts := 1
			client := &http.Client{Transport: &idemhttp.Transport{
				MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond,
				OnRetry: func(idemhttp.RetryEvent) { attempts++ },
			}}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/accounts", strings.NewReader("ann@example.com"))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.clientBody) || !strings.Contains(string(body), tc.code) {
				t.Fatalf("the client got %d %s, want %d %s%s", resp.StatusCode, body, tc.status, tc.clientBody, tc.code)
			}
			if resp.Header.Get(idemhttp.HeaderReplayed) != "" {
				t.Errorf("the answer says it was replayed: nothing was stored")
			}
			if attempts != tc.attempts || runs.Load() != int64(tc.attempts) {
				t.Errorf("%d attempts ran the handler %d times, want %d", attempts, runs.Load(), tc.attempts)
			}
			log := logged.String()
			if !strings.Contains(log, tc.level) || !strings.Contains(log, "aborted") {
				t.Errorf("log %q, want %s naming the aborted transaction", log, tc.level)
			}
			if tc.notLevel != "" && strings.Contains(log, tc.notLevel) {
				t.Errorf("log %q, want no %s", log, tc.notLevel)
			}
			// The plain store on the same table reads it.
			if n, err := lite.Store.Counts(ctx, ""); err != nil || n.Total() != 0 {
				t.Errorf("Counts: %+v, %v; want no record stored", n, err)
			}
		})
	}
}

// TestFailWithAbortedError: a handler that reports its own failed statement
// with Fail (an error that matches idem.ErrTxAborted) gets Fail's answer:
// under WrapLease 503 "handler-failed", the lease released for a retry to
// resume, not the 500 of a success claimed after an aborted transaction.
func TestFailWithAbortedError(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{})
	mw, err := idemhttp.New(lite.Store, idemhttp.Config{
		Principal: func(*http.Request) string { return "tenant-1" },
		Logger:    slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.WrapLease(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		idemhttp.Fail(w, r, fmt.Errorf("insert order: %w", dialect.Classified(dialect.ErrTxAborted, errors.New("test: unique violation, transaction aborted"))))
	}))
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader("{}"))
	req.Pattern = "POST /orders"
	req.Header.Set(idemhttp.HeaderKey, "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "resume") {
		t.Fatalf("got %d %s, want 503 handler-failed saying a retry resumes", rec.Code, rec.Body)
	}
}
