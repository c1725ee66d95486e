package idemhttp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// The middleware on SQLite: the order and the stored answer commit in one
// transaction; a retry replays the answer; the same key with another body
// is refused.
func Example() {
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
		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
		var in struct{ Item int }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, "bad order", http.StatusBadRequest)
			return
		}
		var id int64
		err := tx.QueryRowContext(r.Context(), "INSERT INTO orders (item) VALUES (?) RETURNING id", in.Item).Scan(&id)
		if err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.Header().Set("Location", fmt.Sprintf("/orders/%d", id))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d,"item":%d}`, id, in.Item)
	})))

	post := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("X-Tenant", "acme")
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		h := rec.Header()
		if h.Get("Content-Type") == "application/problem+json" {
			var p struct{ Code string }
			json.Unmarshal(rec.Body.Bytes(), &p)
			fmt.Printf("%d problem=%s\n", rec.Code, p.Code)
			return
		}
		fmt.Printf("%d location=%s replayed=%q retention=%s body=%s\n",
			rec.Code, h.Get("Location"), h.Get(idemhttp.HeaderReplayed), h.Get(idemhttp.HeaderRetention), rec.Body)
	}
	post("order-1", `{"item":88}`)
	post("order-1", `{"item":88}`) // a retry: the same answer, not a second order
	post("order-1", `{"item":89}`) // the same key for another request
	post("", `{"item":88}`)        // no key
	post("order-2", `{"item":89}`)

	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// 201 location=/orders/1 replayed="" retention=86400 body={"id":1,"item":88}
	// 201 location=/orders/1 replayed="true" retention=86400 body={"id":1,"item":88}
	// 422 problem=key-mismatch
	// 400 problem=key-missing
	// 201 location=/orders/2 replayed="" retention=86400 body={"id":2,"item":89}
	// orders: 2
}

// The client half: one key per request, the same key and body on every
// retry.
func ExampleTransport() {
	var attempts atomic.Int32
	keys := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		keys <- r.Header.Get(idemhttp.HeaderKey)
		if attempts.Add(1) < 3 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created from %s", body)
	}))
	defer srv.Close()

	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 5}}
	resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"item":88}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	close(keys)
	distinct := map[string]bool{}
	for k := range keys {
		distinct[k] = true
	}
	fmt.Println(resp.StatusCode, string(body))
	fmt.Println("attempts:", attempts.Load(), "distinct keys:", len(distinct))
	// Output:
	// 201 created from {"item":88}
	// attempts: 3 distinct keys: 1
}

// A custom fingerprint: the invoice in the path and the amount in the body
// identify a payment; a free-text note does not, so a retry that rewrote the
// note still replays. The route stays the pattern, so the same key sent to
// pay another invoice is a mismatch.
func ExampleConfig_fingerprint() {
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
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Fingerprint: func(r *http.Request, route string, body []byte) idem.Fingerprint {
			var in struct{ Amount int64 }
			_ = json.Unmarshal(body, &in) // a body that does not parse fingerprints as amount 0
			var h idem.Hasher
			h.AddString(r.Method)
			h.AddString(route)
			h.AddString(r.PathValue("id"))
			h.AddString(fmt.Sprint(in.Amount))
			return h.Sum()
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	var payments atomic.Int64
	mux := http.NewServeMux()
	mux.Handle("POST /invoices/{id}/pay", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := payments.Add(1)
		fmt.Fprintf(w, "payment %d for invoice %s", n, r.PathValue("id"))
	})))
	pay := func(invoice, body string) {
		req := httptest.NewRequest(http.MethodPost, "/invoices/"+invoice+"/pay", strings.NewReader(body))
		req.Header.Set("X-Tenant", "acme")
		req.Header.Set(idemhttp.HeaderKey, "checkout-42")
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		fmt.Printf("%d replayed=%q %s\n", rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), strings.SplitN(rec.Body.String(), "\n", 2)[0])
	}
	pay("1", `{"amount":500,"note":"first try"}`)
	pay("1", `{"amount":500,"note":"retry"}`) // the note is not part of the fingerprint
	pay("2", `{"amount":500}`)                // another invoice with the same key
	// Output:
	// 200 replayed="" payment 1 for invoice 1
	// 200 replayed="true" payment 1 for invoice 1
	// 422 replayed="" {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"This Idempotency-Key was already used with a different request (another resource, query or body). Use a new key for a new operation.","code":"key-mismatch"}
}
