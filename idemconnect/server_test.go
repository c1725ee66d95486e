package idemconnect_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemconnect"
)

// marshal is the deterministic protobuf encoding of m, to compare
// messages byte for byte.
func marshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestReplay: over every protocol, the first call runs the handler in the
// store's transaction; a retry with the same key gets the same message
// (byte for byte), response header and trailer, marked replayed, decoded
// by a typed client, without running the handler.
func TestReplay(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
			c := client(srv, createOrder, p)
			first, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			if got := first.Header().Values(idemconnect.HeaderReplayed); len(got) != 0 {
				t.Errorf("first call marked replayed: %v", got)
			}
			for i := range 2 {
				again, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
				if err != nil {
					t.Fatalf("retry %d: %v", i, err)
				}
				if !bytes.Equal(marshal(t, again.Msg), marshal(t, first.Msg)) {
					t.Errorf("retry %d: %v, want the first answer %v", i, again.Msg, first.Msg)
				}
				if got := again.Header().Values(idemconnect.HeaderReplayed); len(got) != 1 || got[0] != "true" {
					t.Errorf("retry %d: %s = %v, want [true]", i, idemconnect.HeaderReplayed, got)
				}
				if got := again.Header().Values("X-Order"); len(got) != 1 || got[0] != "book" {
					t.Errorf("retry %d: X-Order = %v, want [book]", i, got)
				}
				if got := again.Trailer().Values("X-Total"); len(got) != 1 || got[0] != "1" {
					t.Errorf("retry %d: trailer X-Total = %v, want [1]", i, got)
				}
			}
			if n, runs := o.count(t), o.runs.Load(); n != 1 || runs != 1 {
				t.Errorf("%d orders, %d handler runs; want 1 and 1", n, runs)
			}
			if first.Msg.GetFields()["id"].GetNumberValue() != 1 {
				t.Errorf("first answer %v, want order 1", first.Msg)
			}
		})
	}
}

// TestReplayRawJSON: over the Connect protocol with JSON, the replayed body
// is the first body byte for byte.
func TestReplayRawJSON(t *testing.T) {
	o := newOrders(t, idem.Config{})
	srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	post := func() (string, http.Header) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+createOrder, strings.NewReader(`{"item":"book"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(idemconnect.HeaderKey, "k1")
		req.Header.Set("Tenant", "acme")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return string(b), resp.Header
	}
	first, _ := post()
	again, h := post()
	if again != first || h.Get(idemconnect.HeaderReplayed) != "true" {
		t.Errorf("replayed body %q (replayed %q), want %q", again, h.Get(idemconnect.HeaderReplayed), first)
	}
}

// errorReason returns the reason of err's ErrorInfo in idem's domain.
func errorReason(err error) string { return idemconnect.Reason(err) }

// TestMismatch: the same key with another request is FailedPrecondition
// and runs nothing; on another procedure the key is fresh; the original
// still replays.
func TestMismatch(t *testing.T) {
	o := newOrders(t, idem.Config{})
	srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	c := client(srv, createOrder, protocols[0])
	if _, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme"); err != nil {
		t.Fatal(err)
	}
	_, err := call(t, c, map[string]any{"item": "lamp"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || errorReason(err) != idemconnect.ReasonMismatch {
		t.Errorf("same key, other request: %v (reason %q), want FailedPrecondition %s", err, errorReason(err), idemconnect.ReasonMismatch)
	}
	if _, err := call(t, client(srv, otherOrder, protocols[0]), map[string]any{"item": "lamp"}, idemconnect.HeaderKey, "k1", "Tenant", "acme"); err != nil {
		t.Errorf("same key on another procedure: %v, want a fresh call", err)
	}
	again, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil || again.Msg.GetFields()["item"].GetStringValue() != "book" {
		t.Errorf("the original after a mismatch: %v, %v", again, err)
	}
	if n := o.count(t); n != 2 {
		t.Errorf("%d orders, want 2", n)
	}
}

// TestKeyAndPrincipalRefusals: a protected call without a valid key is
// InvalidArgument, one without a principal PermissionDenied (unless
// AllowAnonymous); nothing runs.
func TestKeyAndPrincipalRefusals(t *testing.T) {
	o := newOrders(t, idem.Config{})
	srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	for _, p := range []protocol{protocols[0], protocols[2]} {
		c := client(srv, createOrder, p)
		for _, tc := range []struct {
			name   string
			header []string
			code   connect.Code
			reason string
		}{
			{"no key", []string{"Tenant", "acme"}, connect.CodeInvalidArgument, idemconnect.ReasonKeyMissing},
			{"key too long", []string{idemconnect.HeaderKey, strings.Repeat("k", 256), "Tenant", "acme"}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
			{"two keys", []string{idemconnect.HeaderKey, "a", idemconnect.HeaderKey, "b", "Tenant", "acme"}, connect.CodeInvalidArgument, idemconnect.ReasonKeyInvalid},
			{"no principal", []string{idemconnect.HeaderKey, "k1"}, connect.CodePermissionDenied, idemconnect.ReasonPrincipalMissing},
		} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				_, err := call(t, c, map[string]any{"item": "book"}, tc.header...)
				if connect.CodeOf(err) != tc.code || errorReason(err) != tc.reason {
					t.Errorf("%v (reason %q), want %v %s", err, errorReason(err), tc.code, tc.reason)
				}
			})
		}
	}
	if runs := o.runs.Load(); runs != 0 {
		t.Errorf("the handler ran %d times for refused calls", runs)
	}
	anon := serve(t, o.create, newServer(t, o, idemconnect.Config{AllowAnonymous: true}).Interceptor())
	if _, err := call(t, client(anon, createOrder, protocols[0]), map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1"); err != nil {
		t.Errorf("anonymous call with AllowAnonymous: %v", err)
	}
}

// TestPrincipalsIsolateKeys: one key from two principals is two calls.
func TestPrincipalsIsolateKeys(t *testing.T) {
	o := newOrders(t, idem.Config{})
	srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	c := client(srv, createOrder, protocols[0])
	a, errA := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	b, errB := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "globex")
	if errA != nil || errB != nil || proto.Equal(a.Msg, b.Msg) || b.Header().Get(idemconnect.HeaderReplayed) != "" {
		t.Errorf("acme %v %v, globex %v %v: want two separate orders", a, errA, b, errB)
	}
}

// TestErrorPolicy: over every protocol, a connect error with a stored code
// (FailedPrecondition) commits with the handler's writes and replays code,
// message, details and metadata, marked replayed; one with a code that
// says "not now" (Unavailable) and a plain error are returned as the
// handler gave them, rolled back, and run again on retry.
func TestErrorPolicy(t *testing.T) {
	insufficient := func() error {
		e := connect.NewError(connect.CodeFailedPrecondition, errors.New("insufficient funds"))
		d, _ := connect.NewErrorDetail(&errdetails.ErrorInfo{Reason: "FUNDS", Domain: "shop", Metadata: map[string]string{"short": "12.50"}})
		e.AddDetail(d)
		e.Meta().Set("X-Balance", "3")
		return e
	}
	for _, p := range protocols {
		for _, tc := range []struct {
			name   string
			err    func() error
			stored bool
		}{
			{"stored code", insufficient, true},
			{"not-now code", func() error { return connect.NewError(connect.CodeUnavailable, errors.New("payment provider down")) }, false},
			{"plain error", func() error { return errors.New("boom") }, false},
		} {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				o := newOrders(t, idem.Config{})
				h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
					if _, err := o.create(ctx, req); err != nil {
						return nil, err
					}
					return nil, tc.err()
				}
				srv := serve(t, h, newServer(t, o, idemconnect.Config{}).Interceptor())
				c := client(srv, createOrder, p)
				var firstErr *connect.Error
				for i := range 2 {
					_, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
					var ce *connect.Error
					if !errors.As(err, &ce) {
						t.Fatalf("call %d: %v, want a connect error", i, err)
					}
					if i == 0 {
						firstErr = ce
					}
					if ce.Code() != firstErr.Code() || ce.Message() != firstErr.Message() || len(ce.Details()) != len(firstErr.Details()) {
						t.Errorf("call %d: %v with %d details, want %v with %d", i, ce, len(ce.Details()), firstErr, len(firstErr.Details()))
					}
					for j, d := range ce.Details() {
						if d.Type() != firstErr.Details()[j].Type() || !bytes.Equal(d.Bytes(), firstErr.Details()[j].Bytes()) {
							t.Errorf("call %d: detail %d is %s %x, want %s %x", i, j, d.Type(), d.Bytes(), firstErr.Details()[j].Type(), firstErr.Details()[j].Bytes())
						}
					}
					if replayed := ce.Meta().Get(idemconnect.HeaderReplayed) == "true"; replayed != (tc.stored && i == 1) {
						t.Errorf("call %d: replayed=%v", i, replayed)
					}
					if tc.stored && ce.Meta().Get("X-Balance") != "3" {
						t.Errorf("call %d: X-Balance %q, want 3", i, ce.Meta().Get("X-Balance"))
					}
				}
				if tc.stored {
					if firstErr.Code() != connect.CodeFailedPrecondition || firstErr.Message() != "insufficient funds" || len(firstErr.Details()) != 1 {
						t.Errorf("first answer %v, want the handler's error with its detail", firstErr)
					}
				}
				wantRuns, wantRows := int64(2), 0
				if tc.stored {
					wantRuns, wantRows = 1, 1
				}
				if runs, n := o.runs.Load(), o.count(t); runs != wantRuns || n != wantRows {
					t.Errorf("%d runs, %d orders; want %d and %d", runs, n, wantRuns, wantRows)
				}
			})
		}
	}
}

// TestSerializationRerun: a handler run that fails with a retryable
// database error is rolled back and run again inside the same call; only
// the successful run's writes and CallInfo headers remain.
func TestSerializationRerun(t *testing.T) {
	o := newOrders(t, idem.Config{})
	var runs int
	h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		runs++
		if info, ok := connect.CallInfoForHandlerContext(ctx); ok {
			info.ResponseHeader().Add("X-Run", fmt.Sprint(runs))
		}
		resp, err := o.create(ctx, req)
		if err == nil && runs == 1 {
			return nil, fmt.Errorf("insert order: %w", idem.ErrSerialization)
		}
		return resp, err
	}
	srv := serve(t, h, newServer(t, o, idemconnect.Config{}).Interceptor())
	c := client(srv, createOrder, protocols[0])
	first, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	if runs != 2 || o.count(t) != 1 {
		t.Errorf("%d runs, %d orders; want 2 runs and 1 order (the first insert rolled back)", runs, o.count(t))
	}
	if got := first.Header().Values("X-Run"); len(got) != 1 || got[0] != "2" {
		t.Errorf("first answer X-Run %v, want [2]: the rolled-back run's header must not stay", got)
	}
	again, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil || !proto.Equal(again.Msg, first.Msg) {
		t.Fatalf("replay: %v, %v", again, err)
	}
	if got := again.Header().Values("X-Run"); len(got) != 1 || got[0] != "2" {
		t.Errorf("replayed X-Run %v, want [2]", got)
	}
}

// TestInFlight: while a call holds the key, a retry of it gets Aborted with
// RetryInfo (the configured delay) and does nothing.
func TestInFlight(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 50 * time.Millisecond})
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
	srv := serve(t, h, newServer(t, o, idemconnect.Config{RetryAfter: 1500 * time.Millisecond}).Interceptor())
	c := client(srv, createOrder, protocols[2])
	first := make(chan error, 1)
	go func() {
		_, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call never reached the handler")
	}
	_, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	close(release)
	d, ok := idemconnect.RetryDelay(err)
	// On SQLite, whose writers take the whole database, the retry waited
	// for the database, not for the key.
	if connect.CodeOf(err) != connect.CodeAborted || errorReason(err) != idemconnect.ReasonDatabaseBusy || !ok || d != 1500*time.Millisecond {
		t.Errorf("retry while in flight: %v (reason %q, retry delay %v %v), want Aborted %s with a 1.5s RetryInfo", err, errorReason(err), d, ok, idemconnect.ReasonDatabaseBusy)
	}
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if runs, n := o.runs.Load(), o.count(t); runs != 1 || n != 1 {
		t.Errorf("%d runs, %d orders; want 1 and 1", runs, n)
	}
}

// TestProtect: by default a NO_SIDE_EFFECTS procedure needs no key and gets
// no transaction; a Protect that lists it protects it.
func TestProtect(t *testing.T) {
	o := newOrders(t, idem.Config{})
	h := func(ctx context.Context, _ *connect.Request[structpb.Struct]) (*connect.Response[structpb.Struct], error) {
		_, ok := idemconnect.Tx[*sql.Tx](ctx)
		m, _ := structpb.NewStruct(map[string]any{"tx": ok})
		return connect.NewResponse(m), nil
	}
	srv := serve(t, h, newServer(t, o, idemconnect.Config{}).Interceptor())
	got, err := call(t, client(srv, getOrder, protocols[0]), nil)
	if err != nil || got.Msg.GetFields()["tx"].GetBoolValue() {
		t.Errorf("NO_SIDE_EFFECTS procedure without a key: %v, %v; want success without a transaction", got, err)
	}
	srv = serve(t, h, newServer(t, o, idemconnect.Config{Protect: func(connect.Spec) bool { return true }}).Interceptor())
	_, err = call(t, client(srv, getOrder, protocols[0]), nil)
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("protected NO_SIDE_EFFECTS procedure without a key: %v, want InvalidArgument", err)
	}
	if _, ok := idemconnect.Tx[*sql.Tx](context.Background()); ok {
		t.Error("Tx outside the interceptor reported true")
	}
}

// TestNoSchema: a protected procedure without a protobuf schema is refused
// with Internal before anything runs, never served without a way to replay.
func TestNoSchema(t *testing.T) {
	o := newOrders(t, idem.Config{})
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, o.create,
		connect.WithInterceptors(newServer(t, o, idemconnect.Config{}).Interceptor())))
	srv := startTLS(t, mux)
	c := connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+createOrder)
	_, err := call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if connect.CodeOf(err) != connect.CodeInternal || errorReason(err) != idemconnect.ReasonNoSchema {
		t.Errorf("no schema: %v (reason %q), want Internal %s", err, errorReason(err), idemconnect.ReasonNoSchema)
	}
	if o.runs.Load() != 0 || o.count(t) != 0 {
		t.Errorf("the handler ran without a schema")
	}
}

// TestWrongResponseType: a handler whose message is not the schema's
// output type is rolled back with Internal: its answer could not be
// replayed as itself.
func TestWrongResponseType(t *testing.T) {
	o := newOrders(t, idem.Config{})
	h := func(ctx context.Context, req *connect.Request[structpb.Struct]) (*connect.Response[wrapperspb.StringValue], error) {
		if _, err := o.create(ctx, req); err != nil {
			return nil, err
		}
		return connect.NewResponse(wrapperspb.String("x")), nil
	}
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, h, connect.WithSchema(schema(createOrder)),
		connect.WithInterceptors(newServer(t, o, idemconnect.Config{}).Interceptor())))
	srv := startTLS(t, mux)
	c := connect.NewClient[structpb.Struct, wrapperspb.StringValue](srv.Client(), srv.URL+createOrder, connect.WithSchema(schema(createOrder)))
	_, err := c.CallUnary(t.Context(), func() *connect.Request[structpb.Struct] {
		r := connect.NewRequest(&structpb.Struct{})
		r.Header().Set(idemconnect.HeaderKey, "k1")
		r.Header().Set("Tenant", "acme")
		return r
	}())
	if connect.CodeOf(err) != connect.CodeInternal || o.count(t) != 0 {
		t.Errorf("wrong response type: %v, %d orders; want Internal and nothing stored", err, o.count(t))
	}
}

// TestScope: the scope begins with the principal and is not idemgrpc's.
func TestScope(t *testing.T) {
	got := idemconnect.Scope("acme", createOrder)
	if want := `"acme" connect:"` + createOrder + `"`; got != want {
		t.Errorf("Scope = %s, want %s", got, want)
	}
	if !strings.HasPrefix(got, idem.ScopePrefix("acme")) {
		t.Errorf("Scope %s does not begin with ScopePrefix", got)
	}
}

// TestDefaultFingerprint: deterministic for map fields in any order,
// different for another procedure or request, an error for a non-proto
// request.
func TestDefaultFingerprint(t *testing.T) {
	a := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	b := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range 50 {
		a.Fields[fmt.Sprintf("f%d", i)] = structpb.NewNumberValue(float64(i))
		b.Fields[fmt.Sprintf("f%d", 49-i)] = structpb.NewNumberValue(float64(49 - i))
	}
	fa, err := idemconnect.DefaultFingerprint(createOrder, a)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if fb, _ := idemconnect.DefaultFingerprint(createOrder, b); fb != fa {
			t.Fatal("equal maps fingerprint differently")
		}
	}
	if f, _ := idemconnect.DefaultFingerprint(otherOrder, a); f == fa {
		t.Error("another procedure fingerprints the same")
	}
	if f, _ := idemconnect.DefaultFingerprint(createOrder, wrapperspb.String("x")); f == fa {
		t.Error("another request fingerprints the same")
	}
	if _, err := idemconnect.DefaultFingerprint(createOrder, "not a message"); err == nil {
		t.Error("a non-proto request fingerprinted without error")
	}
}

// TestNewRefuses: a Server needs a store, a Principal and a RetryAfter
// that is not negative; each refusal matches idem.ErrInvalidConfig.
func TestNewRefuses(t *testing.T) {
	o := newOrders(t, idem.Config{})
	for _, tc := range []struct {
		name  string
		store *idem.Store[*sql.Tx]
		cfg   idemconnect.Config
	}{
		{"nil store", nil, idemconnect.Config{Principal: tenantOf}},
		{"no principal", o.store, idemconnect.Config{}},
		{"negative RetryAfter", o.store, idemconnect.Config{Principal: tenantOf, RetryAfter: -time.Second}},
	} {
		if _, err := idemconnect.New(tc.store, tc.cfg); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want an error matching idem.ErrInvalidConfig", tc.name, err)
		}
	}
}

// TestReplayAcrossCodecs: the same request sent as protobuf, then as JSON,
// then over gRPC is one request: the retries replay, they are not
// mismatches.
func TestReplayAcrossCodecs(t *testing.T) {
	o := newOrders(t, idem.Config{})
	srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	fields := map[string]any{"item": "book", "n": 3, "tags": map[string]any{"z": 1, "a": []any{"x", nil}}}
	first, err := call(t, client(srv, createOrder, protocols[1]), fields, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []protocol{protocols[0], protocols[2]} {
		again, err := call(t, client(srv, createOrder, p), fields, idemconnect.HeaderKey, "k1", "Tenant", "acme")
		if err != nil || again.Header().Get(idemconnect.HeaderReplayed) != "true" || !proto.Equal(again.Msg, first.Msg) {
			t.Errorf("%s: %v, %v; want a replay of %v", p.name, again, err, first.Msg)
		}
	}
}

// TestReplayAfterRestart: the stored answer replays from a new server on
// the same database (nothing is kept in memory).
func TestReplayAfterRestart(t *testing.T) {
	o := newOrders(t, idem.Config{})
	srv := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	first, err := call(t, client(srv, createOrder, protocols[0]), map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	srv.Close()
	srv2 := serve(t, o.create, newServer(t, o, idemconnect.Config{}).Interceptor())
	again, err := call(t, client(srv2, createOrder, protocols[2]), map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if err != nil || !proto.Equal(again.Msg, first.Msg) || again.Header().Get(idemconnect.HeaderReplayed) != "true" {
		t.Errorf("after restart: %v %v, want a replay of %v", again, err, first.Msg)
	}
}

// TestNoSchemaDefaultLogger: the refusal of a procedure without a schema
// is logged with the default logger when Config.Logger is not set.
func TestNoSchemaDefaultLogger(t *testing.T) {
	o := newOrders(t, idem.Config{})
	s, err := idemconnect.New(o.store, idemconnect.Config{Principal: tenantOf})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(createOrder, connect.NewUnaryHandler(createOrder, o.create, connect.WithInterceptors(s.Interceptor())))
	srv := startTLS(t, mux)
	c := connect.NewClient[structpb.Struct, structpb.Struct](srv.Client(), srv.URL+createOrder)
	_, err = call(t, c, map[string]any{"item": "book"}, idemconnect.HeaderKey, "k1", "Tenant", "acme")
	if connect.CodeOf(err) != connect.CodeInternal || errorReason(err) != idemconnect.ReasonNoSchema {
		t.Errorf("no schema: %v (reason %q), want Internal %s", err, errorReason(err), idemconnect.ReasonNoSchema)
	}
}
