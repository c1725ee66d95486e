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

// TestRerunSeesTheRequestAsSent: a run rolled back for a retryable
// database error that changed its request in place (its message, its
// header) does not hand the change to the next run: every run sees the
// request the client sent, which is what the fingerprint covers.
func TestRerunSeesTheRequestAsSent(t *testing.T) {
	o := newOrders(t, idem.Config{})
	var seen []string
	h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		seen = append(seen, req.Msg.GetFields()["item"].GetStringValue())
		resp, err := o.create(ctx, req)
		if err != nil {
			return nil, err
		}
		if len(seen) == 1 {
			req.Msg.Fields["item"] = structpb.NewStringValue("book, gift-wrapped") // edits in place
			req.Msg.Fields["fee"] = structpb.NewNumberValue(5)
			req.Header().Set("X-Discount", "applied")
			return nil, fmt.Errorf("insert order: %w", idem.ErrSerialization)
		}
		if _, ok := req.Msg.Fields["fee"]; ok {
			return nil, fmt.Errorf("run %d sees the fee the rolled-back run added", len(seen))
		}
		if d := req.Header().Get("X-Discount"); d != "" {
			return nil, fmt.Errorf("run %d sees the header the rolled-back run set", len(seen))
		}
		return resp, nil
	}
	srv := serve(t, h, newServer(t, o, idemconnect.Config{}).Interceptor())
	resp, err := call(t, client(srv, createOrder, protocols[0]), map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Msg.GetFields()["item"].GetStringValue(); got != "book" {
		t.Errorf("answer's item %q, want book", got)
	}
	if len(seen) != 2 || seen[1] != "book" {
		t.Errorf("the runs saw items %q, want [book book]", seen)
	}
}
