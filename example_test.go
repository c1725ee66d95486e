package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlite"
)

// openOrders opens an in-memory SQLite database with an orders table and an
// idem store on it.
func openOrders(cfg idem.Config) (*sql.DB, *idem.Store[*sql.Tx]) {
	ctx := context.Background()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, customer INTEGER, item INTEGER)`); err != nil {
		log.Fatal(err)
	}
	driver, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idem.New(driver, cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	return db, store
}

// Do owns the transaction: the order and the idempotency record commit
// together, a retry replays, and the same key with another body is refused.
func Example() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()

	createOrder := func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		res, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, item) VALUES (4711, 88)`)
		if err != nil {
			return idem.Response{}, err
		}
		id, _ := res.LastInsertId()
		return idem.Response{
			Status: http.StatusCreated,
			Header: http.Header{"Location": {fmt.Sprintf("/orders/%d", id)}},
			Body:   []byte(fmt.Sprintf(`{"id":%d}`, id)),
		}, nil
	}

	body := []byte(`{"customer":4711,"item":88}`)
	req := idem.Request{
		Scope:       "tenant-42 POST /orders",
		Key:         "k_9f2c",
		Fingerprint: idem.FingerprintRequest("POST", "/orders", body),
	}
	for attempt := 1; attempt <= 2; attempt++ { // the client retries
		res, err := store.Do(ctx, req, createOrder)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(attempt, res.Outcome, res.Response.Status, res.Response.Header.Get("Location"), string(res.Response.Body))
	}

	other := req
	other.Fingerprint = idem.FingerprintRequest("POST", "/orders", []byte(`{"customer":4711,"item":99}`))
	res, err := store.Do(ctx, other, createOrder)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("other body:", res.Outcome)

	var orders int
	db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&orders)
	fmt.Println("orders:", orders)
	// Output:
	// 1 won 201 /orders/1 {"id":1}
	// 2 replay 201 /orders/1 {"id":1}
	// other body: mismatch
	// orders: 1
}

// Claim and Complete run inside a transaction the caller owns.
func ExampleStore_Claim() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()

	req := idem.Request{Scope: "tenant-42 POST /orders", Key: "k_1", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()

	claim, err := store.Claim(ctx, tx, req)
	if err != nil {
		log.Fatal(err)
	}
	if claim.Outcome != idem.Won {
		fmt.Println("someone else did the work:", claim.Outcome)
		return
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, item) VALUES (1, 2)`); err != nil {
		log.Fatal(err)
	}
	if err := claim.Complete(ctx, idem.Response{Status: http.StatusCreated, Body: []byte("created")}); err != nil {
		log.Fatal(err) // the deferred Rollback drops the order too
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	rec, err := store.Lookup(ctx, req.Scope, req.Key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rec.Completed, rec.Response.Status, string(rec.Response.Body))
	// Output: true 201 created
}

// With ReadFirstAlways, a retry of completed work is answered from one
// read, before any transaction begins; the first request still claims.
// (The default, ReadFirstAuto, does this once most recent requests were
// retries.)
func ExampleConfig_readFirst() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{ReadFirst: idem.ReadFirstAlways})
	defer db.Close()

	runs := 0
	req := idem.Request{Scope: "tenant-42 POST /orders", Key: "k_rf", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	for attempt := 1; attempt <= 3; attempt++ {
		res, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			runs++
			_, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, item) VALUES (1, 2)`)
			return idem.Response{Status: http.StatusCreated, Body: []byte("created")}, err
		})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(attempt, res.Outcome, res.Response.Status, string(res.Response.Body))
	}
	fmt.Println("work done:", runs)
	// Output:
	// 1 won 201 created
	// 2 replay 201 created
	// 3 replay 201 created
	// work done: 1
}

// A function error rolls the whole transaction back and stores nothing, so
// the client's retry does the work.
func ExampleStore_Do_error() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()

	req := idem.Request{Scope: "tenant-42 POST /payments", Key: "pay-1", Fingerprint: idem.FingerprintRequest("POST", "/payments", nil)}
	declined := errors.New("card declined")
	_, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		return idem.Response{}, declined
	})
	fmt.Println(err == declined)

	_, err = store.Lookup(ctx, req.Scope, req.Key)
	fmt.Println(errors.Is(err, idem.ErrNotFound))
	// Output:
	// true
	// true
}

// Bad input is refused before anything is written, with errors to test
// with errors.Is.
func ExampleValidateKey() {
	for _, key := range []string{"k_9f2c", "", "with\nnewline"} {
		err := idem.ValidateKey(key)
		fmt.Printf("%q valid=%v invalid-key=%v\n", key, err == nil, errors.Is(err, idem.ErrInvalidKey))
	}
	// Output:
	// "k_9f2c" valid=true invalid-key=false
	// "" valid=false invalid-key=true
	// "with\nnewline" valid=false invalid-key=true
}

// Records expire after the retention window (24 hours by default); Purge
// deletes expired ones in batches. Here a settable clock stands in for time.
func ExampleStore_Purge() {
	ctx := context.Background()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	db, store := openOrders(idem.Config{Retention: time.Hour, Clock: func() time.Time { return now }})
	defer db.Close()

	for _, key := range []string{"a", "b", "c"} {
		req := idem.Request{Scope: "s", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
		if _, err := store.Do(ctx, req, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 200}, nil
		}); err != nil {
			log.Fatal(err)
		}
	}
	now = now.Add(time.Hour + idem.ExpiryGrace(time.Hour)) // the window and its grace have passed
	res, err := store.Purge(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("purged", res.Deleted)
	// Output: purged 3
}

// FingerprintRequest frames each part with its length, so moving bytes
// between parts changes the fingerprint.
func ExampleFingerprintRequest() {
	a := idem.FingerprintRequest("POST", "/orders", []byte("x"))
	b := idem.FingerprintRequest("POST", "/order", []byte("sx"))
	fmt.Println(a == b)
	// Output: false
}
