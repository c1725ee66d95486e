package idemhttp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// A request that fails validation is not an outcome: the 400 reaches the
// client, is not stored, and the corrected request runs with the same key.
// A handler marks another status the same way with NotAnOutcome (here a
// 404 for an item that does not exist, answered before any work).
func ExampleNotAnOutcome() {
	ctx := context.Background()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idem.New(drv, idem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in struct{ Item int }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Item <= 0 {
			http.Error(w, "item must be a positive number", http.StatusBadRequest) // not stored by default
			return
		}
		if in.Item > 100 {
			idemhttp.NotAnOutcome(r) // stored by default; not here: nothing began
			http.Error(w, "no such item", http.StatusNotFound)
			return
		}
		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
		var id int64
		if err := tx.QueryRowContext(r.Context(), "INSERT INTO orders (item) VALUES (?) RETURNING id", in.Item).Scan(&id); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"item":%d}`, id, in.Item)
	})))

	post := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set(idemhttp.HeaderKey, key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Printf("%d replayed=%q %s\n", rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), strings.TrimSpace(rec.Body.String()))
	}
	post("order-1", `{"item":-1}`)  // invalid
	post("order-1", `{"item":500}`) // corrected, but no such item
	post("order-1", `{"item":88}`)  // corrected again: runs with the same key
	post("order-1", `{"item":88}`)  // a retry: the stored answer
	// Output:
	// 400 replayed="" item must be a positive number
	// 404 replayed="" no such item
	// 201 replayed="" {"id":1,"item":88}
	// 201 replayed="true" {"id":1,"item":88}
}
