package idemconnect_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
)

const watchOrders = "/idemconnect.test.Streams/Watch"

// TestStreamProtected: a streaming procedure that Config.Protect selects
// is refused with Unimplemented before its handler runs, over every
// protocol, with a key or without: a key cannot protect a stream, and the
// stream must not run as if it did. DefaultProtect selects no stream.
func TestStreamProtected(t *testing.T) {
	all := func(connect.Spec) bool { return true }
	for _, p := range protocols {
		for _, tc := range []struct {
			name    string
			cfg     idemconnect.Config
			header  []string
			refused bool
		}{
			{"Protect selects it, with a key", idemconnect.Config{Protect: all}, []string{idemconnect.HeaderKey, "k1", "Tenant", "acme"}, true},
			{"Protect selects it, without a key", idemconnect.Config{Protect: all}, []string{"Tenant", "acme"}, true},
			{"DefaultProtect", idemconnect.Config{}, []string{idemconnect.HeaderKey, "k1", "Tenant", "acme"}, false},
		} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				o := newOrders(t, idem.Config{})
				var runs atomic.Int64
				h := func(_ context.Context, _ *connect.Request[structpb.Struct], stream *connect.ServerStream[structpb.Struct]) error {
					runs.Add(1)
					return stream.Send(&structpb.Struct{})
				}
				mux := http.NewServeMux()
				mux.Handle(watchOrders, connect.NewServerStreamHandler(watchOrders, h,
					connect.WithInterceptors(newServer(t, o, tc.cfg).Interceptor())))
				srv := startTLS(t, mux)
				c := connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+watchOrders, p.opts...)
				for i := range 2 {
					n, err := watch(t, c, tc.header...)
					switch {
					case tc.refused && (connect.CodeOf(err) != connect.CodeUnimplemented || errorReason(err) != idemconnect.ReasonStreamUnsupported || n != 0):
						t.Errorf("call %d: %d messages, %v (reason %q); want Unimplemented %s", i, n, err, errorReason(err), idemconnect.ReasonStreamUnsupported)
					case !tc.refused && (err != nil || n != 1):
						t.Errorf("call %d: %d messages, %v; want the stream served", i, n, err)
					}
				}
				wantRuns := int64(2)
				if tc.refused {
					wantRuns = 0
				}
				if got := runs.Load(); got != wantRuns {
					t.Errorf("the stream's handler ran %d times, want %d", got, wantRuns)
				}
			})
		}
	}
}

// watch calls a server stream with the header pairs and reads it to its
// end: the messages it got and the stream's error.
func watch(t *testing.T, c *connect.Client[structpb.Struct, structpb.Struct], header ...string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req := connect.NewRequest(&structpb.Struct{})
	for i := 0; i+1 < len(header); i += 2 {
		req.Header().Add(header[i], header[i+1])
	}
	stream, err := c.CallServerStream(ctx, req)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	n := 0
	for n < 100 && stream.Receive() {
		n++
	}
	return n, stream.Err()
}

// TestDefaultProtect: unary procedures with side effects are protected;
// streams, procedures declared free of side effects or idempotent, and
// gRPC's own services (health, reflection, channelz, CSDS) are not.
func TestDefaultProtect(t *testing.T) {
	unary := func(procedure string) connect.Spec {
		return connect.Spec{Procedure: procedure, StreamType: connect.StreamTypeUnary}
	}
	for _, tc := range []struct {
		name string
		spec connect.Spec
		want bool
	}{
		{"unary", unary(createOrder), true},
		{"server stream", connect.Spec{Procedure: watchOrders, StreamType: connect.StreamTypeServer}, false},
		{"bidi stream", connect.Spec{Procedure: watchOrders, StreamType: connect.StreamTypeBidi}, false},
		{"no side effects", connect.Spec{Procedure: getOrder, StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyNoSideEffects}, false},
		{"idempotent", connect.Spec{Procedure: getOrder, StreamType: connect.StreamTypeUnary, IdempotencyLevel: connect.IdempotencyIdempotent}, false},
		{"health", unary("/grpc.health.v1.Health/Check"), false},
		{"reflection", unary("/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"), false},
		{"channelz", unary("/grpc.channelz.v1.Channelz/GetTopChannels"), false},
		{"CSDS", unary("/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus"), false},
		{"a health service elsewhere", unary("/acme.grpc.health.v1.Health/Check"), true},
		{"a channelz elsewhere", unary("/acme.grpc.channelz.v1.Channelz/GetServers"), true},
	} {
		if got := idemconnect.DefaultProtect(tc.spec); got != tc.want {
			t.Errorf("%s: DefaultProtect(%s) = %v, want %v", tc.name, tc.spec.Procedure, got, tc.want)
		}
	}
}
