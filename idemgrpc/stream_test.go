package idemgrpc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

const (
	streamsService = "idemgrpc.test.Streams"
	watchOrders    = "/" + streamsService + "/Watch"
)

// streamFunc is a test stream's handler: one request, then messages.
type streamFunc func(req *structpb.Struct, stream grpc.ServerStream) error

// streamDesc describes the service of one server-streaming method, Watch.
func streamDesc() *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: streamsService,
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Watch",
			ServerStreams: true,
			Handler: func(srv any, stream grpc.ServerStream) error {
				in := new(structpb.Struct)
				if err := stream.RecvMsg(in); err != nil {
					return err
				}
				return srv.(streamFunc)(in, stream)
			},
		}},
	}
}

// watch calls Watch with the metadata pairs and reads the stream to its
// end: the messages it got and the stream's error.
func watch(t *testing.T, conn *grpc.ClientConn, md ...string) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, md...)
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, watchOrders)
	if err != nil {
		return 0, err
	}
	if err := stream.SendMsg(&structpb.Struct{}); err != nil {
		return 0, err
	}
	if err := stream.CloseSend(); err != nil {
		return 0, err
	}
	for n := 0; n < 100; n++ {
		if err := stream.RecvMsg(new(structpb.Struct)); err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			return n, err
		}
	}
	return 100, errors.New("the stream did not end")
}

// TestStreamProtected: a streaming method that Config.Protect selects is
// refused with Unimplemented before its handler runs, with a key or
// without: a key cannot protect a stream, and the stream must not run as
// if it did. Under KeyOptional a keyless stream goes through. Without
// Protect set, streams go through untouched, as under idemconnect's
// DefaultProtect.
func TestStreamProtected(t *testing.T) {
	all := func(string) bool { return true }
	for _, tc := range []struct {
		name    string
		cfg     idemgrpc.Config
		md      []string
		refused bool
	}{
		{"Protect selects it, with a key", idemgrpc.Config{Protect: all}, []string{idemgrpc.MetadataKey, "k1", "tenant", "acme"}, true},
		{"Protect selects it, without a key", idemgrpc.Config{Protect: all}, []string{"tenant", "acme"}, true},
		{"KeyOptional, with a key", idemgrpc.Config{Protect: all, KeyOptional: true}, []string{idemgrpc.MetadataKey, "k1", "tenant", "acme"}, true},
		{"KeyOptional, without a key", idemgrpc.Config{Protect: all, KeyOptional: true}, []string{"tenant", "acme"}, false},
		{"Protect leaves it out", idemgrpc.Config{Protect: func(m string) bool { return m != watchOrders }}, []string{idemgrpc.MetadataKey, "k1"}, false},
		{"no Protect set", idemgrpc.Config{}, []string{idemgrpc.MetadataKey, "k1", "tenant", "acme"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newOrders(t, idem.Config{})
			var runs atomic.Int64
			h := streamFunc(func(_ *structpb.Struct, stream grpc.ServerStream) error {
				runs.Add(1)
				return stream.SendMsg(&structpb.Struct{})
			})
			s := newServer(t, o, tc.cfg)
			srv := grpc.NewServer(grpc.ChainUnaryInterceptor(s.UnaryInterceptor()), grpc.ChainStreamInterceptor(s.StreamInterceptor()))
			srv.RegisterService(streamDesc(), h)
			lis := bufconn.Listen(1 << 20)
			go func() { _ = srv.Serve(lis) }()
			t.Cleanup(srv.Stop)
			conn, err := grpc.NewClient("passthrough:///bufnet",
				grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
				grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close() })

			for i := range 2 {
				n, err := watch(t, conn, tc.md...)
				switch {
				case tc.refused && (status.Code(err) != codes.Unimplemented || errorInfo(err) != idemgrpc.ReasonStreamUnsupported || n != 0):
					t.Errorf("call %d: %d messages, %v (reason %q); want Unimplemented %s", i, n, err, errorInfo(err), idemgrpc.ReasonStreamUnsupported)
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
			if n := countRecords(t, o); n != 0 {
				t.Errorf("%d records, want none", n)
			}
		})
	}
}
