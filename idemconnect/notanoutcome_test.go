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

// TestNotAnOutcome: the story of a client whose first call fails
// validation, on every protocol. The handler inserts its order first (it
// must not commit), then refuses the call: with CodeInvalidArgument (never
// stored by default), or with CodeNotFound marked by NotAnOutcome. The
// client gets the handler's error as it was, nothing is stored or
// committed, the corrected call with the same key runs and is stored, and
// its retry replays. The invalid call after that is a mismatch.
func TestNotAnOutcome(t *testing.T) {
	for _, p := range protocols {
		for _, tc := range []struct {
			name   string
			refuse func() error
			code   connect.Code
		}{
			{"InvalidArgument", func() error { return connect.NewError(connect.CodeInvalidArgument, errors.New("item is required")) }, connect.CodeInvalidArgument},
			{"NotFound marked", func() error {
				return idemconnect.NotAnOutcome(connect.NewError(connect.CodeNotFound, errors.New("item is required")))
			}, connect.CodeNotFound},
			{"NotFound marked, wrapped by an inner interceptor", func() error {
				return fmt.Errorf("inner: %w", idemconnect.NotAnOutcome(connect.NewError(connect.CodeNotFound, errors.New("item is required"))))
			}, connect.CodeNotFound},
		} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				o := newOrders(t, idem.Config{})
				h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
					resp, err := o.create(ctx, req)
					if err != nil || req.Msg.GetFields()["item"].GetStringValue() != "" {
						return resp, err
					}
					return nil, tc.refuse()
				}
				srv := serve(t, h, newServer(t, o, idemconnect.Config{}).Interceptor())
				c := client(srv, createOrder, p)
				hdr := []string{idemconnect.HeaderKey, "k1", "Tenant", "acme"}

				_, err := call(t, c, map[string]any{"item": ""}, hdr...)
				var ce *connect.Error
				if !errors.As(err, &ce) || ce.Code() != tc.code || ce.Message() != "item is required" || ce.Meta().Get(idemconnect.HeaderReplayed) != "" {
					t.Fatalf("invalid call: %v, want the handler's %v", err, tc.code)
				}
				if n := o.count(t); n != 0 {
					t.Fatalf("orders after the invalid call: %d, want 0 (rolled back)", n)
				}
				if _, err := o.store.Lookup(context.Background(), idemconnect.Scope("acme", createOrder), "k1"); !errors.Is(err, idem.ErrNotFound) {
					t.Fatalf("Lookup after the invalid call: %v, want ErrNotFound (the key stays free)", err)
				}
				first, err := call(t, c, map[string]any{"item": "pen"}, hdr...)
				if err != nil || first.Msg.GetFields()["item"].GetStringValue() != "pen" || first.Header().Get(idemconnect.HeaderReplayed) != "" {
					t.Fatalf("corrected call with the same key: %v, %v; want the handler to run", first, err)
				}
				again, err := call(t, c, map[string]any{"item": "pen"}, hdr...)
				if err != nil || again.Msg.GetFields()["id"].GetNumberValue() != first.Msg.GetFields()["id"].GetNumberValue() || again.Header().Get(idemconnect.HeaderReplayed) != "true" {
					t.Fatalf("retry: %v, %v; want the stored answer replayed", again, err)
				}
				if _, err := call(t, c, map[string]any{"item": ""}, hdr...); connect.CodeOf(err) != connect.CodeFailedPrecondition || idemconnect.Reason(err) != idemconnect.ReasonMismatch {
					t.Fatalf("the invalid call again: %v, want a mismatch", err)
				}
				if n, runs := o.count(t), o.runs.Load(); n != 1 || runs != 2 {
					t.Fatalf("orders %d, handler runs %d; want 1 and 2", n, runs)
				}
			})
		}
	}
}

// TestNotAnOutcomeUnprotected: a marked error is answered by connect as the
// error it marks, and NotAnOutcome(nil) is nil.
func TestNotAnOutcomeUnprotected(t *testing.T) {
	err := idemconnect.NotAnOutcome(connect.NewError(connect.CodeNotFound, errors.New("no such item")))
	var ce *connect.Error
	if !errors.As(err, &ce) || connect.CodeOf(err) != connect.CodeNotFound || ce.Message() != "no such item" {
		t.Fatalf("a marked error: %v, want NotFound %q", err, "no such item")
	}
	if idemconnect.NotAnOutcome(nil) != nil {
		t.Fatal("NotAnOutcome(nil) is not nil")
	}
}
