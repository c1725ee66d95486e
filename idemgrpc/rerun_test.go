package idemgrpc_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// TestRerunSeesTheRequestAsSent: a run rolled back for a retryable
// database error that changed its request in place does not hand the
// change to the next run: every run sees the request the client sent,
// which is what the fingerprint covers, and so does the stored answer.
func TestRerunSeesTheRequestAsSent(t *testing.T) {
	o := newOrders(t, idem.Config{})
	var seen []string
	h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		seen = append(seen, req.GetFields()["item"].GetStringValue())
		resp, err := o.create(ctx, req)
		if err != nil {
			return nil, err
		}
		if len(seen) == 1 {
			req.Fields["item"] = structpb.NewStringValue("book, gift-wrapped") // an edit in place
			req.Fields["fee"] = structpb.NewNumberValue(5)
			return nil, fmt.Errorf("insert order: %w", idem.ErrSerialization)
		}
		if _, ok := req.Fields["fee"]; ok {
			return nil, fmt.Errorf("run %d sees the fee the rolled-back run added", len(seen))
		}
		return resp, nil
	}
	conn := bufServer(t, h, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	req, _ := structpb.NewStruct(map[string]any{"item": "book"})
	resp := new(structpb.Struct)
	if err := conn.Invoke(ctx, createOrder, req, resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.GetFields()["item"].GetStringValue(); got != "book" {
		t.Errorf("answer's item %q, want book", got)
	}
	if len(seen) != 2 || seen[1] != "book" {
		t.Errorf("the runs saw items %q, want [book book]", seen)
	}
}
