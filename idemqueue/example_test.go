package idemqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/sqlite"
)

// A message delivered twice (its first ack was lost) creates one order;
// the second delivery is acknowledged with the first one's result.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemqueue-example")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "orders.db"))
	defer db.Close()
	driver, _ := sqlite.New(ctx, db, sqlite.Options{})
	store, _ := idem.New(driver, idem.Config{})
	_ = store.Migrate(ctx)
	_, _ = db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT)`)

	consumer, _ := idemqueue.New(store, idemqueue.Config{Name: "order-writer"})
	createOrder := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		var id int64
		err := tx.QueryRowContext(ctx, `INSERT INTO orders (body) VALUES (?) RETURNING id`, m.Data).Scan(&id)
		return fmt.Appendf(nil, "order %d", id), err
	}

	m := idemqueue.Message{Queue: "ORDERS", ID: "msg-7", Data: []byte(`{"item":88}`), Delivery: 1}
	for range 2 {
		d := consumer.Process(ctx, m, createOrder)
		fmt.Println(d.Action, d.Outcome, string(d.Result))
		m.Delivery++
	}
	m.Data = []byte(`{"item":99}`) // a publisher reusing the id for another order
	d := consumer.Process(ctx, m, createOrder)
	fmt.Println(d.Action, d.Outcome)

	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// ack won order 1
	// ack replay order 1
	// reject mismatch
	// orders: 1
}
