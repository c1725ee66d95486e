package idemconnect_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
)

// TestRerunsRanOut: when every run of the handler is rolled back for a
// retryable database error until the retries run out, no run answers, so
// none of the header or trailer they set through connect.CallInfo reaches
// the client with idem's Aborted, as idemgrpc sends none.
func TestRerunsRanOut(t *testing.T) {
	for _, p := range []protocol{protocols[0], protocols[2]} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			o := newOrders(t, idem.Config{MaxAttempts: 2})
			h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
				if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
					info.ResponseHeader().Set("X-Run", "1")
					info.ResponseTrailer().Set("X-Total", "1")
				}
				if _, err := o.create(ctx, req); err != nil {
					return nil, err
				}
				return nil, fmt.Errorf("insert order: %w", idem.ErrSerialization)
			}
			srv := serve(t, h, newServer(t, o, idemconnect.Config{}).Interceptor())
			_, err := call(t, client(srv, createOrder, p), map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeAborted {
				t.Fatalf("%v, want Aborted", err)
			}
			if ce.Meta().Get("X-Run") != "" || ce.Meta().Get("X-Total") != "" {
				t.Errorf("error metadata %v: no run answered, so none of theirs may be sent", ce.Meta())
			}
			if n := o.count(t); n != 0 {
				t.Errorf("%d orders, want none", n)
			}
		})
	}
}
