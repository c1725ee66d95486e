package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/idemkit/idem"
)

// DoLease for work that calls out: the claim commits on its own as a lease,
// each finished step is recorded with its own writes, and a retry after a
// failure resumes from the last step instead of calling the provider again.
// The provider's idempotency key (DownstreamKey) is the same on every
// attempt, so even a step that was not recorded is done once by a provider
// that honours it.
func ExampleStore_DoLease() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE charges (order_id INTEGER, charge TEXT)`); err != nil {
		log.Fatal(err)
	}

	charges := map[string]string{} // a payment provider: its idempotency key → the charge made
	mailDown := true               // the confirmation e-mail fails on the first attempt
	pay := func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
		if step, _ := l.Step(); step != "charged" { // a takeover may have charged already
			key, err := l.DownstreamKey("charge")
			if err != nil {
				return idem.Response{}, err
			}
			if _, ok := charges[key]; !ok {
				charges[key] = fmt.Sprintf("ch_%d", len(charges)+1)
			}
			err = l.RecordStep(ctx, "charged", []byte(charges[key]), func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO charges (order_id, charge) VALUES (1, ?)`, charges[key])
				return err // committed with the step, or neither
			})
			if err != nil {
				return idem.Response{}, err
			}
		}
		if mailDown {
			mailDown = false
			return idem.Response{}, errors.New("mail server down") // the lease is released: a retry resumes
		}
		_, data := l.Step()
		return idem.Response{Status: http.StatusCreated, Body: data}, nil
	}

	req := idem.Request{Scope: `"tenant-42" POST "/orders/{id}/pay"`, Key: "pay-1", Fingerprint: idem.FingerprintRequest("POST", "/orders/1/pay", nil)}
	for attempt := 1; attempt <= 3; attempt++ { // the client retries until it has an answer
		res, err := store.DoLease(ctx, req, pay)
		if err != nil {
			fmt.Println(attempt, "error:", err)
			continue
		}
		fmt.Println(attempt, res.Outcome, res.Response.Status, string(res.Response.Body))
	}

	var rows int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM charges`).Scan(&rows); err != nil {
		log.Fatal(err)
	}
	fmt.Println("provider charges:", len(charges), "charge rows:", rows)
	// Output:
	// 1 error: mail server down
	// 2 won 201 ch_1
	// 3 replay 201 ch_1
	// provider charges: 1 charge rows: 1
}

// Lease is the manual form of DoLease: the caller holds the lease, records
// its steps and completes it, with its final writes in the completing
// transaction.
func ExampleStore_Lease() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()

	req := idem.Request{Scope: `"tenant-42" POST "/orders"`, Key: "k_lease", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	l, err := store.Lease(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	if l.Outcome != idem.Won {
		fmt.Println("someone else holds or did the work:", l.Outcome)
		return
	}
	if err := l.RecordStep(ctx, "reserved", []byte("stock-7"), nil); err != nil {
		log.Fatal(err)
	}
	res, err := l.Complete(ctx, idem.Response{Status: http.StatusCreated, Body: []byte("order 1")}, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, item) VALUES (42, 7)`)
		return err // committed with the response, guarded by the lease's token
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Outcome, res.Committed)

	again, err := store.Lease(ctx, req) // a retry replays the stored response
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(again.Outcome, again.Response.Status, string(again.Response.Body))
	// Output:
	// won true
	// replay 201 order 1
}
