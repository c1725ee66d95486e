package idemecho_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// TestNested: idemecho's middleware installed at two levels of one route
// (e.Use and the route, a group and the route, all three) protects the
// request once: one run of the handler, one order, the 201 stored and
// replayed, no 409 from an inner claim waiting on the outer run's lock.
// WrapLease on a route under Wrap cannot run in Wrap's transaction: it is
// refused with 500 "middleware-nested", and nothing is stored.
func TestNested(t *testing.T) {
	for _, tc := range []struct {
		name    string
		install func(a *app)
		path    string
		route   string
		want    int
		problem string
	}{
		{"e.Use and the route", func(a *app) {
			a.e.Use(a.mw.Wrap())
			a.e.POST("/orders/:id", a.create, a.mw.Wrap())
		}, "/orders/A-1", "/orders/:id", http.StatusCreated, ""},
		{"group and the route", func(a *app) {
			a.e.Group("/v1", a.mw.Wrap()).POST("/orders/:id", a.create, a.mw.Wrap())
		}, "/v1/orders/A-1", "/v1/orders/:id", http.StatusCreated, ""},
		{"e.Use, group and the route", func(a *app) {
			a.e.Use(a.mw.Wrap())
			a.e.Group("/v1", a.mw.Wrap()).POST("/orders/:id", a.create, a.mw.Wrap())
		}, "/v1/orders/A-1", "/v1/orders/:id", http.StatusCreated, ""},
		{"WrapLease under Wrap", func(a *app) {
			a.e.Use(a.mw.Wrap())
			a.e.POST("/orders/:id", a.create, a.mw.WrapLease())
		}, "/orders/A-1", "/orders/:id", http.StatusInternalServerError, "middleware-nested"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newNestedApp(t)
			tc.install(a)
			first := a.send(t, http.MethodPost, tc.path, "key-1", `{"item":"book"}`)
			if first.status != tc.want || first.problem() != tc.problem {
				t.Fatalf("first: %d %q, want %d %q", first.status, first.body, tc.want, tc.problem)
			}
			retry := a.send(t, http.MethodPost, tc.path, "key-1", `{"item":"book"}`)
			if tc.problem != "" {
				if retry.status != tc.want || retry.problem() != tc.problem {
					t.Fatalf("retry: %d %q, want %d %q again", retry.status, retry.body, tc.want, tc.problem)
				}
				if runs, orders, records := a.runs.Load(), a.count(t, "orders"), a.count(t, "idempotency_keys"); runs != 0 || orders != 0 || records != 0 {
					t.Fatalf("%d runs, %d orders, %d records; want none", runs, orders, records)
				}
				if log := a.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "WrapLease runs inside Wrap") {
					t.Fatalf("log %q, want an ERROR naming the nesting", log)
				}
				return
			}
			if retry.status != first.status || retry.body != first.body || retry.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %q %v, want %q replayed", retry.status, retry.body, retry.header, first.body)
			}
			if runs, orders := a.runs.Load(), a.count(t, "orders"); runs != 1 || orders != 1 {
				t.Fatalf("%d runs and %d orders, want 1 and 1", runs, orders)
			}
			rec, err := a.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, tc.route), "key-1")
			if err != nil || rec.Response.Status != http.StatusCreated {
				t.Fatalf("record %+v (%v), want the 201 under the route template's scope", rec, err)
			}
		})
	}
}

// newNestedApp is newApp with a short wait bound: without the nesting
// check, an inner claim waits it out on the outer run's lock.
func newNestedApp(t *testing.T) *app {
	t.Helper()
	lite := idemtest.NewSQLite(t, idem.Config{WaitBound: 200 * time.Millisecond})
	if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	a := &app{db: lite.DB, store: lite.Store}
	var err error
	a.mw, err = idemecho.New(lite.Store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Logger:    slog.New(slog.NewTextHandler(&a.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.e = echo.New()
	a.e.HideBanner = true
	return a
}
