package idemgrpc_test

import (
	"database/sql"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// TestChainedTwice: two interceptors of one store on one call (one
// chained twice, or a global one and a per-service one) protect it once:
// the inner lets the call through, the handler works in the outer run's
// transaction, and a retry replays.
func TestChainedTwice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func(o *orders, outer *idemgrpc.Server[*sql.Tx]) grpc.UnaryServerInterceptor
	}{
		{"one interceptor twice", func(_ *orders, outer *idemgrpc.Server[*sql.Tx]) grpc.UnaryServerInterceptor {
			return outer.UnaryInterceptor()
		}},
		{"two servers on one store", func(o *orders, _ *idemgrpc.Server[*sql.Tx]) grpc.UnaryServerInterceptor {
			return newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A short wait bound: without the pass-through the inner claim
			// would wait on the outer's lock that long, then give up.
			o := newOrders(t, idem.Config{WaitBound: 100 * time.Millisecond})
			outer := newServer(t, o, idemgrpc.Config{})
			conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{outer.UnaryInterceptor(), tc.inner(o, outer)})
			first, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			again, h, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
			if err != nil || !proto.Equal(again, first) || len(h.Get(idemgrpc.MetadataReplayed)) != 1 {
				t.Errorf("retry: %v (header %v), %v; want a replay of %v", again, h, err, first)
			}
			if n, runs := o.count(t), o.runs.Load(); n != 1 || runs != 1 {
				t.Errorf("%d orders, %d handler runs; want 1 and 1", n, runs)
			}
			if n := countRecords(t, o); n != 1 {
				t.Errorf("%d records, want 1", n)
			}
		})
	}
}
