package idemhttp_test

import (
	"context"
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// TestFormerScopes: a record stored before the upgrade, under idem v0.0's
// scope (method, the ServeMux pattern with its method, principal last) and
// its fingerprint, answers a retry under Config.FormerScopes: a replay of
// its response, 422 for another body, 409 while it is pending; the handler
// does not run. Without FormerScopes the retry is a new key under the new
// scope and the handler runs again.
func TestFormerScopes(t *testing.T) {
	const formerScope = `POST "POST /orders" "t1"`
	tests := []struct {
		name     string
		former   bool
		pending  bool
		body     string
		want     int
		wantRuns int64
	}{
		{"replay", true, false, "b", http.StatusCreated, 0},
		{"another body", true, false, "other", http.StatusUnprocessableEntity, 0},
		{"pending", true, true, "b", http.StatusConflict, 0},
		{"off", false, false, "b", http.StatusAccepted, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := newStore(t)
			// What v0.0 stored for POST /orders with body "b" and key k1.
			orig := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("b"))
			orig.Pattern = "POST /orders"
			req := idem.Request{Scope: formerScope, Key: "k1", Fingerprint: idemhttp.DefaultFingerprint(orig, "POST /orders", []byte("b"))}
			if tc.pending {
				if _, err := store.Lease(t.Context(), req); err != nil {
					t.Fatal(err)
				}
			} else if _, err := store.Do(t.Context(), req, func(context.Context, *sql.Tx) (idem.Response, error) {
				return idem.Response{Status: http.StatusCreated, Body: []byte("order 1")}, nil
			}); err != nil {
				t.Fatal(err)
			}

			mw, err := idemhttp.New(store, idemhttp.Config{
				Principal:    func(r *http.Request) string { return r.Header.Get("X-Tenant") },
				FormerScopes: tc.former,
			})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			mux := http.NewServeMux()
			mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				w.WriteHeader(http.StatusAccepted)
			})))
			req2 := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(tc.body))
			req2.Header.Set(idemhttp.HeaderKey, "k1")
			req2.Header.Set("X-Tenant", "t1")
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req2)
			if rec.Code != tc.want || runs.Load() != tc.wantRuns {
				t.Fatalf("retry: %d %q after %d runs, want %d after %d", rec.Code, rec.Body, runs.Load(), tc.want, tc.wantRuns)
			}
			if tc.want == http.StatusCreated && (rec.Body.String() != "order 1" || rec.Header().Get(idemhttp.HeaderReplayed) != "true") {
				t.Errorf("replay: %q %v, want the stored body, marked replayed", rec.Body, rec.Header())
			}
		})
	}
}

// TestFormerScopesResumeLease: a v0.0 WrapLease request that failed after
// recording a step left a pending record, its lease released, under the
// old scope. With FormerScopes the retry after the upgrade resumes that
// record from its step (the handler sees the step and does not redo it),
// stores its answer there, and the next retry replays it; it is not
// answered 409 until the record expires.
func TestFormerScopesResumeLease(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{Lease: time.Minute}).Store
	orig := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader("b"))
	orig.Pattern = "POST /payments"
	req := idem.Request{Scope: `POST "POST /payments" "t1"`, Key: "k1", Fingerprint: idemhttp.DefaultFingerprint(orig, "POST /payments", []byte("b"))}
	l, err := store.Lease(t.Context(), req)
	if err != nil || l.Outcome != idem.Won {
		t.Fatalf("v0.0's lease: %v, %v", l, err)
	}
	if err := l.RecordStep(t.Context(), "charged", []byte("ch_1"), nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}

	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }, FormerScopes: true})
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	var seenStep atomic.Value
	mux := http.NewServeMux()
	mux.Handle("POST /payments", mw.WrapLease(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		l, _ := idemhttp.Lease[*sql.Tx](r.Context())
		step, data := l.Step()
		seenStep.Store(step + "=" + string(data))
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("paid with " + string(data)))
	})))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader("b"))
		r.Header.Set(idemhttp.HeaderKey, "k1")
		r.Header.Set("X-Tenant", "t1")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		return rec
	}
	first := send()
	if first.Code != http.StatusCreated || first.Body.String() != "paid with ch_1" || seenStep.Load() != "charged=ch_1" {
		t.Fatalf("retry after the upgrade: %d %q, step %v; want the resumed work's 201 from step charged", first.Code, first.Body, seenStep.Load())
	}
	again := send()
	if again.Code != http.StatusCreated || again.Body.String() != "paid with ch_1" || again.Header().Get(idemhttp.HeaderReplayed) != "true" || runs.Load() != 1 {
		t.Fatalf("next retry: %d %q %v after %d runs; want a replay", again.Code, again.Body, again.Header(), runs.Load())
	}
	rec, err := store.Lookup(t.Context(), req.Scope, req.Key)
	if err != nil || !rec.Completed {
		t.Fatalf("the former record: %+v, %v; want it completed", rec, err)
	}
}
