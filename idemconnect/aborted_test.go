package idemconnect_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
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
		code   connect.Code
		level  string
	}{
		{"AlreadyExists", connect.NewError(connect.CodeAlreadyExists, errors.New("email taken")), connect.CodeAlreadyExists, "level=WARN"},
		{"OK", nil, connect.CodeInternal, "level=ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lite := idemtest.NewSQLite(t, idem.Config{})
			store, err := idem.New[*sql.Tx](aborting.Driver{Driver: lite.Driver}, idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			var logged syncBuffer
			s, err := idemconnect.New(store, idemconnect.Config{Principal: tenantOf, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			srv := serve(t, func(context.Context, *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
				runs.Add(1)
				if tc.answer != nil {
					return nil, tc.answer
				}
				msg, err := structpb.NewStruct(map[string]any{"id": 1.0})
				return connect.NewResponse(msg), err
			}, s.Interceptor())
			_, err = call(t, client(srv, createOrder, protocols[0]), map[string]any{"email": "ann@example.com"}, idemconnect.HeaderKey, "k-1", "Tenant", "t1")
			if connect.CodeOf(err) != tc.code || (tc.answer != nil && !strings.Contains(err.Error(), "email taken")) {
				t.Fatalf("call: %v, want %v", err, tc.code)
			}
			if runs.Load() != 1 {
				t.Errorf("the handler ran %d times, want once", runs.Load())
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
