package idemhttp_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// post sends a POST with body "b", key (none when ""), and tenant in
// X-Tenant to h, and returns the recorder.
func post(h http.Handler, path, key, tenant string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader("b"))
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	req.Header.Set("X-Tenant", tenant)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func problemCode(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var p struct{ Code string }
	_ = json.Unmarshal(rec.Body.Bytes(), &p)
	return p.Code
}

// TestRouteRequired: the middleware installed before routing (around a
// whole ServeMux) sees no route. A protected request is then refused with
// 500 "route-missing" and an ERROR log that names the fix, whether or not
// it has a key, the handler does not run and nothing is stored; a request
// with an unprotected method still reaches the mux. Wrapping the handler
// registered on the mux, Config.Unrouted and WithRoute each give the
// request through.
func TestRouteRequired(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	tests := []struct {
		name     string
		unrouted bool
		build    func(mw *idemhttp.Middleware[*sql.Tx]) http.Handler
		want     int
	}{
		{"around the mux", false, func(mw *idemhttp.Middleware[*sql.Tx]) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders", ok)
			return mw.Wrap(mux)
		}, http.StatusInternalServerError},
		{"lease mode around the mux", false, func(mw *idemhttp.Middleware[*sql.Tx]) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders", ok)
			return mw.WrapLease(mux)
		}, http.StatusInternalServerError},
		{"registered handler", false, func(mw *idemhttp.Middleware[*sql.Tx]) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders", mw.Wrap(ok))
			return mux
		}, http.StatusCreated},
		{"Unrouted around the mux", true, func(mw *idemhttp.Middleware[*sql.Tx]) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("POST /orders", ok)
			return mw.Wrap(mux)
		}, http.StatusCreated},
		{"WithRoute", false, func(mw *idemhttp.Middleware[*sql.Tx]) http.Handler {
			inner := mw.Wrap(ok)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				inner.ServeHTTP(w, idemhttp.WithRoute(r, "/orders"))
			})
		}, http.StatusCreated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var logged bytes.Buffer
			store := newStore(t)
			mw, err := idemhttp.New(store, idemhttp.Config{
				Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
				Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
				Unrouted:  tc.unrouted,
			})
			if err != nil {
				t.Fatal(err)
			}
			h := tc.build(mw)
			for _, key := range []string{"k1", ""} {
				rec := post(h, "/orders", key, "t1")
				if tc.want != http.StatusInternalServerError {
					if key != "" && rec.Code != tc.want {
						t.Errorf("key %q: %d %s, want %d", key, rec.Code, rec.Body, tc.want)
					}
					continue
				}
				if rec.Code != tc.want || problemCode(t, rec) != "route-missing" {
					t.Errorf("key %q: %d %s, want 500 route-missing", key, rec.Code, rec.Body)
				}
			}
			if tc.want != http.StatusInternalServerError {
				return
			}
			if log := logged.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "r.With") || !strings.Contains(log, "Unrouted") {
				t.Errorf("log %q: want an ERROR naming the fix", log)
			}
			if page, err := store.List(t.Context(), idem.ListFilter{}); err != nil || len(page.Records) != 0 {
				t.Errorf("records after a refusal: %+v, %v; want none", page.Records, err)
			}
			get := httptest.NewRecorder()
			h.ServeHTTP(get, httptest.NewRequest(http.MethodGet, "/nowhere", nil))
			if get.Code != http.StatusNotFound {
				t.Errorf("GET /nowhere: %d, want the mux's 404", get.Code)
			}
		})
	}
}

// TestScopeSelectsTenant: the middleware stores records under
// idemhttp.Scope(principal, method, route), so idem.ScopePrefix(tenant)
// lists one tenant's records and no other's.
func TestScopeSelectsTenant(t *testing.T) {
	store := newStore(t)
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/deposits", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	for _, tenant := range []string{"tenant-42", "tenant-420", "tenant-7"} {
		if rec := post(mux, "/accounts/1/deposits", "k-"+tenant, tenant); rec.Code != http.StatusCreated {
			t.Fatalf("%s: %d %s", tenant, rec.Code, rec.Body)
		}
	}
	page, err := store.List(t.Context(), idem.ListFilter{ScopePrefix: idem.ScopePrefix("tenant-42")})
	if err != nil {
		t.Fatal(err)
	}
	want := idemhttp.Scope("tenant-42", http.MethodPost, "/accounts/{id}/deposits")
	if len(page.Records) != 1 || page.Records[0].Scope != want || page.Records[0].Key != "k-tenant-42" {
		t.Fatalf("tenant-42's records: %+v, want one under %q", page.Records, want)
	}
	if want != `"tenant-42" POST "/accounts/{id}/deposits"` {
		t.Errorf("Scope = %q", want)
	}
}

// keylessEvents records the EventKeyless events a store emits.
type keylessEvents struct {
	mu     sync.Mutex
	scopes []string
}

func (k *keylessEvents) Observe(_ context.Context, e idem.Event) {
	if e.Kind == idem.EventKeyless {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.scopes = append(k.scopes, e.Scope)
	}
}

// TestKeyOptional: with Config.KeyOptional a protected request without a
// key runs the handler untouched, outside any transaction, stores nothing,
// and is reported as EventKeyless; a request with a key is protected as
// usual, and a malformed key is still refused. Without KeyOptional the
// keyless request gets 400.
func TestKeyOptional(t *testing.T) {
	for _, optional := range []bool{true, false} {
		t.Run(map[bool]string{true: "optional", false: "required"}[optional], func(t *testing.T) {
			events := &keylessEvents{}
			store := idemtest.NewSQLite(t, idem.Config{Observer: events}).Store
			mw, err := idemhttp.New(store, idemhttp.Config{
				Principal:   func(r *http.Request) string { return r.Header.Get("X-Tenant") },
				KeyOptional: optional,
			})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, inTx := idemhttp.Tx[*sql.Tx](r.Context())
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(map[bool]string{true: "in a transaction", false: "untouched"}[inTx]))
			})))
			keyless := post(mux, "/orders", "", "t1")
			if !optional {
				if keyless.Code != http.StatusBadRequest || problemCode(t, keyless) != "key-missing" || len(events.scopes) != 0 {
					t.Fatalf("keyless: %d %s, %d events; want 400 key-missing, none", keyless.Code, keyless.Body, len(events.scopes))
				}
				return
			}
			if keyless.Code != http.StatusCreated || keyless.Body.String() != "untouched" || keyless.Header().Get(idemhttp.HeaderRetention) != "" {
				t.Errorf("keyless: %d %q %v, want the handler's own 201 outside a transaction, no idem headers", keyless.Code, keyless.Body, keyless.Header())
			}
			if want := idemhttp.Scope("t1", http.MethodPost, "/orders"); len(events.scopes) != 1 || events.scopes[0] != want {
				t.Errorf("EventKeyless scopes %q, want [%q]", events.scopes, want)
			}
			if page, err := store.List(t.Context(), idem.ListFilter{}); err != nil || len(page.Records) != 0 {
				t.Errorf("records after a keyless request: %+v, %v; want none", page.Records, err)
			}
			if keyed := post(mux, "/orders", "k1", "t1"); keyed.Code != http.StatusCreated || keyed.Body.String() != "in a transaction" {
				t.Errorf("with a key: %d %q, want the handler inside a transaction", keyed.Code, keyed.Body)
			}
			if bad := post(mux, "/orders", `"unterminated`, "t1"); bad.Code != http.StatusBadRequest || problemCode(t, bad) != "key-invalid" {
				t.Errorf("malformed key: %d %s, want 400 key-invalid", bad.Code, bad.Body)
			}
			if len(events.scopes) != 1 {
				t.Errorf("%d EventKeyless, want 1", len(events.scopes))
			}
		})
	}
}
