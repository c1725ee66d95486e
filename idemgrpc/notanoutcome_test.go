package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// TestNotAnOutcome: the story of a client whose first call fails
// validation. The handler inserts its order first (it must not commit),
// then refuses the call: with InvalidArgument (never stored by default),
// or with NotFound marked by NotAnOutcome. The client gets the handler's
// status as it was, nothing is stored or committed, the corrected call
// with the same key runs and is stored, and its retry replays. The
// invalid call after that is a mismatch: the key holds the corrected one.
func TestNotAnOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse error
		code   codes.Code
	}{
		{"InvalidArgument", status.Error(codes.InvalidArgument, "item is required"), codes.InvalidArgument},
		{"NotFound marked", idemgrpc.NotAnOutcome(status.Error(codes.NotFound, "no such item")), codes.NotFound},
		{"NotFound marked, wrapped by an inner interceptor", fmt.Errorf("inner: %w", idemgrpc.NotAnOutcome(status.Error(codes.NotFound, "no such item"))), codes.NotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			handler := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
				resp, err := o.create(ctx, req)
				if err != nil || req.GetFields()["item"].GetStringValue() != "" {
					return resp, err
				}
				return nil, tc.refuse
			}
			conn := bufServer(t, handler, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
			md := []string{idemgrpc.MetadataKey, "k1", "tenant", "acme"}

			_, header, err := call(t, conn, createOrder, map[string]any{"item": ""}, md...)
			want := status.Convert(errors.Unwrap(tc.refuse))
			if errors.Unwrap(tc.refuse) == nil {
				want = status.Convert(tc.refuse)
			}
			if st := status.Convert(err); st.Code() != tc.code || st.Message() != want.Message() || len(header.Get(idemgrpc.MetadataReplayed)) != 0 {
				t.Fatalf("invalid call: %v (header %v), want the handler's %v %q", err, header, tc.code, want.Message())
			}
			if n := o.count(t); n != 0 {
				t.Fatalf("orders after the invalid call: %d, want 0 (rolled back)", n)
			}
			if _, err := o.store.Lookup(context.Background(), idemgrpc.Scope("acme", createOrder), "k1"); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("Lookup after the invalid call: %v, want ErrNotFound (the key stays free)", err)
			}

			first, header, err := call(t, conn, createOrder, map[string]any{"item": "pen"}, md...)
			if err != nil || first.GetFields()["item"].GetStringValue() != "pen" || len(header.Get(idemgrpc.MetadataReplayed)) != 0 {
				t.Fatalf("corrected call with the same key: %v, %v; want the handler to run", first, err)
			}
			again, header, err := call(t, conn, createOrder, map[string]any{"item": "pen"}, md...)
			if err != nil || again.GetFields()["id"].GetNumberValue() != first.GetFields()["id"].GetNumberValue() || len(header.Get(idemgrpc.MetadataReplayed)) != 1 {
				t.Fatalf("retry: %v, %v, header %v; want the stored answer replayed", again, err, header)
			}
			if _, _, err := call(t, conn, createOrder, map[string]any{"item": ""}, md...); status.Code(err) != codes.FailedPrecondition || errorInfo(err) != idemgrpc.ReasonMismatch {
				t.Fatalf("the invalid call again: %v, want a mismatch", err)
			}
			if n, runs := o.count(t), o.runs.Load(); n != 1 || runs != 2 {
				t.Fatalf("orders %d, handler runs %d; want 1 and 2", n, runs)
			}
		})
	}
}

// TestNotAnOutcomeUnprotected: a marked error that reaches gRPC without
// the interceptor is answered as the error it marks.
func TestNotAnOutcomeUnprotected(t *testing.T) {
	err := idemgrpc.NotAnOutcome(status.Error(codes.NotFound, "no such item"))
	if st := status.Convert(err); st.Code() != codes.NotFound || st.Message() != "no such item" {
		t.Fatalf("status of a marked error: %v %q, want NotFound %q", st.Code(), st.Message(), "no such item")
	}
	if idemgrpc.NotAnOutcome(nil) != nil {
		t.Fatal("NotAnOutcome(nil) is not nil")
	}
}
