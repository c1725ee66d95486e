package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"

	"github.com/idemkit/idem"
)

// A request that never began is not an outcome: the function answers it
// with ErrNotAnOutcome (a 404 here, a status stored by default; a 400 or
// 422 needs no mark), Do returns that answer without storing it and rolls
// back what the function wrote, and the corrected request runs with the
// same key.
func ExampleErrNotAnOutcome() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()

	order := func(item int) idem.Func[*sql.Tx] {
		return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO orders (customer, item) VALUES (4711, ?)", item); err != nil {
				return idem.Response{}, err
			}
			if item > 100 {
				return idem.Response{Status: 404, Body: []byte("no such item")}, idem.ErrNotAnOutcome
			}
			return idem.Response{Status: 201, Body: fmt.Appendf(nil, "ordered item %d", item)}, nil
		}
	}
	for _, item := range []int{500, 88, 88} { // invalid, corrected, a retry
		req := idem.Request{Scope: "tenant-42 POST /orders", Key: "order-1",
			Fingerprint: idem.FingerprintRequest("POST", "/orders", fmt.Appendf(nil, `{"item":%d}`, item))}
		res, err := store.Do(ctx, req, order(item))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%v %d %s committed=%v\n", res.Outcome, res.Response.Status, res.Response.Body, res.Committed)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", n)
	// Output:
	// won 404 no such item committed=false
	// won 201 ordered item 88 committed=true
	// replay 201 ordered item 88 committed=false
	// orders: 1
}
