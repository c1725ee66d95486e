package idemconnect_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idemtest"
)

// The test service has no .proto file and no generated code: its messages
// are google.protobuf.Struct and its descriptor is written here and
// registered in the global registry, as generated code would do. Create
// has side effects; Get is declared NO_SIDE_EFFECTS; Other is a second
// procedure with side effects (another scope).
const (
	ordersService = "idemconnect.test.Orders"
	createOrder   = "/" + ordersService + "/Create"
	getOrder      = "/" + ordersService + "/Get"
	otherOrder    = "/" + ordersService + "/Other"
)

var ordersDesc protoreflect.ServiceDescriptor

func init() {
	noSideEffects := descriptorpb.MethodOptions_NO_SIDE_EFFECTS
	method := func(name string, opts *descriptorpb.MethodOptions) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".google.protobuf.Struct"),
			OutputType: proto.String(".google.protobuf.Struct"),
			Options:    opts,
		}
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("idemconnect/test/orders.proto"),
		Package:    proto.String("idemconnect.test"),
		Dependency: []string{"google/protobuf/struct.proto"},
		Syntax:     proto.String("proto3"),
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Orders"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Create", nil),
				method("Get", &descriptorpb.MethodOptions{IdempotencyLevel: &noSideEffects}),
				method("Other", nil),
			},
		}},
	}
	f, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	if err != nil {
		panic(err)
	}
	if err := protoregistry.GlobalFiles.RegisterFile(f); err != nil {
		panic(err)
	}
	ordersDesc = f.Services().Get(0)
}

// schema is the method descriptor of a procedure, "/pkg.Service/Method".
func schema(procedure string) protoreflect.MethodDescriptor {
	return ordersDesc.Methods().ByName(protoreflect.Name(procedure[len("/"+ordersService+"/"):]))
}

// options are the handler or client options generated code passes for a
// procedure: its schema and idempotency level.
func options(procedure string) []connect.Option {
	opts := []connect.Option{connect.WithSchema(schema(procedure))}
	if procedure == getOrder {
		opts = append(opts, connect.WithIdempotency(connect.IdempotencyNoSideEffects))
	}
	return opts
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type handleFunc func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error)

// tenantOf is the tests' principal: the "Tenant" header (a real service
// takes it from its authentication).
func tenantOf(_ context.Context, req connect.AnyRequest) string { return req.Header().Get("Tenant") }

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
// answers {"id": the new order's id, "item": item}, with an X-Order
// response header and an X-Total trailer.
func (o *orders) create(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
	o.runs.Add(1)
	tx, ok := idemconnect.Tx[*sql.Tx](ctx)
	if !ok {
		return nil, errors.New("no transaction in the handler's context")
	}
	item := req.Msg.GetFields()["item"].GetStringValue()
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES (?) RETURNING id`, item).Scan(&id); err != nil {
		return nil, err
	}
	msg, err := structpb.NewStruct(map[string]any{"id": float64(id), "item": item, "tags": map[string]any{"b": 2, "a": 1, "c": []any{"x", true}}})
	if err != nil {
		return nil, err
	}
	resp := connect.NewResponse(msg)
	resp.Header().Set("X-Order", item)
	resp.Trailer().Set("X-Total", "1")
	return resp, nil
}

func (o *orders) count(t testing.TB) int {
	t.Helper()
	var n int
	if err := o.db.QueryRow(`SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// newServer makes the interceptor on o's store with cfg (Principal and
// Logger defaulted for the tests).
func newServer(t testing.TB, o *orders, cfg idemconnect.Config) *idemconnect.Server[*sql.Tx] {
	t.Helper()
	if cfg.Principal == nil {
		cfg.Principal = tenantOf
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := idemconnect.New(o.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// serve serves h on every test procedure behind the interceptors, over TLS
// with HTTP/2 (the gRPC protocol needs it), and returns the server.
func serve(t testing.TB, h handleFunc, interceptors ...connect.Interceptor) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for _, p := range []string{createOrder, getOrder, otherOrder} {
		opts := []connect.HandlerOption{connect.WithInterceptors(interceptors...)}
		for _, o := range options(p) {
			opts = append(opts, o)
		}
		mux.Handle(p, connect.NewUnaryHandler(p, h, opts...))
	}
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// protocol is one way a client talks to the server.
type protocol struct {
	name string
	opts []connect.ClientOption
}

var protocols = []protocol{
	{"connect+json", []connect.ClientOption{connect.WithProtoJSON()}},
	{"connect+proto", nil},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// client is a typed client of procedure on srv, built as generated code
// builds one, with the protocol's and the extra options.
func client(srv *httptest.Server, procedure string, p protocol, extra ...connect.ClientOption) *connect.Client[structpb.Struct, structpb.Struct] {
	var opts []connect.ClientOption
	for _, o := range options(procedure) {
		opts = append(opts, o)
	}
	opts = append(append(opts, p.opts...), extra...)
	return connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+procedure, opts...)
}

// call sends a Struct built from fields with the header pairs.
func call(t testing.TB, c *connect.Client[structpb.Struct, structpb.Struct], fields map[string]any, header ...string) (*connect.Response[structpb.Struct], error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	msg, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	req := connect.NewRequest(msg)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header().Add(header[i], header[i+1])
	}
	return c.CallUnary(ctx, req)
}

// startTLS serves h over TLS with HTTP/2 until the test ends.
func startTLS(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
