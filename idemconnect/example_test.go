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
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/sqlite"
)

// createOrderProcedure is the example's procedure, "/package.Service/Method".
const createOrderProcedure = "/shop.v1.Orders/Create"

// createOrderSchema describes createOrderProcedure as generated code would
// (connect.WithSchema): a service shop.v1.Orders whose method Create takes
// and returns a google.protobuf.Struct. Without a .proto file and protoc,
// the descriptor is written by hand; idemconnect needs it to rebuild a
// stored answer as the procedure's response type. A service of your own
// messages names their types instead, from their generated Go packages.
func createOrderSchema() protoreflect.MethodDescriptor {
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("shop/v1/orders.proto"),
		Package:    proto.String("shop.v1"),
		Dependency: []string{"google/protobuf/struct.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{{
				Name:       proto.String("Create"),
				InputType:  proto.String(".google.protobuf.Struct"),
				OutputType: proto.String(".google.protobuf.Struct"),
			}},
		}},
	}, protoregistry.GlobalFiles) // resolves google/protobuf/struct.proto
	if err != nil {
		panic(err)
	}
	return fd.Services().Get(0).Methods().Get(0)
}

// A unary procedure protected by the handler interceptor, served and
// called without generated code (connect.NewUnaryHandler and
// connect.NewClient, with the schema generated code would pass), called
// twice with the same key: the second call replays the first answer and
// creates nothing.
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
	schema := createOrderSchema()
	mux := http.NewServeMux()
	mux.Handle(createOrderProcedure, connect.NewUnaryHandler(createOrderProcedure, create,
		connect.WithSchema(schema), connect.WithInterceptors(protect.Interceptor())))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+createOrderProcedure,
		connect.WithSchema(schema), connect.WithInterceptors((&idemconnect.Client{}).Interceptor()))

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
