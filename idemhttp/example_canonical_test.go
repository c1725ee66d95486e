package idemhttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// A client that re-serializes its JSON body when it retries, with the
// properties in another order and the numbers in other forms, gets the
// first answer replayed instead of 422; a body with another value is still
// a mismatch.
func ExampleCanonicalJSONFingerprint() {
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
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal:   func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Fingerprint: idemhttp.CanonicalJSONFingerprint,
	})
	if err != nil {
		log.Fatal(err)
	}
	var orders atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "order %d", orders.Add(1))
	})))
	send := func(body string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set(idemhttp.HeaderKey, "checkout-42")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Printf("%d replayed=%q %s\n", rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), strings.SplitN(rec.Body.String(), ",", 2)[0])
	}
	send(`{"item":88,"qty":2,"price":12.50}`)
	send(`{ "price": 12.5, "qty": 2.0, "item": 8.8e1 }`) // the same value, re-serialized
	send(`{"item":88,"qty":3,"price":12.50}`)            // another value under the same key
	// Output:
	// 201 replayed="" order 1
	// 201 replayed="true" order 1
	// 422 replayed="" {"type":"about:blank"
}
