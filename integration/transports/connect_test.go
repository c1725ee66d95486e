package transports

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/structpb"
	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemconnect"
)

// connectTransport is idemconnect's interceptor on Connect handlers served
// over HTTP/1.1: the auth interceptor first, the drawn ones (one that
// reads the request; connect's recover option), idem last, or twice.
var connectTransport = transport{
	name:     "connect",
	layers:   []string{layerRecoverer, layerInspect, layerNested},
	features: rpcFeatures,
	vocab:    rpcVocabulary,
	start:    startConnect,
}

type connectServer struct {
	srv   *httptest.Server
	calls *calls
}

func startConnect(t *rapid.T, h *harness, stack []string, protect bool) server {
	active := &calls{}
	interceptors := []connect.Interceptor{
		connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				active.begin()
				defer active.end()
				return next(ctx, req)
			}
		}),
		connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				return next(context.WithValue(ctx, principalKey{}, h.principal(req.Header().Get(headerUser))), req)
			}
		}),
	}
	var idem connect.Interceptor
	if protect {
		srv, err := idemconnect.New(h.b.store, idemconnect.Config{
			Principal: func(ctx context.Context, _ connect.AnyRequest) string { return principalOf(ctx) },
			Logger:    slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		idem = srv.Interceptor()
	}
	var options []connect.HandlerOption
	for _, l := range stack {
		switch l {
		case layerRecoverer:
			options = append(options, connect.WithRecover(func(_ context.Context, _ connect.Spec, _ http.Header, p any) error {
				return connect.NewError(connect.CodeInternal, fmt.Errorf("recovered: %v", p))
			}))
		case layerInspect:
			interceptors = append(interceptors, connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
				return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
					_ = req.Any().(*structpb.Struct).AsMap() // logs it, say
					return next(ctx, req)
				}
			}))
		case layerNested:
			if idem != nil {
				interceptors = append(interceptors, idem)
			}
		}
	}
	if idem != nil {
		interceptors = append(interceptors, idem)
	}
	mux := http.NewServeMux()
	for _, route := range []string{routeOrders, routeRefunds} {
		procedure := rpcMethods.get(route)
		handle := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
			return connectHandle(ctx, h, route, req)
		}
		opts := append([]connect.HandlerOption{connect.WithSchema(rpcSchemas[route]), connect.WithInterceptors(interceptors...)}, options...)
		mux.Handle(procedure, connect.NewUnaryHandler(procedure, handle, opts...))
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &connectServer{srv: srv, calls: active}
}

func connectHandle(ctx context.Context, h *harness, route string, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
	tx, _ := idemconnect.Tx[*sql.Tx](ctx)
	d := h.act(ctx, tx, req.Header().Get(headerStep), h.rpcView(ctx, route, req.Msg))
	if call, ok := connect.CallInfoForHandlerContext(ctx); ok {
		call.ResponseHeader().Set(headerRun, d.run)
	}
	switch {
	case d.err != nil:
		return nil, d.err
	case d.answer == answerConflict:
		return nil, connect.NewError(connect.CodeAlreadyExists, errors.New("the handler's answer"))
	case d.answer == answerUnavailable:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("the handler's answer"))
	}
	return connect.NewResponse(rpcAnswer(d.body)), nil
}

func (s *connectServer) scope(principal, route string) string {
	return idemconnect.Scope(principal, rpcMethods.get(route))
}

func (s *connectServer) wire(r request) string { return rpcWire(r) }

func (s *connectServer) send(ctx context.Context, st *step) outcome {
	ctx, hangup := context.WithCancel(ctx)
	defer hangup()
	st.hangup = hangup
	client := connect.NewClient[structpb.Struct, structpb.Struct](s.srv.Client(), s.srv.URL+rpcMethods.get(st.req.Route))
	req := connect.NewRequest(rpcMessage(st.req))
	req.Header().Set(idemconnect.HeaderKey, st.req.Key)
	req.Header().Set(headerUser, st.req.User)
	req.Header().Set(headerStep, st.id)
	resp, err := client.CallUnary(ctx, req)
	s.calls.wait()
	if ctx.Err() != nil {
		return outcome{Aborted: true, Err: "the client hung up"}
	}
	if err != nil {
		var ce *connect.Error
		o := outcome{Status: codes.Code(connect.CodeOf(err)).String(), Code: idemconnect.Reason(err)}
		if errors.As(err, &ce) {
			o.Body = ce.Message()
			o.Replayed = ce.Meta().Get(idemconnect.HeaderReplayed) == "true"
			o.Runs = ce.Meta().Values(headerRun)
		}
		return o
	}
	return outcome{Status: codes.OK.String(), Body: rpcBody(resp.Msg), Replayed: resp.Header().Get(idemconnect.HeaderReplayed) == "true",
		Runs: resp.Header().Values(headerRun)}
}
