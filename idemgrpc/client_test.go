package idemgrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// attempts is a scripted server for the client's tests: it records the key
// of every attempt and answers attempt n with script(n).
type attempts struct {
	mu     sync.Mutex
	keys   []string
	times  []time.Time
	script func(ctx context.Context, n int) error
}

func (a *attempts) handle(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	a.mu.Lock()
	a.keys = append(a.keys, md.Get(idemgrpc.MetadataKey)...)
	if len(md.Get(idemgrpc.MetadataKey)) == 0 {
		a.keys = append(a.keys, "")
	}
	a.times = append(a.times, time.Now())
	n := len(a.keys)
	a.mu.Unlock()
	if err := a.script(ctx, n); err != nil {
		return nil, err
	}
	return structpb.NewStruct(map[string]any{"attempt": float64(n)})
}

func (a *attempts) seen() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.keys...)
}

// failFirst answers the first n attempts with err, then succeeds.
func failFirst(n int, err error) func(context.Context, int) error {
	return func(_ context.Context, i int) error {
		if i <= n {
			return err
		}
		return nil
	}
}

func withRetryInfo(code codes.Code, d time.Duration) error {
	st, _ := status.New(code, "later").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
	return st.Err()
}

func clientConn(t *testing.T, a *attempts, c *idemgrpc.Client, server ...grpc.UnaryServerInterceptor) *grpc.ClientConn {
	t.Helper()
	return bufServer(t, a.handle, server, c.UnaryInterceptor())
}

// TestClientOneKeyPerCall: the client makes one valid key before the first
// attempt and sends it on every retry; the next call gets another.
func TestClientOneKeyPerCall(t *testing.T) {
	a := &attempts{script: failFirst(2, status.Error(codes.Unavailable, "down"))}
	conn := clientConn(t, a, &idemgrpc.Client{BaseDelay: time.Millisecond})
	if _, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}); err != nil {
		t.Fatalf("call: %v", err)
	}
	keys := a.seen()
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] != keys[2] || idem.ValidateKey(keys[0]) != nil {
		t.Fatalf("attempts sent keys %q, want one valid key three times", keys)
	}
	if _, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}); err != nil {
		t.Fatal(err)
	}
	if keys := a.seen(); len(keys) != 4 || keys[3] == keys[0] {
		t.Errorf("a second call sent %q, want a new key", keys[3:])
	}
}

// TestClientKeepsCallerKey: a key the caller set is sent as is, once.
func TestClientKeepsCallerKey(t *testing.T) {
	a := &attempts{script: failFirst(1, status.Error(codes.Aborted, "in flight"))}
	conn := clientConn(t, a, &idemgrpc.Client{BaseDelay: time.Millisecond})
	if _, _, err := call(t, conn, createOrder, map[string]any{}, idemgrpc.MetadataKey, "mine-1"); err != nil {
		t.Fatal(err)
	}
	if keys := a.seen(); len(keys) != 2 || keys[0] != "mine-1" || keys[1] != "mine-1" {
		t.Errorf("attempts sent %q, want the caller's key twice", keys)
	}
}

// TestClientRetriesOnlyWhatCanChange: Unavailable, Aborted and
// DeadlineExceeded are retried; the client's mistakes, a mismatch and
// other final answers are not, nor a replayed answer.
func TestClientRetriesOnlyWhatCanChange(t *testing.T) {
	replayedAborted := func(ctx context.Context, _ int) error {
		_ = grpc.SetHeader(ctx, metadata.Pairs(idemgrpc.MetadataReplayed, "true"))
		return status.Error(codes.Aborted, "stored by a policy that stores Aborted")
	}
	for _, tc := range []struct {
		name   string
		script func(context.Context, int) error
		want   int // attempts
	}{
		{"Unavailable", failFirst(1, status.Error(codes.Unavailable, "")), 2},
		{"Aborted", failFirst(1, status.Error(codes.Aborted, "")), 2},
		{"DeadlineExceeded of an attempt", failFirst(1, status.Error(codes.DeadlineExceeded, "")), 2},
		{"InvalidArgument", failFirst(1, status.Error(codes.InvalidArgument, "")), 1},
		{"FailedPrecondition", failFirst(1, status.Error(codes.FailedPrecondition, "")), 1},
		{"NotFound", failFirst(1, status.Error(codes.NotFound, "")), 1},
		{"Internal", failFirst(1, status.Error(codes.Internal, "")), 1},
		{"Unknown", failFirst(1, status.Error(codes.Unknown, "")), 1},
		{"replayed Aborted", replayedAborted, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &attempts{script: tc.script}
			conn := clientConn(t, a, &idemgrpc.Client{BaseDelay: time.Millisecond})
			_, _, _ = call(t, conn, createOrder, map[string]any{})
			if n := len(a.seen()); n != tc.want {
				t.Errorf("%d attempts, want %d", n, tc.want)
			}
		})
	}
}

// TestClientAttemptTimeout: an attempt that outlives AttemptTimeout is
// abandoned and retried with the same key while the call's context lives.
func TestClientAttemptTimeout(t *testing.T) {
	a := &attempts{script: func(ctx context.Context, n int) error {
		if n == 1 {
			// The client gave up on this attempt. Whichever deadline
			// fires first (the client's, or the server's from the
			// grpc-timeout header), the attempt must not answer.
			<-ctx.Done()
			return status.FromContextError(ctx.Err()).Err()
		}
		return nil
	}}
	conn := clientConn(t, a, &idemgrpc.Client{BaseDelay: time.Millisecond, AttemptTimeout: 100 * time.Millisecond})
	got, _, err := call(t, conn, createOrder, map[string]any{})
	if err != nil || got.GetFields()["attempt"].GetNumberValue() != 2 {
		t.Fatalf("call: %v, %v; want the second attempt's answer", got, err)
	}
	if keys := a.seen(); len(keys) != 2 || keys[0] != keys[1] {
		t.Errorf("attempts sent %q, want one key twice", keys)
	}
}

// TestClientBounds: at most MaxAttempts attempts; the server's RetryInfo
// sets the wait, capped by MaxDelay; the call's context ends the waiting.
func TestClientBounds(t *testing.T) {
	t.Run("MaxAttempts", func(t *testing.T) {
		a := &attempts{script: failFirst(100, status.Error(codes.Unavailable, "down"))}
		conn := clientConn(t, a, &idemgrpc.Client{MaxAttempts: 4, BaseDelay: time.Millisecond})
		_, _, err := call(t, conn, createOrder, map[string]any{})
		if status.Code(err) != codes.Unavailable || len(a.seen()) != 4 {
			t.Errorf("%v after %d attempts, want Unavailable after 4", err, len(a.seen()))
		}
	})
	t.Run("RetryInfo", func(t *testing.T) {
		a := &attempts{script: failFirst(1, withRetryInfo(codes.Aborted, 300*time.Millisecond))}
		conn := clientConn(t, a, &idemgrpc.Client{BaseDelay: time.Millisecond})
		if _, _, err := call(t, conn, createOrder, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		a.mu.Lock()
		gap := a.times[1].Sub(a.times[0])
		a.mu.Unlock()
		if gap < 300*time.Millisecond {
			t.Errorf("retried after %v, want the server's 300ms", gap)
		}
	})
	t.Run("MaxDelay caps RetryInfo", func(t *testing.T) {
		a := &attempts{script: failFirst(1, withRetryInfo(codes.Unavailable, time.Hour))}
		conn := clientConn(t, a, &idemgrpc.Client{MaxDelay: 20 * time.Millisecond})
		start := time.Now()
		if _, _, err := call(t, conn, createOrder, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v, want about MaxDelay", d)
		}
	})
	t.Run("context ends the wait", func(t *testing.T) {
		a := &attempts{script: failFirst(100, withRetryInfo(codes.Unavailable, 5*time.Second))}
		conn := clientConn(t, a, &idemgrpc.Client{})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := conn.Invoke(ctx, createOrder, &structpb.Struct{}, &structpb.Struct{})
		if status.Code(err) != codes.Unavailable || time.Since(start) > 3*time.Second || len(a.seen()) != 1 {
			t.Errorf("%v after %v and %d attempts, want the last Unavailable soon after the deadline", err, time.Since(start), len(a.seen()))
		}
	})
}

// TestClientProtect: a method Protect leaves out gets no key and no retry.
func TestClientProtect(t *testing.T) {
	a := &attempts{script: failFirst(1, status.Error(codes.Unavailable, "down"))}
	conn := clientConn(t, a, &idemgrpc.Client{Protect: func(m string) bool { return m != createOrder }})
	_, _, err := call(t, conn, createOrder, map[string]any{})
	if keys := a.seen(); status.Code(err) != codes.Unavailable || len(keys) != 1 || keys[0] != "" {
		t.Errorf("%v, keys %q; want one attempt without a key", err, keys)
	}
}
