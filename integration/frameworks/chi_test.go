package frameworks_test

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// chiStore is an idem store on a fresh SQLite file.
func chiStore(t *testing.T) *idem.Store[*sql.Tx] {
	t.Helper()
	return idemtest.NewSQLite(t, idem.Config{}).Store
}

// TestChiInstall: chi's own idioms for route-level middleware, r.With and
// a Group's Use, run idem after routing: the scope names the route chi
// matched, an unknown route is chi's 404, and a keyless POST is 400. A
// top-level r.Use runs idem before routing, where no route is known: every
// protected request is refused with 500 "route-missing" and an ERROR log,
// and nothing is stored, instead of storing and replaying chi's 404 under
// one scope for every route.
func TestChiInstall(t *testing.T) {
	deposit := func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("deposit " + chi.URLParam(r, "id")))
	}
	const route = "/accounts/{id}/deposits"
	tests := []struct {
		name    string
		install func(r chi.Router, mw func(http.Handler) http.Handler)
		routed  bool
	}{
		{"With", func(r chi.Router, mw func(http.Handler) http.Handler) { r.With(mw).Post(route, deposit) }, true},
		{"Group", func(r chi.Router, mw func(http.Handler) http.Handler) {
			r.Group(func(r chi.Router) { r.Use(mw); r.Post(route, deposit) })
		}, true},
		{"top-level Use", func(r chi.Router, mw func(http.Handler) http.Handler) { r.Use(mw); r.Post(route, deposit) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			store := chiStore(t)
			var logged syncBuffer
			mw, err := idemhttp.New(store, idemhttp.Config{
				Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
				Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			r := chi.NewRouter()
			tc.install(r, mw.Wrap)
			send := func(path, key string) (int, string) {
				req := httptest.NewRequest(http.MethodPost, path, strings.NewReader("100"))
				req.Header.Set("X-Tenant", "tenant-42")
				if key != "" {
					req.Header.Set(idemhttp.HeaderKey, key)
				}
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, req)
				var p struct{ Code string }
				_ = json.Unmarshal(rec.Body.Bytes(), &p)
				if p.Code != "" {
					return rec.Code, p.Code
				}
				return rec.Code, rec.Body.String()
			}
			page := func() []idem.RecordInfo {
				p, err := store.List(t.Context(), idem.ListFilter{})
				if err != nil {
					t.Fatal(err)
				}
				return p.Records
			}
			if !tc.routed {
				for _, path := range []string{"/accounts/7/deposits", "/nowhere"} {
					for _, key := range []string{"k1", ""} {
						if status, got := send(path, key); status != http.StatusInternalServerError || got != "route-missing" {
							t.Errorf("POST %s key %q: %d %s, want 500 route-missing", path, key, status, got)
						}
					}
				}
				if records := page(); len(records) != 0 {
					t.Errorf("records: %+v, want none", records)
				}
				if log := logged.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "r.With") {
					t.Errorf("log %q: want an ERROR naming the fix", log)
				}
				return
			}
			if status, got := send("/accounts/7/deposits", "k1"); status != http.StatusCreated || got != "deposit 7" {
				t.Fatalf("first: %d %q", status, got)
			}
			if status, got := send("/accounts/7/deposits", "k1"); status != http.StatusCreated || got != "deposit 7" {
				t.Fatalf("replay: %d %q", status, got)
			}
			if status, got := send("/accounts/7/deposits", ""); status != http.StatusBadRequest || got != "key-missing" {
				t.Errorf("keyless: %d %q, want 400 key-missing", status, got)
			}
			if status, _ := send("/nowhere", "k2"); status != http.StatusNotFound {
				t.Errorf("unknown route: %d, want chi's 404", status)
			}
			records := page()
			if want := idemhttp.Scope("tenant-42", http.MethodPost, route); len(records) != 1 || records[0].Scope != want {
				t.Errorf("records %+v, want one under %q", records, want)
			}
		})
	}
}

// TestChiNested: idem's middleware on a Group's Use and again on the
// route with r.With (or twice on one With), as a route in a protected
// group might be written: the request is protected once. The handler runs
// once, in the outer run's transaction, and its 201 is stored and
// replayed; the inner claim does not wait on the outer run's lock and
// answer 409, which the outer run would store as the key's answer.
func TestChiNested(t *testing.T) {
	const route = "/accounts/{id}/deposits"
	for _, tc := range []struct {
		name    string
		install func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc)
	}{
		{"Group Use and With", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.Group(func(r chi.Router) { r.Use(mw); r.With(mw).Post(route, h) })
		}},
		{"With twice", func(r chi.Router, mw func(http.Handler) http.Handler, h http.HandlerFunc) {
			r.With(mw, mw).Post(route, h)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lite := idemtest.NewSQLite(t, idem.Config{WaitBound: 200 * time.Millisecond})
			if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE deposits (id INTEGER PRIMARY KEY, account TEXT)"); err != nil {
				t.Fatal(err)
			}
			mw, err := idemhttp.New(lite.Store, idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			deposit := func(w http.ResponseWriter, r *http.Request) {
				runs.Add(1)
				tx, ok := idemhttp.Tx[*sql.Tx](r.Context())
				if !ok {
					idemhttp.Fail(w, r, errors.New("no transaction"))
					return
				}
				res, err := tx.ExecContext(r.Context(), "INSERT INTO deposits (account) VALUES (?)", chi.URLParam(r, "id"))
				if err != nil {
					idemhttp.Fail(w, r, err)
					return
				}
				id, _ := res.LastInsertId()
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "deposit %d", id)
			}
			r := chi.NewRouter()
			tc.install(r, mw.Wrap, deposit)
			send := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, "/accounts/7/deposits", strings.NewReader("100"))
				req.Header.Set("X-Tenant", "tenant-42")
				req.Header.Set(idemhttp.HeaderKey, "k1")
				rec := httptest.NewRecorder()
				r.ServeHTTP(rec, req)
				return rec
			}
			first := send()
			if first.Code != http.StatusCreated || first.Body.String() != "deposit 1" {
				t.Fatalf("first: %d %q, want 201 deposit 1", first.Code, first.Body)
			}
			replay := send()
			if replay.Code != http.StatusCreated || replay.Body.String() != "deposit 1" || replay.Header().Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %v %q, want the 201 replayed", replay.Code, replay.Header(), replay.Body)
			}
			var deposits int
			if err := lite.DB.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM deposits").Scan(&deposits); err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 1 || deposits != 1 {
				t.Fatalf("%d runs, %d deposits; want 1 and 1", runs.Load(), deposits)
			}
			rec, err := lite.Store.Lookup(t.Context(), idemhttp.Scope("tenant-42", http.MethodPost, route), "k1")
			if err != nil || rec.Response.Status != http.StatusCreated {
				t.Fatalf("record %+v (%v), want the 201 under the route's scope", rec, err)
			}
		})
	}
}
