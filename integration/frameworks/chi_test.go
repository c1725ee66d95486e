package frameworks_test

import (
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

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
