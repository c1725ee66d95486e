package idemgrpc_test

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemtest"
)

// The test services have no .proto file and no generated code: their
// messages are google.protobuf.Struct, and their descriptors are written
// here. "idemgrpc.test.Orders" is registered in the global protobuf
// registry, as generated code would be; "idemgrpc.test.Unlisted" is not.
const (
	ordersService   = "idemgrpc.test.Orders"
	unlistedService = "idemgrpc.test.Unlisted"
	createOrder     = "/" + ordersService + "/Create"
	createUnlisted  = "/" + unlistedService + "/Create"
)

func init() {
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("idemgrpc/test/orders.proto"),
		Package:    proto.String("idemgrpc.test"),
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
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic(err)
	}
}

// handleFunc is a test service's Create.
type handleFunc func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error)

// serviceDesc describes a service named name whose one method, Create,
// takes and returns a Struct and runs the handleFunc it is registered with.
func serviceDesc(name string) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: name,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Create",
			Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(structpb.Struct)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := srv.(handleFunc)
				if interceptor == nil {
					return h(ctx, in)
				}
				info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + name + "/Create"}
				return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
					return h(ctx, req.(*structpb.Struct))
				})
			},
		}},
	}
}

// tenantOf is the tests' principal: the "tenant" metadata entry (a real
// service takes it from its authentication).
func tenantOf(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get("tenant"); len(v) > 0 {
		return v[0]
	}
	return ""
}

// orders is the test's database: an idem store and an orders table on one
// SQLite file.
type orders struct {
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	runs  atomic.Int64 // runs of the create handler
}

func newOrders(t testing.TB, cfg idem.Config) *orders {
	t.Helper()
	ctx := context.Background()
	lite := idemtest.NewSQLite(t, cfg)
	db, store := lite.DB, lite.Store
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &orders{db: db, store: store}
}

// create inserts the request's "item" in the handler's transaction and
// answers {"id": the new order's id, "item": item}.
func (o *orders) create(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	o.runs.Add(1)
	tx, ok := idemgrpc.Tx[*sql.Tx](ctx)
	if !ok {
		return nil, errors.New("no transaction in the handler's context")
	}
	item := req.GetFields()["item"].GetStringValue()
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES (?) RETURNING id`, item).Scan(&id); err != nil {
		return nil, err
	}
	return structpb.NewStruct(map[string]any{"id": float64(id), "item": item})
}

func (o *orders) count(t testing.TB) int {
	t.Helper()
	var n int
	if err := o.db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// serve starts a gRPC server on lis with the interceptors and both test
// services running h, and stops it when the test ends.
func serve(t testing.TB, lis net.Listener, h handleFunc, interceptors ...grpc.UnaryServerInterceptor) {
	t.Helper()
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(interceptors...))
	srv.RegisterService(serviceDesc(ordersService), h)
	srv.RegisterService(serviceDesc(unlistedService), h)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// bufServer serves h in memory behind the interceptors and returns a
// client connection to it with the client interceptors.
func bufServer(t testing.TB, h handleFunc, server []grpc.UnaryServerInterceptor, client ...grpc.UnaryClientInterceptor) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	serve(t, lis, h, server...)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client...),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// call invokes method with a Struct request built from fields and the
// metadata pairs, and returns the reply and the response header.
func call(t testing.TB, conn *grpc.ClientConn, method string, fields map[string]any, md ...string) (*structpb.Struct, metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	reply := new(structpb.Struct)
	var header metadata.MD
	err = conn.Invoke(ctx, method, req, reply, grpc.Header(&header))
	return reply, header, err
}
