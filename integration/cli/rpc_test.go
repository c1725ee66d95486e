package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/sqlite"
)

// The procedure both stacks serve here: /cli.Orders/Create, taking and
// returning a google.protobuf.Struct; with "fail" set it answers
// FailedPrecondition (an outcome, stored; InvalidArgument is not).
const cliCreate = "/cli.Orders/Create"

func cliCreateSchema(t *testing.T) protoreflect.MethodDescriptor {
	t.Helper()
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:       proto.String("cli/orders.proto"),
		Package:    proto.String("cli"),
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
	}, protoregistry.GlobalFiles)
	if err != nil {
		t.Fatal(err)
	}
	return fd.Services().Get(0).Methods().Get(0)
}

// TestRPCRecords: the answers idemgrpc and idemconnect really store, an
// error and a success each, are told apart by idem inspect and idem list
// (both of status 0), which read the code from the stored answer.
func TestRPCRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rpc.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := sqlite.New(t.Context(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	tenant := func(context.Context) string { return "t1" }

	// Connect.
	protect, err := idemconnect.New(store, idemconnect.Config{Principal: func(ctx context.Context, _ connect.AnyRequest) string { return tenant(ctx) }})
	if err != nil {
		t.Fatal(err)
	}
	schema := cliCreateSchema(t)
	mux := http.NewServeMux()
	mux.Handle(cliCreate, connect.NewUnaryHandler(cliCreate,
		func(_ context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
			if req.Msg.GetFields()["fail"].GetBoolValue() {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("insufficient funds"))
			}
			msg, err := structpb.NewStruct(map[string]any{"id": 7.0})
			return connect.NewResponse(msg), err
		}, connect.WithSchema(schema), connect.WithInterceptors(protect.Interceptor())))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	client := connect.NewClient[structpb.Struct, structpb.Struct](web.Client(), web.URL+cliCreate, connect.WithSchema(schema))
	for key, fail := range map[string]bool{"connect-ok": false, "connect-err": true} {
		msg, _ := structpb.NewStruct(map[string]any{"fail": fail})
		req := connect.NewRequest(msg)
		req.Header().Set(idemconnect.HeaderKey, key)
		if _, err := client.CallUnary(t.Context(), req); (err != nil) != fail {
			t.Fatalf("connect %s: %v", key, err)
		}
	}

	// gRPC, with a service described by hand.
	gprotect, err := idemgrpc.New(store, idemgrpc.Config{Principal: tenant})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(gprotect.UnaryInterceptor()))
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "cli.Orders",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Create",
			Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(structpb.Struct)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(_ context.Context, req any) (any, error) {
					if req.(*structpb.Struct).GetFields()["fail"].GetBoolValue() {
						return nil, status.Error(codes.FailedPrecondition, "insufficient funds")
					}
					return structpb.NewStruct(map[string]any{"id": 7.0})
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: cliCreate}, h)
			},
		}},
	}, struct{}{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	for key, fail := range map[string]bool{"grpc-ok": false, "grpc-err": true} {
		in, _ := structpb.NewStruct(map[string]any{"fail": fail})
		ctx := metadata.AppendToOutgoingContext(t.Context(), idemgrpc.MetadataKey, key)
		if err := conn.Invoke(ctx, cliCreate, in, new(structpb.Struct)); (err != nil) != fail {
			t.Fatalf("grpc %s: %v", key, err)
		}
	}

	type answer struct {
		Protocol, Code, Message string
		MessageBytes            int `json:"message_bytes"`
	}
	for _, tc := range []struct {
		scope, key string
		want       answer
	}{
		{idemconnect.Scope("t1", cliCreate), "connect-ok", answer{Protocol: "connect", Code: "OK"}},
		{idemconnect.Scope("t1", cliCreate), "connect-err", answer{Protocol: "connect", Code: "FailedPrecondition", Message: "insufficient funds"}},
		{idemgrpc.Scope("t1", cliCreate), "grpc-ok", answer{Protocol: "grpc", Code: "OK"}},
		{idemgrpc.Scope("t1", cliCreate), "grpc-err", answer{Protocol: "grpc", Code: "FailedPrecondition", Message: "insufficient funds"}},
	} {
		code, out, errText := idemRun(t, "inspect", "-dsn", path, "-scope", tc.scope, "-key", tc.key, "-json")
		var rec struct {
			Status int
			Answer *answer
		}
		if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || rec.Status != 0 || rec.Answer == nil {
			t.Errorf("inspect %s: exit %d, %v: %s %s", tc.key, code, err, out, errText)
			continue
		}
		got := *rec.Answer
		if (tc.want.Code == "OK") != (got.MessageBytes > 0) {
			t.Errorf("inspect %s: a %d-byte message with code %s", tc.key, got.MessageBytes, got.Code)
		}
		got.MessageBytes = 0
		if got != tc.want {
			t.Errorf("inspect %s: answer %+v, want %+v", tc.key, got, tc.want)
		}
	}
}
