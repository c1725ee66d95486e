package idemgrpc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newServer makes the interceptor on o's store with cfg (Principal and
// Logger defaulted for the tests).
func newServer(t testing.TB, o *orders, cfg idemgrpc.Config) *idemgrpc.Server[*sql.Tx] {
	t.Helper()
	if cfg.Principal == nil {
		cfg.Principal = tenantOf
	}
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	s, err := idemgrpc.New(o.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// errorInfo returns the reason of err's ErrorInfo detail in idem's domain.
func errorInfo(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == idemgrpc.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

func retryDelay(err error) (time.Duration, bool) {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration(), true
		}
	}
	return 0, false
}

// TestReplay: the first call runs the handler in the store's transaction;
// a retry with the same key gets the same message, marked replayed, without
// running it. A registered method's replay is its own response type, seen
// by interceptors outside idem's; an unregistered one's is a carrier of the
// same bytes, which the client decodes as its own type.
func TestReplay(t *testing.T) {
	for _, tc := range []struct {
		method, wantType string
	}{
		{createOrder, "*structpb.Struct"},
		{createUnlisted, "*emptypb.Empty"},
	} {
		t.Run(tc.method, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			var mu sync.Mutex
			var seen []string // response types an outer interceptor saw
			outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
				resp, err := h(ctx, req)
				mu.Lock()
				seen = append(seen, fmt.Sprintf("%T", resp))
				mu.Unlock()
				return resp, err
			}
			conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{outer, newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})

			first, h1, err := call(t, conn, tc.method, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
			if err != nil {
				t.Fatalf("first call: %v", err)
			}
			if got := h1.Get(idemgrpc.MetadataReplayed); len(got) != 0 {
				t.Errorf("first call marked replayed: %v", got)
			}
			for i := range 2 {
				again, h, err := call(t, conn, tc.method, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
				if err != nil {
					t.Fatalf("retry %d: %v", i, err)
				}
				if !proto.Equal(again, first) {
					t.Errorf("retry %d: %v, want the first answer %v", i, again, first)
				}
				if got := h.Get(idemgrpc.MetadataReplayed); len(got) != 1 || got[0] != "true" {
					t.Errorf("retry %d: %s = %v, want [true]", i, idemgrpc.MetadataReplayed, got)
				}
			}
			if n, runs := o.count(t), o.runs.Load(); n != 1 || runs != 1 {
				t.Errorf("%d orders, %d handler runs; want 1 and 1", n, runs)
			}
			if first.GetFields()["id"].GetNumberValue() != 1 {
				t.Errorf("first answer %v, want order 1", first)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != 3 || seen[0] != "*structpb.Struct" || seen[1] != tc.wantType || seen[2] != tc.wantType {
				t.Errorf("outer interceptor saw %v, want *structpb.Struct then %s twice", seen, tc.wantType)
			}
		})
	}
}

// TestMismatch: the same key with another request is FailedPrecondition
// and runs nothing; on another method the key is fresh (the scope holds the
// method); the original still replays.
func TestMismatch(t *testing.T) {
	o := newOrders(t, idem.Config{})
	conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	if _, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme"); err != nil {
		t.Fatal(err)
	}
	_, _, err := call(t, conn, createOrder, map[string]any{"item": "lamp"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if status.Code(err) != codes.FailedPrecondition || errorInfo(err) != idemgrpc.ReasonMismatch {
		t.Errorf("same key, other request: %v (reason %q), want FailedPrecondition %s", err, errorInfo(err), idemgrpc.ReasonMismatch)
	}
	// Another method is another scope: the key is fresh there.
	if _, _, err := call(t, conn, createUnlisted, map[string]any{"item": "lamp"}, idemgrpc.MetadataKey, "k1", "tenant", "acme"); err != nil {
		t.Errorf("same key on another method: %v, want a fresh call", err)
	}
	again, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if err != nil || again.GetFields()["item"].GetStringValue() != "book" {
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
	conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	for _, tc := range []struct {
		name   string
		md     []string
		code   codes.Code
		reason string
	}{
		{"no key", []string{"tenant", "acme"}, codes.InvalidArgument, idemgrpc.ReasonKeyMissing},
		{"empty key", []string{idemgrpc.MetadataKey, "", "tenant", "acme"}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
		{"key too long", []string{idemgrpc.MetadataKey, strings.Repeat("k", 256), "tenant", "acme"}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
		{"two keys", []string{idemgrpc.MetadataKey, "a", idemgrpc.MetadataKey, "b", "tenant", "acme"}, codes.InvalidArgument, idemgrpc.ReasonKeyInvalid},
		{"no principal", []string{idemgrpc.MetadataKey, "k1"}, codes.PermissionDenied, idemgrpc.ReasonPrincipalMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, tc.md...)
			if status.Code(err) != tc.code || errorInfo(err) != tc.reason {
				t.Errorf("%v (reason %q), want %v %s", err, errorInfo(err), tc.code, tc.reason)
			}
		})
	}
	if runs := o.runs.Load(); runs != 0 {
		t.Errorf("the handler ran %d times for refused calls", runs)
	}

	// gRPC clients refuse to send metadata values outside printable ASCII;
	// a key the transport let through is still checked.
	md := metadata.Pairs(idemgrpc.MetadataKey, "clé", "tenant", "acme")
	_, err := newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()(metadata.NewIncomingContext(context.Background(), md), &structpb.Struct{},
		&grpc.UnaryServerInfo{FullMethod: createOrder}, func(context.Context, any) (any, error) {
			t.Error("the handler ran for a key that is not ASCII")
			return nil, nil
		})
	if status.Code(err) != codes.InvalidArgument || errorInfo(err) != idemgrpc.ReasonKeyInvalid {
		t.Errorf("key not ASCII: %v, want InvalidArgument %s", err, idemgrpc.ReasonKeyInvalid)
	}

	anon := newServer(t, o, idemgrpc.Config{AllowAnonymous: true})
	conn = bufServer(t, o.create, []grpc.UnaryServerInterceptor{anon.UnaryInterceptor()})
	if _, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1"); err != nil {
		t.Errorf("anonymous call with AllowAnonymous: %v", err)
	}
}

// TestPrincipalsIsolateKeys: one key from two principals is two calls.
func TestPrincipalsIsolateKeys(t *testing.T) {
	o := newOrders(t, idem.Config{})
	conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	a, _, errA := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	b, hb, errB := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "globex")
	if errA != nil || errB != nil || proto.Equal(a, b) || len(hb.Get(idemgrpc.MetadataReplayed)) != 0 {
		t.Errorf("acme %v %v, globex %v %v (header %v): want two separate orders", a, errA, b, errB, hb)
	}
}

// TestScopeSelectsTenant: a call's record is stored under
// idemgrpc.Scope(principal, method), which begins with the principal, so
// idem.ScopePrefix lists one tenant's records and no other's.
func TestScopeSelectsTenant(t *testing.T) {
	o := newOrders(t, idem.Config{})
	conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	for _, tenant := range []string{"acme", "acme-eu"} {
		if _, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", tenant); err != nil {
			t.Fatalf("%s: %v", tenant, err)
		}
	}
	page, err := o.store.List(t.Context(), idem.ListFilter{ScopePrefix: idem.ScopePrefix("acme")})
	if err != nil {
		t.Fatal(err)
	}
	want := idemgrpc.Scope("acme", createOrder)
	if len(page.Records) != 1 || page.Records[0].Scope != want {
		t.Fatalf("acme's records: %+v, want one under %q", page.Records, want)
	}
	if want != `"acme" rpc:"/idemgrpc.test.Orders/Create"` {
		t.Errorf("Scope = %q", want)
	}
}

// keylessEvents counts the EventKeyless events a store emits.
type keylessEvents struct{ n atomic.Int64 }

func (k *keylessEvents) Observe(_ context.Context, e idem.Event) {
	if e.Kind == idem.EventKeyless {
		k.n.Add(1)
	}
}

// TestKeyOptional: with Config.KeyOptional a call without a key runs the
// handler outside any transaction, stores nothing and is reported as
// EventKeyless; without it the call is refused with InvalidArgument.
func TestKeyOptional(t *testing.T) {
	for _, optional := range []bool{true, false} {
		t.Run(fmt.Sprint("KeyOptional=", optional), func(t *testing.T) {
			events := &keylessEvents{}
			o := newOrders(t, idem.Config{Observer: events})
			var inTx atomic.Bool
			handler := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
				_, ok := idemgrpc.Tx[*sql.Tx](ctx)
				inTx.Store(ok)
				return req, nil
			}
			conn := bufServer(t, handler, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{KeyOptional: optional}).UnaryInterceptor()})
			_, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, "tenant", "acme")
			page, lerr := o.store.List(t.Context(), idem.ListFilter{})
			if lerr != nil {
				t.Fatal(lerr)
			}
			switch {
			case optional && (err != nil || inTx.Load() || events.n.Load() != 1 || len(page.Records) != 0):
				t.Errorf("keyless call: %v, in a transaction %v, %d events, %d records; want it run untouched, one event, no record",
					err, inTx.Load(), events.n.Load(), len(page.Records))
			case !optional && (status.Code(err) != codes.InvalidArgument || events.n.Load() != 0):
				t.Errorf("keyless call without KeyOptional: %v, %d events; want InvalidArgument, none", err, events.n.Load())
			}
			if _, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme"); err != nil || !inTx.Load() {
				t.Errorf("call with a key: %v, in a transaction %v; want it protected", err, inTx.Load())
			}
		})
	}
}

// TestFormerScopes: a record stored under idem v0.0's scope form ("grpc",
// the method, the principal) answers a retry under Config.FormerScopes
// with a replay, without running the handler; without FormerScopes the
// retry is a new call under the new scope.
func TestFormerScopes(t *testing.T) {
	for _, former := range []bool{true, false} {
		t.Run(fmt.Sprint("FormerScopes=", former), func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{FormerScopes: former}).UnaryInterceptor()})
			first, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
			if err != nil {
				t.Fatal(err)
			}
			// Move the record to where v0.0 stored it.
			if _, err := o.db.ExecContext(t.Context(), "UPDATE "+idem.DefaultTable+" SET scope = ? WHERE scope = ?",
				`grpc "`+createOrder+`" "acme"`, idemgrpc.Scope("acme", createOrder)); err != nil {
				t.Fatal(err)
			}
			again, h, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
			switch {
			case err != nil:
				t.Fatal(err)
			case former && (!proto.Equal(first, again) || len(h.Get(idemgrpc.MetadataReplayed)) != 1 || o.runs.Load() != 1):
				t.Errorf("retry: %v (header %v) after %d runs, want a replay of %v", again, h, o.runs.Load(), first)
			case !former && o.runs.Load() != 2:
				t.Errorf("retry without FormerScopes: %d runs, want 2", o.runs.Load())
			}
		})
	}
}

// TestStatusPolicy: an answer with a stored code (FailedPrecondition)
// commits with the handler's writes and replays code, message and details;
// one with a code that says "not now" (Unavailable) and a plain error are
// returned as the handler gave them, rolled back, and run again on retry.
func TestStatusPolicy(t *testing.T) {
	insufficient, _ := status.New(codes.FailedPrecondition, "insufficient funds").
		WithDetails(&errdetails.ErrorInfo{Reason: "FUNDS", Domain: "shop"})
	boom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		err    error
		stored bool
	}{
		{"stored code", insufficient.Err(), true},
		{"not-now code", status.Error(codes.Unavailable, "payment provider down"), false},
		{"plain error", boom, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
				if _, err := o.create(ctx, req); err != nil {
					return nil, err
				}
				return nil, tc.err
			}
			conn := bufServer(t, h, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
			want := status.Convert(tc.err)
			for i := range 2 {
				_, hdr, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
				got := status.Convert(err)
				if got.Code() != want.Code() || got.Message() != want.Message() || !proto.Equal(got.Proto(), want.Proto()) {
					t.Errorf("call %d: %v, want %v", i, got.Proto(), want.Proto())
				}
				replayed := len(hdr.Get(idemgrpc.MetadataReplayed)) == 1
				if replayed != (tc.stored && i == 1) {
					t.Errorf("call %d: replayed=%v", i, replayed)
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

// TestInFlight: while a call holds the key, a retry of it gets Aborted with
// RetryInfo (the configured delay) and does nothing. On SQLite, whose
// writers take the whole database, the retry waited for the database, not
// for the key, so its reason is DATABASE_BUSY.
func TestInFlight(t *testing.T) {
	o := newOrders(t, idem.Config{WaitBound: 50 * time.Millisecond})
	entered, release := make(chan struct{}), make(chan struct{})
	h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		resp, err := o.create(ctx, req)
		if req.GetFields()["hold"].GetBoolValue() {
			close(entered)
			<-release
		}
		return resp, err
	}
	conn := bufServer(t, h, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{RetryAfter: 1500 * time.Millisecond}).UnaryInterceptor()})
	first := make(chan error, 1)
	go func() {
		_, _, err := call(t, conn, createOrder, map[string]any{"item": "book", "hold": true}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call never reached the handler")
	}
	_, _, err := call(t, conn, createOrder, map[string]any{"item": "book", "hold": true}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	close(release)
	d, ok := retryDelay(err)
	if status.Code(err) != codes.Aborted || errorInfo(err) != idemgrpc.ReasonDatabaseBusy || !ok || d != 1500*time.Millisecond {
		t.Errorf("retry while in flight: %v (reason %q, retry delay %v %v), want Aborted %s with a 1.5s RetryInfo", err, errorInfo(err), d, ok, idemgrpc.ReasonDatabaseBusy)
	}
	if err := <-first; err != nil {
		t.Fatalf("first call: %v", err)
	}
	if runs, n := o.runs.Load(), o.count(t); runs != 1 || n != 1 {
		t.Errorf("%d runs, %d orders; want 1 and 1", runs, n)
	}
}

// TestProtect: a method Protect leaves out needs no key and gets no
// transaction; Tx reports false there.
func TestProtect(t *testing.T) {
	o := newOrders(t, idem.Config{})
	s := newServer(t, o, idemgrpc.Config{Protect: func(m string) bool { return m == createOrder }})
	h := func(ctx context.Context, req *structpb.Struct) (*structpb.Struct, error) {
		_, ok := idemgrpc.Tx[*sql.Tx](ctx)
		return structpb.NewStruct(map[string]any{"tx": ok})
	}
	conn := bufServer(t, h, []grpc.UnaryServerInterceptor{s.UnaryInterceptor()})
	got, _, err := call(t, conn, createUnlisted, map[string]any{"item": "book"})
	if err != nil || got.GetFields()["tx"].GetBoolValue() {
		t.Errorf("unprotected method without a key: %v, %v; want success without a transaction", got, err)
	}
	got, _, err = call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if err != nil || !got.GetFields()["tx"].GetBoolValue() {
		t.Errorf("protected method: %v, %v; want success with a transaction", got, err)
	}
	if _, ok := idemgrpc.Tx[*sql.Tx](context.Background()); ok {
		t.Error("Tx outside the interceptor reported true")
	}
}

// TestDefaultFingerprint: deterministic for map fields in any order,
// different for another method or request, an error for a non-proto
// request.
func TestDefaultFingerprint(t *testing.T) {
	a := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	b := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range 50 {
		a.Fields[fmt.Sprintf("f%d", i)] = structpb.NewNumberValue(float64(i))
		b.Fields[fmt.Sprintf("f%d", 49-i)] = structpb.NewNumberValue(float64(49 - i))
	}
	fa, err := idemgrpc.DefaultFingerprint(createOrder, a)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if fb, _ := idemgrpc.DefaultFingerprint(createOrder, b); fb != fa {
			t.Fatal("equal maps fingerprint differently")
		}
	}
	if f, _ := idemgrpc.DefaultFingerprint(createUnlisted, a); f == fa {
		t.Error("another method fingerprints the same")
	}
	if f, _ := idemgrpc.DefaultFingerprint(createOrder, wrapperspb.String("x")); f == fa {
		t.Error("another request fingerprints the same")
	}
	if _, err := idemgrpc.DefaultFingerprint(createOrder, "not a message"); err == nil {
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
		cfg   idemgrpc.Config
	}{
		{"nil store", nil, idemgrpc.Config{Principal: tenantOf}},
		{"no principal", o.store, idemgrpc.Config{}},
		{"negative RetryAfter", o.store, idemgrpc.Config{Principal: tenantOf, RetryAfter: -time.Second}},
	} {
		if _, err := idemgrpc.New(tc.store, tc.cfg); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want an error matching idem.ErrInvalidConfig", tc.name, err)
		}
	}
}

// TestReplayAfterRestart: the stored answer replays from a new server on
// the same database (nothing is kept in memory).
func TestReplayAfterRestart(t *testing.T) {
	o := newOrders(t, idem.Config{})
	conn := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	first, _, err := call(t, conn, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if err != nil {
		t.Fatal(err)
	}
	conn2 := bufServer(t, o.create, []grpc.UnaryServerInterceptor{newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()})
	again, hdr, err := call(t, conn2, createOrder, map[string]any{"item": "book"}, idemgrpc.MetadataKey, "k1", "tenant", "acme")
	if err != nil || !proto.Equal(again, first) || len(hdr.Get(idemgrpc.MetadataReplayed)) != 1 {
		t.Errorf("after restart: %v %v %v, want a replay of %v", again, hdr, err, first)
	}
}
