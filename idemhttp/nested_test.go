package idemhttp_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
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

// nestApp is an orders endpoint on SQLite whose handler writes the order
// in the middleware's transaction (Wrap) or in a step of its lease
// (WrapLease), whichever its request carries.
type nestApp struct {
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	runs  atomic.Int64
	log   syncBuffer
}

func newNestApp(t *testing.T) *nestApp {
	t.Helper()
	// A short wait bound: without the nesting check, the inner claim
	// waits it out on the outer run's lock.
	lite := idemtest.NewSQLite(t, idem.Config{WaitBound: 200 * time.Millisecond})
	if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &nestApp{db: lite.DB, store: lite.Store}
}

func (a *nestApp) middleware(t *testing.T, store *idem.Store[*sql.Tx]) *idemhttp.Middleware[*sql.Tx] {
	t.Helper()
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal: func(*http.Request) string { return "tenant-1" },
		Logger:    slog.New(slog.NewTextHandler(&a.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	return mw
}

func (a *nestApp) create(w http.ResponseWriter, r *http.Request) {
	a.runs.Add(1)
	insert := func(ctx context.Context, tx *sql.Tx) (int64, error) {
		res, err := tx.ExecContext(ctx, "INSERT INTO orders (item) VALUES ('book')")
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	var id int64
	var err error
	if tx, ok := idemhttp.Tx[*sql.Tx](r.Context()); ok {
		id, err = insert(r.Context(), tx)
	} else if l, ok := idemhttp.Lease[*sql.Tx](r.Context()); ok {
		err = l.RecordStep(r.Context(), "ordered", nil, func(ctx context.Context, tx *sql.Tx) error {
			id, err = insert(ctx, tx)
			return err
		})
	} else {
		err = errors.New("neither a transaction nor a lease in the request context")
	}
	if err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d}`, id)
}

func (a *nestApp) send(t *testing.T, h http.Handler, key string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader(`{"item":"book"}`))
	req.Pattern = "POST /orders"
	req.Header.Set(idemhttp.HeaderKey, key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func (a *nestApp) orders(t *testing.T) int {
	t.Helper()
	var n int
	if err := a.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM orders").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNestedSameStore: the middleware of one Store installed twice on a
// route (a group's and the route's) protects the request once: one run of
// the handler, one order, the 201 stored and replayed; never the 409 of
// the inner claim waiting on the outer run's own lock.
func TestNestedSameStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		nest func(a, b *idemhttp.Middleware[*sql.Tx], h http.Handler) http.Handler
	}{
		{"Wrap in Wrap", func(a, _ *idemhttp.Middleware[*sql.Tx], h http.Handler) http.Handler { return a.Wrap(a.Wrap(h)) }},
		{"Wrap in Wrap in Wrap", func(a, _ *idemhttp.Middleware[*sql.Tx], h http.Handler) http.Handler {
			return a.Wrap(a.Wrap(a.Wrap(h)))
		}},
		{"Wrap in Wrap of another Middleware", func(a, b *idemhttp.Middleware[*sql.Tx], h http.Handler) http.Handler { return a.Wrap(b.Wrap(h)) }},
		{"WrapLease in WrapLease", func(a, b *idemhttp.Middleware[*sql.Tx], h http.Handler) http.Handler {
			return a.WrapLease(b.WrapLease(h))
		}},
		{"a sub-request without a key in Wrap", func(a, _ *idemhttp.Middleware[*sql.Tx], h http.Handler) http.Handler {
			return a.Wrap(subRequest("", a.Wrap(h)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := newNestApp(t)
			h := tc.nest(app.middleware(t, app.store), app.middleware(t, app.store), http.HandlerFunc(app.create))
			first := app.send(t, h, "k")
			if first.Code != http.StatusCreated || first.Body.String() != `{"id":1}` {
				t.Fatalf("first: %d %s, want 201 {\"id\":1}", first.Code, first.Body)
			}
			replay := app.send(t, h, "k")
			if replay.Code != http.StatusCreated || replay.Body.String() != `{"id":1}` || replay.Header().Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %v %s, want the 201 replayed", replay.Code, replay.Header(), replay.Body)
			}
			if runs, orders := app.runs.Load(), app.orders(t); runs != 1 || orders != 1 {
				t.Fatalf("%d runs, %d orders; want 1 and 1", runs, orders)
			}
			rec, err := app.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, "/orders"), "k")
			if err != nil || !rec.Completed || rec.Response.Status != http.StatusCreated {
				t.Fatalf("record %+v (%v), want the 201 completed", rec, err)
			}
		})
	}
}

// TestNestedRefused: nestings that cannot protect the request once are
// refused with 500 "middleware-nested" and an ERROR log naming the fix;
// the handler does not run and no answer is stored.
func TestNestedRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		// handler is the route's handler; other is a second store.
		handler func(t *testing.T, app *nestApp, other *idem.Store[*sql.Tx]) http.Handler
		why     string
	}{
		{"WrapLease in Wrap", func(t *testing.T, app *nestApp, _ *idem.Store[*sql.Tx]) http.Handler {
			mw := app.middleware(t, app.store)
			return mw.Wrap(mw.WrapLease(http.HandlerFunc(app.create)))
		}, "WrapLease runs inside Wrap of the same store"},
		{"Wrap in WrapLease", func(t *testing.T, app *nestApp, _ *idem.Store[*sql.Tx]) http.Handler {
			mw := app.middleware(t, app.store)
			return mw.WrapLease(mw.Wrap(http.HandlerFunc(app.create)))
		}, "Wrap runs inside WrapLease of the same store"},
		{"Wrap of another Store", func(t *testing.T, app *nestApp, other *idem.Store[*sql.Tx]) http.Handler {
			return app.middleware(t, app.store).Wrap(app.middleware(t, other).Wrap(http.HandlerFunc(app.create)))
		}, "another idem.Store"},
		{"Wrap inside the store's own Do", func(t *testing.T, app *nestApp, _ *idem.Store[*sql.Tx]) http.Handler {
			inner := app.middleware(t, app.store).Wrap(http.HandlerFunc(app.create))
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				req := idem.Request{Scope: "by hand", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
				_, err := app.store.Do(r.Context(), req, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) {
					rec := httptest.NewRecorder()
					inner.ServeHTTP(rec, r.WithContext(ctx))
					for k, v := range rec.Header() {
						w.Header()[k] = v
					}
					w.WriteHeader(rec.Code)
					_, _ = w.Write(rec.Body.Bytes())
					return idem.Response{Status: rec.Code}, nil
				})
				if err != nil {
					t.Error(err)
				}
			})
		}, "inside a function of this store's Do or DoLease"},
		{"a sub-request with another key in Wrap", func(t *testing.T, app *nestApp, _ *idem.Store[*sql.Tx]) http.Handler {
			mw := app.middleware(t, app.store)
			return mw.Wrap(subRequest("item-1", mw.Wrap(http.HandlerFunc(app.create))))
		}, "a request with another idempotency key"},
		{"a sub-request with another key in WrapLease", func(t *testing.T, app *nestApp, _ *idem.Store[*sql.Tx]) http.Handler {
			mw := app.middleware(t, app.store)
			return mw.WrapLease(subRequest("item-1", mw.WrapLease(http.HandlerFunc(app.create))))
		}, "a request with another idempotency key"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			app := newNestApp(t)
			other := idemtest.NewSQLite(t, idem.Config{WaitBound: 200 * time.Millisecond}).Store
			h := tc.handler(t, app, other)
			for i := range 2 { // a retry is refused again, not answered from a record
				got := app.send(t, h, "k")
				if got.Code != http.StatusInternalServerError || problemCode(t, got) != "middleware-nested" {
					t.Fatalf("attempt %d: %d %s, want 500 middleware-nested", i+1, got.Code, got.Body)
				}
			}
			if runs, orders := app.runs.Load(), app.orders(t); runs != 0 || orders != 0 {
				t.Fatalf("%d runs, %d orders; want none", runs, orders)
			}
			for _, s := range []*idem.Store[*sql.Tx]{app.store, other} {
				page, err := s.List(t.Context(), idem.ListFilter{})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range page.Records {
					if r.State == idem.StateCompleted {
						t.Errorf("record %+v completed, want no answer stored", r)
					}
				}
			}
			if log := app.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, tc.why) {
				t.Errorf("log %q, want an ERROR saying %q", log, tc.why)
			}
		})
	}
}

// subRequest is a handler that serves its request's sub-request through
// next, as a batch endpoint does through its router: the same request
// and context, with key as its idempotency key (none when empty).
func subRequest(key string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub := r.Clone(r.Context())
		sub.Header.Del(idemhttp.HeaderKey)
		if key != "" {
			sub.Header.Set(idemhttp.HeaderKey, key)
		}
		next.ServeHTTP(w, sub)
	})
}
