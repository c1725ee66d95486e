package transports

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemgrpc"
)

// grpcTransport is idemgrpc's server interceptor on a gRPC server over an
// in-memory connection: the auth interceptor first, the drawn ones
// (a recoverer, one that reads the request), idem last, or twice.
var grpcTransport = transport{
	name:     "grpc",
	layers:   []string{layerRecoverer, layerInspect, layerNested},
	features: rpcFeatures,
	vocab:    rpcVocabulary,
	start:    startGRPC,
}

type grpcServer struct {
	client *grpc.ClientConn
	calls  *calls
}

func startGRPC(t *rapid.T, h *harness, stack []string, protect bool) server {
	active := &calls{}
	chain := []grpc.UnaryServerInterceptor{
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			active.begin()
			defer active.end()
			return next(ctx, req)
		},
		func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			if u := md.Get(headerUser); len(u) == 1 {
				ctx = context.WithValue(ctx, principalKey{}, h.principal(u[0]))
			}
			return next(ctx, req)
		},
	}
	var idem grpc.UnaryServerInterceptor
	if protect {
		srv, err := idemgrpc.New(h.b.store, idemgrpc.Config{
			Principal: principalOf,
			Logger:    slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		idem = srv.UnaryInterceptor()
	}
	for _, l := range stack {
		switch l {
		case layerRecoverer:
			chain = append(chain, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
				defer func() {
					if p := recover(); p != nil {
						resp, err = nil, status.Errorf(codes.Internal, "recovered: %v", p)
					}
				}()
				return next(ctx, req)
			})
		case layerInspect:
			chain = append(chain, func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
				_ = req.(*structpb.Struct).AsMap() // logs it, say
				return next(ctx, req)
			})
		case layerNested:
			if idem != nil {
				chain = append(chain, idem)
			}
		}
	}
	if idem != nil {
		chain = append(chain, idem)
	}
	s := grpc.NewServer(grpc.ChainUnaryInterceptor(chain...))
	desc := &grpc.ServiceDesc{ServiceName: rpcService, HandlerType: (*any)(nil)}
	for _, rt := range []struct{ route, name string }{{routeOrders, "Create"}, {routeRefunds, "Refund"}} {
		desc.Methods = append(desc.Methods, grpc.MethodDesc{
			MethodName: rt.name,
			Handler: func(_ any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(structpb.Struct)
				if err := dec(in); err != nil {
					return nil, err
				}
				handle := func(ctx context.Context, req any) (any, error) {
					return grpcHandle(ctx, h, rt.route, req.(*structpb.Struct))
				}
				info := &grpc.UnaryServerInfo{FullMethod: rpcMethods.get(rt.route)}
				return ic(ctx, in, info, handle)
			},
		})
	}
	s.RegisterService(desc, struct{}{})
	lis := bufconn.Listen(1 << 20)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &grpcServer{client: cc, calls: active}
}

// grpcHandle is the service's handler: it reads the message, acts, and
// answers a message or a status.
func grpcHandle(ctx context.Context, h *harness, route string, in *structpb.Struct) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	id := ""
	if v := md.Get(headerStep); len(v) == 1 {
		id = v[0]
	}
	tx, _ := idemgrpc.Tx[*sql.Tx](ctx)
	d := h.act(ctx, tx, id, h.rpcView(ctx, route, in))
	_ = grpc.SetHeader(ctx, metadata.Pairs(strings.ToLower(headerRun), d.run))
	switch {
	case d.err != nil:
		return nil, d.err
	case d.answer == answerConflict:
		return nil, status.Error(codes.AlreadyExists, "the handler's answer")
	case d.answer == answerUnavailable:
		return nil, status.Error(codes.Unavailable, "the handler's answer")
	}
	return rpcAnswer(d.body), nil
}

func (s *grpcServer) scope(principal, route string) string {
	return idemgrpc.Scope(principal, rpcMethods.get(route))
}

func (s *grpcServer) wire(r request) string { return rpcWire(r) }

func (s *grpcServer) send(ctx context.Context, st *step) outcome {
	ctx, hangup := context.WithCancel(ctx)
	defer hangup()
	st.hangup = hangup
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, st.req.Key, headerUser, st.req.User, headerStep, st.id)
	var header, trailer metadata.MD
	out := new(structpb.Struct)
	err := s.client.Invoke(ctx, rpcMethods.get(st.req.Route), rpcMessage(st.req), out, grpc.Header(&header), grpc.Trailer(&trailer))
	s.calls.wait()
	runs := append(header.Get(headerRun), trailer.Get(headerRun)...)
	replayed := len(header.Get(idemgrpc.MetadataReplayed)) > 0 || len(trailer.Get(idemgrpc.MetadataReplayed)) > 0
	if ctx.Err() != nil {
		return outcome{Aborted: true, Err: "the client hung up"}
	}
	if err != nil {
		st := status.Convert(err)
		o := outcome{Status: st.Code().String(), Body: st.Message(), Replayed: replayed, Runs: runs}
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == "idem" {
				o.Code = info.GetReason()
			}
		}
		if o.Code == "" && !errors.Is(err, context.Canceled) {
			o.Body = st.Message()
		}
		return o
	}
	return outcome{Status: codes.OK.String(), Body: rpcBody(out), Replayed: replayed, Runs: runs}
}
