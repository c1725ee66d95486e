package idemconnect_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/sqlite"
)

// A unary procedure protected by the handler interceptor, called twice
// with the same key: the second call replays the first answer and creates
// nothing.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemconnect-example")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "orders.db"))
	defer db.Close()
	driver, _ := sqlite.New(ctx, db, sqlite.Options{})
	store, _ := idem.New(driver, idem.Config{})
	_ = store.Migrate(ctx)
	_, _ = db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT)`)

	// The handler writes in the interceptor's transaction.
	create := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		tx, _ := idemconnect.Tx[*sql.Tx](ctx)
		var id int64
		err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES (?) RETURNING id`,
			req.Msg.GetFields()["item"].GetStringValue()).Scan(&id)
		if err != nil {
			return nil, err
		}
		msg, err := structpb.NewStruct(map[string]any{"id": float64(id)})
		return connect.NewResponse(msg), err
	}
	protect, _ := idemconnect.New(store, idemconnect.Config{
		Principal: func(context.Context, connect.AnyRequest) string { return "tenant-1" }, // from your authentication
	})
	// Generated code passes connect.WithSchema; so must a hand-made handler.
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, create,
		connect.WithSchema(schema(createOrder)), connect.WithInterceptors(protect.Interceptor())))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+createOrder,
		connect.WithSchema(schema(createOrder)), connect.WithInterceptors((&idemconnect.Client{}).Interceptor()))

	// One intention, sent twice with one key (as after a lost answer).
	key := idemconnect.NewKey()
	for range 2 {
		msg, _ := structpb.NewStruct(map[string]any{"item": "book"})
		req := connect.NewRequest(msg)
		req.Header().Set(idemconnect.HeaderKey, key)
		resp, err := client.CallUnary(ctx, req)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("order %v, replayed %q\n", resp.Msg.GetFields()["id"].GetNumberValue(), resp.Header().Get(idemconnect.HeaderReplayed))
	}
	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// order 1, replayed ""
	// order 1, replayed "true"
	// orders: 1
}
