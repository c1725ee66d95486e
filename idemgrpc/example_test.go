package idemgrpc_test

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/sqlite"
)

// A unary method protected by the server interceptor, called twice with
// the same key: the second call replays the first answer and creates
// nothing.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemgrpc-example")
	defer os.RemoveAll(dir)
	db, _ := sqlite.Open(filepath.Join(dir, "orders.db"))
	defer db.Close()
	driver, _ := sqlite.New(ctx, db, sqlite.Options{})
	store, _ := idem.New(driver, idem.Config{})
	_ = store.Migrate(ctx)
	_, _ = db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT)`)

	// The handler writes in the interceptor's transaction.
	create := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		tx, _ := idemgrpc.Tx[*sql.Tx](ctx)
		var id int64
		err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES (?) RETURNING id`,
			req.GetFields()["item"].GetStringValue()).Scan(&id)
		if err != nil {
			return nil, err
		}
		return structpb.NewStruct(map[string]any{"id": float64(id)})
	}
	protect, _ := idemgrpc.New(store, idemgrpc.Config{
		Principal: func(ctx context.Context) string { return "tenant-1" }, // from your authentication
	})
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(protect.UnaryInterceptor()))
	srv.RegisterService(serviceDesc(ordersService), handleFunc(create))
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor((&idemgrpc.Client{}).UnaryInterceptor()))
	defer conn.Close()

	// One intention, sent twice with one key (as after a lost answer).
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, idemgrpc.NewKey())
	req, _ := structpb.NewStruct(map[string]any{"item": "book"})
	for range 2 {
		reply := new(structpb.Struct)
		var header metadata.MD
		if err := conn.Invoke(ctx, createOrder, req, reply, grpc.Header(&header)); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("order %v, replayed %v\n", reply.GetFields()["id"].GetNumberValue(), header.Get(idemgrpc.MetadataReplayed))
	}
	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// order 1, replayed []
	// order 1, replayed [true]
	// orders: 1
}
