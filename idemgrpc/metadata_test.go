package idemgrpc_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// invoke calls createOrder with key k1 for tenant acme and returns the
// response header and trailer.
func invoke(t *testing.T, conn *grpc.ClientConn) (header, trailer metadata.MD, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	req, _ := structpb.NewStruct(map[string]any{"item": "book"})
	err = conn.Invoke(ctx, createOrder, req, new(structpb.Struct), grpc.Header(&header), grpc.Trailer(&trailer))
	return header, trailer, err
}

// TestRerunSendsOnlyTheLastRunsMetadata: the header and trailer a handler
// run sets (SetHeader, SendHeader, SetTrailer) reach the client only from
// the run that answers, never from a run rolled back for a retryable
// database error; the stored ones replay with the stored answer, as
// idemconnect's do. When no run answers (the retries ran out), none are
// sent.
func TestRerunSendsOnlyTheLastRunsMetadata(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(*structpb.Struct) (*structpb.Struct, error)
		code   codes.Code
		stored bool
	}{
		{"message", func(m *structpb.Struct) (*structpb.Struct, error) { return m, nil }, codes.OK, true},
		{"stored status", func(*structpb.Struct) (*structpb.Struct, error) {
			return nil, status.Error(codes.FailedPrecondition, "insufficient funds")
		}, codes.FailedPrecondition, true},
		{"status not stored", func(*structpb.Struct) (*structpb.Struct, error) {
			return nil, status.Error(codes.Unavailable, "payment provider down")
		}, codes.Unavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := newOrders(t, idem.Config{})
			var runs atomic.Int64
			h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
				n := runs.Add(1)
				if err := grpc.SetHeader(ctx, metadata.Pairs("x-order-run", fmt.Sprint(n))); err != nil {
					return nil, err
				}
				if n == 1 {
					if err := grpc.SendHeader(ctx, metadata.Pairs("x-sent", "1")); err != nil {
						return nil, err
					}
				}
				if err := grpc.SetTrailer(ctx, metadata.Pairs("x-order-total", fmt.Sprint(n))); err != nil {
					return nil, err
				}
				resp, err := o.create(ctx, req)
				if err != nil {
					return nil, err
				}
				if n == 1 {
					return nil, fmt.Errorf("insert order: %w", idem.ErrSerialization)
				}
				return tc.answer(resp)
			}
			conn := bufServer(t, h, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
			for i := range 2 { // the first answer, then a retry
				header, trailer, err := invoke(t, conn)
				if status.Code(err) != tc.code {
					t.Fatalf("call %d: %v, want %v", i, err, tc.code)
				}
				run := "2" // the answering run; an answer not stored is run again (run 3)
				if i == 1 && !tc.stored {
					run = "3"
				}
				if got := header.Get("x-order-run"); !slices.Equal(got, []string{run}) {
					t.Errorf("call %d: header x-order-run %v, want [%s]: a rolled-back run's must not reach the client", i, got, run)
				}
				if got := header.Get("x-sent"); len(got) != 0 {
					t.Errorf("call %d: header x-sent %v from the rolled-back run's SendHeader", i, got)
				}
				if got := trailer.Get("x-order-total"); !slices.Equal(got, []string{run}) {
					t.Errorf("call %d: trailer x-order-total %v, want [%s]", i, got, run)
				}
				replayed := len(header.Get(idemgrpc.MetadataReplayed)) == 1
				if replayed != (i == 1 && tc.stored) {
					t.Errorf("call %d: replayed %v", i, replayed)
				}
			}
		})
	}

	t.Run("retries ran out", func(t *testing.T) {
		t.Parallel()
		o := newOrders(t, idem.Config{MaxAttempts: 2})
		h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
			_ = grpc.SetHeader(ctx, metadata.Pairs("x-order-run", "1"))
			_ = grpc.SetTrailer(ctx, metadata.Pairs("x-order-total", "1"))
			if _, err := o.create(ctx, req); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("insert order: %w", idem.ErrSerialization)
		}
		conn := bufServer(t, h, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
		header, trailer, err := invoke(t, conn)
		if status.Code(err) != codes.Aborted {
			t.Fatalf("%v, want Aborted", err)
		}
		if header.Get("x-order-run") != nil || trailer.Get("x-order-total") != nil {
			t.Errorf("header %v, trailer %v: no run answered, so none of theirs may be sent", header, trailer)
		}
		if n := o.count(t); n != 0 {
			t.Errorf("%d orders, want none", n)
		}
	})
}

// TestReplayOfAnAnswerStoredBefore: an answer stored by an earlier version
// (encoding 1: no trailer, no header) still replays, marked replayed.
func TestReplayOfAnAnswerStoredBefore(t *testing.T) {
	o := newOrders(t, idem.Config{})
	conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	first, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(first)
	if err != nil {
		t.Fatal(err)
	}
	v1 := append([]byte{1, 0}, msg...) // version 1, no status, the message
	if _, err := o.db.ExecContext(t.Context(), "UPDATE "+idem.DefaultTable+" SET body = ?, header = NULL", v1); err != nil {
		t.Fatal(err)
	}
	again, h, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if err != nil || !proto.Equal(again, first) || len(h.Get(idemgrpc.MetadataReplayed)) != 1 || o.runs.Load() != 1 {
		t.Errorf("%v (header %v), %v after %d runs; want a replay of %v", again, h, err, o.runs.Load(), first)
	}
}
