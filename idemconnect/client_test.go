package idemconnect_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
)

// keysSeen records the idempotency keys the server received, one "" for a
// call without any. It runs before idem's interceptor.
type keysSeen struct {
	mu   sync.Mutex
	keys []string
}

func (k *keysSeen) Interceptor() connect.Interceptor {
	return connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			k.mu.Lock()
			k.keys = append(k.keys, req.Header().Get(idemconnect.HeaderKey))
			k.mu.Unlock()
			return next(ctx, req)
		}
	})
}

func (k *keysSeen) get() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys...)
}

// flaky answers Unavailable (not stored) for its first n runs, then runs
// create.
func flaky(o *orders, n int64) handleFunc {
	var runs atomic.Int64
	return func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		if runs.Add(1) <= n {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("payment provider down"))
		}
		return o.create(ctx, req)
	}
}

// TestClientOneKeyPerCall: every attempt of one call carries one key, made
// by the client; another call gets another key; over both protocols.
func TestClientOneKeyPerCall(t *testing.T) {
	for _, p := range []protocol{protocols[0], protocols[2]} {
		t.Run(p.name, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			seen := &keysSeen{}
			srv := serve(t, flaky(o, 2), seen.Interceptor(), newServer(t, o, idemconnect.Config{}).Interceptor())
			c := client(srv, createOrder, p, connect.WithInterceptors((&idemconnect.Client{BaseDelay: time.Millisecond}).Interceptor()))
			first, err := call(t, c, map[string]any{"item": "book"}, "Tenant", "acme")
			if err != nil {
				t.Fatalf("call after two Unavailable: %v", err)
			}
			keys := seen.get()
			if len(keys) != 3 || keys[0] == "" || keys[1] != keys[0] || keys[2] != keys[0] {
				t.Fatalf("keys seen %q, want one key three times", keys)
			}
			if _, err := call(t, c, map[string]any{"item": "book"}, "Tenant", "acme"); err != nil {
				t.Fatal(err)
			}
			if keys = seen.get(); len(keys) != 4 || keys[3] == keys[0] {
				t.Errorf("keys seen %q, want a new key for the second call", keys)
			}
			if o.count(t) != 2 || first.Msg.GetFields()["id"].GetNumberValue() != 1 {
				t.Errorf("%d orders, first answer %v; want 2 orders", o.count(t), first.Msg)
			}
		})
	}
}

// TestClientKeepsCallerKey: a key the caller set is the one sent.
func TestClientKeepsCallerKey(t *testing.T) {
	o := newOrders(t, idem.Config{})
	seen := &keysSeen{}
	srv := serve(t, o.create, seen.Interceptor(), newServer(t, o, idemconnect.Config{}).Interceptor())
	c := client(srv, createOrder, protocols[0], connect.WithInterceptors((&idemconnect.Client{}).Interceptor()))
	for range 2 {
		if _, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "mine", "Tenant", "acme"); err != nil {
			t.Fatal(err)
		}
	}
	if keys := seen.get(); len(keys) != 2 || keys[0] != "mine" || keys[1] != "mine" {
		t.Errorf("keys seen %q, want [mine mine]", keys)
	}
	if o.count(t) != 1 {
		t.Errorf("%d orders, want 1", o.count(t))
	}
}

// TestClientWaitsOutInFlight: a retry that finds the first call still in
// flight (Aborted with RetryInfo) waits and gets the first call's answer.
func TestClientWaitsOutInFlight(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 20 * time.Millisecond})
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		resp, err := o.create(ctx, req)
		once.Do(func() {
			close(entered)
			<-release
		})
		return resp, err
	}
	srv := serve(t, h, newServer(t, o, idemconnect.Config{RetryAfter: 30 * time.Millisecond}).Interceptor())
	plain := client(srv, createOrder, protocols[2])
	c := client(srv, createOrder, protocols[2], connect.WithInterceptors((&idemconnect.Client{MaxAttempts: 100}).Interceptor()))
	first := make(chan error, 1)
	go func() {
		_, err := call(t, plain, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
		first <- err
	}()
	<-entered
	time.AfterFunc(200*time.Millisecond, func() { close(release) })
	got, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil || got.Header().Get(idemconnect.HeaderReplayed) != "true" {
		t.Errorf("retry through the client: %v, %v; want the replayed first answer", got, err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if o.count(t) != 1 {
		t.Errorf("%d orders, want 1", o.count(t))
	}
}

// TestClientRetriesOnlyWhatCanChange: final answers (a mismatch) and
// replayed answers are not retried; a key idem would refuse is not sent.
func TestClientRetriesOnlyWhatCanChange(t *testing.T) {
	o := newOrders(t, idem.Config{})
	seen := &keysSeen{}
	// Store Unavailable too, so that its replay is marked replayed.
	storeAll := func(c connect.Code) bool { return c == connect.CodeUnavailable || idemconnect.DefaultStoreCode(c) }
	h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		if req.Msg.GetFields()["fail"].GetBoolValue() {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("stored unavailable"))
		}
		return o.create(ctx, req)
	}
	srv := serve(t, h, seen.Interceptor(), newServer(t, o, idemconnect.Config{StoreCode: storeAll}).Interceptor())
	c := client(srv, createOrder, protocols[0], connect.WithInterceptors((&idemconnect.Client{BaseDelay: time.Millisecond}).Interceptor()))
	if _, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		fields   map[string]any
		header   []string
		code     connect.Code
		attempts int
	}{
		{"mismatch", map[string]any{"item": "lamp"}, []string{idemconnect.HeaderKey, "k1", "Tenant", "acme"}, connect.CodeFailedPrecondition, 1},
		{"key too long", map[string]any{"item": "lamp"}, []string{idemconnect.HeaderKey, strings.Repeat("k", 256), "Tenant", "acme"}, connect.CodeInvalidArgument, 0},
		{"key not ASCII", map[string]any{"item": "lamp"}, []string{idemconnect.HeaderKey, "k\x01", "Tenant", "acme"}, connect.CodeInvalidArgument, 0},
		{"replayed unavailable", map[string]any{"fail": true}, []string{"Tenant", "acme"}, connect.CodeUnavailable, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(seen.get())
			_, err := call(t, c, tc.fields, tc.header...)
			if connect.CodeOf(err) != tc.code {
				t.Errorf("%v, want %v", err, tc.code)
			}
			if n := len(seen.get()) - before; n != tc.attempts {
				t.Errorf("%d attempts, want %d", n, tc.attempts)
			}
		})
	}
}

// TestClientGivesUp: attempts are bounded by MaxAttempts and by the call's
// context; giving up returns a *GaveUpError with the key the server saw.
func TestClientGivesUp(t *testing.T) {
	o := newOrders(t, idem.Config{})
	seen := &keysSeen{}
	srv := serve(t, flaky(o, 1000), seen.Interceptor(), newServer(t, o, idemconnect.Config{RetryAfter: time.Hour}).Interceptor())

	c := client(srv, createOrder, protocols[0], connect.WithInterceptors((&idemconnect.Client{MaxAttempts: 3, BaseDelay: time.Millisecond}).Interceptor()))
	_, err := call(t, c, map[string]any{"item": "book"}, "Tenant", "acme")
	var gave *idemconnect.GaveUpError
	if !errors.As(err, &gave) || gave.Attempts != 3 || connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("%v, want a GaveUpError after 3 attempts with code Unavailable", err)
	}
	if keys := seen.get(); len(keys) != 3 || keys[0] != gave.Key || keys[2] != gave.Key {
		t.Errorf("keys seen %q, GaveUpError key %q", keys, gave.Key)
	}

	// The server says "retry in an hour" (an Aborted from the store would);
	// the call's deadline ends the wait.
	inflight := serve(t, func(context.Context, *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		e := connect.NewError(connect.CodeAborted, errors.New("busy"))
		d, _ := connect.NewErrorDetail(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Hour)})
		e.AddDetail(d)
		return nil, e
	}, newServer(t, o, idemconnect.Config{}).Interceptor())
	c = client(inflight, createOrder, protocols[0], connect.WithInterceptors((&idemconnect.Client{MaxDelay: time.Hour}).Interceptor()))
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	req := connect.NewRequest(&structpb.Struct{})
	req.Header().Set("Tenant", "acme")
	start := time.Now()
	_, err = c.CallUnary(ctx, req)
	if !errors.As(err, &gave) || gave.Attempts != 1 || time.Since(start) > 5*time.Second {
		t.Errorf("%v after %v, want a GaveUpError after 1 attempt, soon after the deadline", err, time.Since(start))
	}
}

// TestClientRequestReused: a request value sent twice is two intentions:
// the key the client made for the first call does not stay on it.
func TestClientRequestReused(t *testing.T) {
	o := newOrders(t, idem.Config{})
	seen := &keysSeen{}
	srv := serve(t, o.create, seen.Interceptor(), newServer(t, o, idemconnect.Config{}).Interceptor())
	c := client(srv, createOrder, protocols[0], connect.WithInterceptors((&idemconnect.Client{}).Interceptor()))
	msg, _ := structpb.NewStruct(map[string]any{"item": "book"})
	req := connect.NewRequest(msg)
	req.Header().Set("Tenant", "acme")
	for range 2 {
		if resp, err := c.CallUnary(t.Context(), req); err != nil || resp.Header().Get(idemconnect.HeaderReplayed) != "" {
			t.Fatalf("%v, %v; want a fresh call", resp, err)
		}
	}
	if keys := seen.get(); len(keys) != 2 || keys[0] == keys[1] || req.Header().Get(idemconnect.HeaderKey) != "" {
		t.Errorf("keys seen %q, key left on the request %q; want two keys and none left", keys, req.Header().Get(idemconnect.HeaderKey))
	}
	if o.count(t) != 2 {
		t.Errorf("%d orders, want 2", o.count(t))
	}
}
