package idemhttp_test

import (
	"database/sql"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// TestBusyDatabase: on SQLite, a request that waited out the store's bound
// for the database's write lock (another connection held a write
// transaction) and found no record for its key is told the database was
// busy, not that its key is in progress; once the database is free, the
// same key does the work.
func TestBusyDatabase(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{WaitBound: 100 * time.Millisecond, MaxAttempts: 1})
	db, store := lite.DB, lite.Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "p" }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	})))
	send := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("{}"))
		req.Header.Set(idemhttp.HeaderKey, "k")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		return rec
	}

	holder, err := db.BeginTx(t.Context(), &sql.TxOptions{}) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(t.Context(), "CREATE TABLE other_work (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	rec := send()
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), `"code":"database-busy"`) ||
		!strings.Contains(rec.Body.String(), "The database was busy") || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("request while the database is held: %d %v %s; want 409 database-busy saying the database was busy, with Retry-After", rec.Code, rec.Header(), rec.Body)
	}
	if rec := send(); rec.Code != http.StatusCreated {
		t.Fatalf("the same key once the database is free: %d %s, want 201", rec.Code, rec.Body)
	}
}
