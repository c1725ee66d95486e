package idemconnect_test

import (
	"bytes"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
)

// TestInstalledTwice: two interceptors of one store on one call (one
// installed twice, or a global one and a per-service one) protect it
// once: the inner lets the call through, the handler works in the outer
// run's transaction, and a retry replays.
func TestInstalledTwice(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func(o *orders, outer connect.Interceptor) connect.Interceptor
	}{
		{"one interceptor twice", func(_ *orders, outer connect.Interceptor) connect.Interceptor { return outer }},
		{"two servers on one store", func(o *orders, _ connect.Interceptor) connect.Interceptor {
			return newServer(t, o, idemconnect.Config{}).Interceptor()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A short wait bound: without the pass-through the inner claim
			// would wait on the outer's lock that long, then give up.
			o := newOrders(t, idem.Config{WaitBound: 100 * time.Millisecond})
			outer := newServer(t, o, idemconnect.Config{}).Interceptor()
			srv := serve(t, o.create, outer, tc.inner(o, outer))
			c := client(srv, createOrder, protocols[0])
			first, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			again, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
			if err != nil || !bytes.Equal(marshal(t, again.Msg), marshal(t, first.Msg)) || again.Header().Get(idemconnect.HeaderReplayed) != "true" {
				t.Errorf("retry: %v, %v; want a replay of %v", again, err, first.Msg)
			}
			if n, runs := o.count(t), o.runs.Load(); n != 1 || runs != 1 {
				t.Errorf("%d orders, %d handler runs; want 1 and 1", n, runs)
			}
			if c, err := o.store.Counts(t.Context(), ""); err != nil || c.Total() != 1 {
				t.Errorf("records %+v, %v; want 1", c, err)
			}
		})
	}
}
