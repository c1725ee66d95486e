package idemgin_test

import (
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// TestNested: idemgin's middleware nested on one route (Wrap of a Wrap)
// protects the request once: one run of the handler, one payment, the 201
// stored and replayed, no 409 from an inner claim waiting on the outer
// run's lock.
func TestNested(t *testing.T) {
	for _, tc := range []struct {
		name    string
		install func(e *gin.Engine, mw *idemgin.Middleware[*sql.Tx], pay gin.HandlerFunc)
	}{
		{"Wrap of a Wrap", func(e *gin.Engine, mw *idemgin.Middleware[*sql.Tx], pay gin.HandlerFunc) {
			e.POST("/orders/:id/pay", mw.Wrap(mw.Wrap(pay)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			lite := idemtest.NewSQLite(t, idem.Config{WaitBound: 200 * time.Millisecond})
			if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			mw, err := idemgin.New(lite.Store, idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			pay := func(c *gin.Context) {
				runs.Add(1)
				tx, ok := idemhttp.Tx[*sql.Tx](c.Request.Context())
				if !ok {
					idemhttp.Fail(c.Writer, c.Request, errors.New("no transaction in the request context"))
					return
				}
				res, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id) VALUES (?)", c.Param("id"))
				if err != nil {
					idemhttp.Fail(c.Writer, c.Request, err)
					return
				}
				id, _ := res.LastInsertId()
				c.String(http.StatusCreated, fmt.Sprintf("payment %d", id))
			}
			e := gin.New()
			tc.install(e, mw, pay)
			send := func() *httptest.ResponseRecorder {
				req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders/7/pay", strings.NewReader(`{"amount":30}`))
				req.Header.Set("X-Tenant", tenant)
				req.Header.Set(idemhttp.HeaderKey, "pay-1")
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, req)
				return rec
			}
			first := send()
			if first.Code != http.StatusCreated || first.Body.String() != "payment 1" {
				t.Fatalf("first: %d %q, want 201 payment 1", first.Code, first.Body)
			}
			retry := send()
			if retry.Code != http.StatusCreated || retry.Body.String() != "payment 1" || retry.Header().Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %v %q, want the 201 replayed", retry.Code, retry.Header(), retry.Body)
			}
			var payments int
			if err := lite.DB.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM payments").Scan(&payments); err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 1 || payments != 1 {
				t.Fatalf("%d runs, %d payments; want 1 and 1", runs.Load(), payments)
			}
			rec, err := lite.Store.Lookup(t.Context(), idemhttp.Scope(tenant, http.MethodPost, "/orders/:id/pay"), "pay-1")
			if err != nil || rec.Response.Status != http.StatusCreated {
				t.Fatalf("record %+v (%v), want the 201 under the route's scope", rec, err)
			}
		})
	}
}

// TestNestedSilentHandler: a handler that writes nothing, wrapped twice,
// answers as it does wrapped once: 500 "no-response", nothing stored. The
// inner Wrap, passing the request through, must not send the outer run's
// header (an empty 200 that the outer run would store).
func TestNestedSilentHandler(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{})
	mw, err := idemgin.New(lite.Store, idemhttp.Config{Principal: func(r *http.Request) string { return "t1" }})
	if err != nil {
		t.Fatal(err)
	}
	e := gin.New()
	e.POST("/orders", mw.Wrap(mw.Wrap(func(*gin.Context) {})))
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader("{}"))
	req.Header.Set(idemhttp.HeaderKey, "k1")
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "no-response") {
		t.Errorf("got %d %q, want 500 no-response", rec.Code, rec.Body)
	}
	if n, err := lite.Store.Counts(t.Context(), ""); err != nil || n.Total() != 0 {
		t.Errorf("Counts: %+v, %v; want nothing stored", n, err)
	}
}
