package idem_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// DoBatch decides many keys in one transaction: the function gets only the
// requests it won and writes their effects together; each key's response is
// stored with them, in one commit. A retry of the batch replays every key,
// and a batch that shares keys with an earlier one does only the new ones.
func ExampleStore_DoBatch() {
	ctx := context.Background()
	db, store := openOrders(idem.Config{})
	defer db.Close()

	order := func(key, body string) idem.Request {
		return idem.Request{Scope: "tenant-42 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(body))}
	}
	createOrders := func(ctx context.Context, tx *sql.Tx, won []idem.Request) ([]idem.Response, error) {
		resps := make([]idem.Response, len(won))
		for i, r := range won {
			res, err := tx.ExecContext(ctx, `INSERT INTO orders (customer, item) VALUES (4711, 88)`)
			if err != nil {
				return nil, err
			}
			id, _ := res.LastInsertId()
			resps[i] = idem.Response{Status: http.StatusCreated, Body: []byte(fmt.Sprintf(`{"id":%d,"key":%q}`, id, r.Key))}
		}
		return resps, nil
	}

	first := []idem.Request{order("k_b", "b"), order("k_a", "a")}
	second := []idem.Request{order("k_a", "a"), order("k_c", "c"), order("k_b", "other body")}
	for _, batch := range [][]idem.Request{first, second} {
		results, err := store.DoBatch(ctx, batch, createOrders)
		if err != nil {
			log.Fatal(err)
		}
		for i, res := range results {
			fmt.Println(strings.TrimSpace(batch[i].Key + " " + res.Outcome.String() + " " + string(res.Response.Body)))
		}
	}
	var orders int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&orders); err != nil {
		log.Fatal(err)
	}
	fmt.Println("orders:", orders)
	// Output:
	// k_b won {"id":2,"key":"k_b"}
	// k_a won {"id":1,"key":"k_a"}
	// k_a replay {"id":1,"key":"k_a"}
	// k_c won {"id":3,"key":"k_c"}
	// k_b mismatch
	// orders: 3
}
