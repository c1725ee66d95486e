package idemgrpc_test

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/aborting"
)

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestAnswerAfterAbortedTransaction: a handler whose transaction a failed
// statement aborted. Its error answer (AlreadyExists) reaches the client,
// not stored, with a WARN naming the cause; a success after the failure
// claims work that was rolled back: Internal, not Unavailable (which
// clients retry), logged as an ERROR.
func TestAnswerAfterAbortedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer error
		code   codes.Code
		level  string
	}{
		{"AlreadyExists", status.Error(codes.AlreadyExists, "email taken"), codes.AlreadyExists, "level=WARN"},
		{"OK", nil, codes.Internal, "level=ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lite := idemtest.NewSQLite(t, idem.Config{})
			store, err := idem.New[*sql.Tx](aborting.Driver{Driver: lite.Driver}, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var logged syncBuffer
			s, err := idemgrpc.New(store, idemgrpc.Config{Principal: tenantOf, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			conn := bufServer(t, func(context.Context, *structpb.Struct) (*structpb.Struct, error) {
				runs++
				if tc.answer != nil {
					return nil, tc.answer
				}
				return structpb.NewStruct(map[string]any{"id": 1.0})
			}, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
			_, _, err = call(t, conn, createOrder, map[string]any{"email": "ann@example.com"}, idemgrpc.MetadataKey, "k-1", "tenant", "t1")
			if st := status.Convert(err); st.Code() != tc.code || (tc.answer != nil && st.Message() != "email taken") {
				t.Fatalf("call: %v, want %v", err, tc.code)
			}
			if runs != 1 {
				t.Errorf("the handler ran %d times, want once", runs)
			}
			if log := logged.String(); !strings.Contains(log, tc.level) || !strings.Contains(log, "aborted") {
				t.Errorf("log %q, want %s naming the aborted transaction", log, tc.level)
			}
			if n, err := lite.Store.Counts(t.Context(), ""); err != nil || n.Total() != 0 {
				t.Errorf("Counts: %+v, %v; want no record stored", n, err)
			}
		})
	}
}
