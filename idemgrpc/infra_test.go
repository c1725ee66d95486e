package idemgrpc_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// keysSeen records, per method, the idempotency keys the server received
// (one "" for a call without any). It runs before idem's interceptor.
type keysSeen struct {
	mu   sync.Mutex
	keys map[string][]string
}

func (k *keysSeen) interceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	got := md.Get(idemgrpc.MetadataKey)
	if len(got) == 0 {
		got = []string{""}
	}
	k.mu.Lock()
	k.keys[info.FullMethod] = append(k.keys[info.FullMethod], got...)
	k.mu.Unlock()
	return handler(ctx, req)
}

func (k *keysSeen) of(method string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.keys[method]...)
}

// infraServer serves gRPC's own health and reflection services on a real
// listener on 127.0.0.1 with the server interceptor of cfg, and returns a
// connection through a Client interceptor with client's Protect.
func infraServer(t *testing.T, o *orders, cfg idemgrpc.Config, clientProtect func(string) bool) (*grpc.ClientConn, *keysSeen) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := &keysSeen{keys: map[string][]string{}}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(seen.interceptor, newServer(t, o, cfg).UnaryInterceptor()))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	reflection.Register(srv)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	c := &idemgrpc.Client{Protect: clientProtect, MaxAttempts: 2}
	conn, err := grpc.NewClient(lis.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.UnaryInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, seen
}

func countRecords(t *testing.T, o *orders) int64 {
	t.Helper()
	c, err := o.store.Counts(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Total()
}

// TestHealthAndReflectionPassThrough: by default neither interceptor
// touches gRPC's health service (Check, List, the Watch stream) or server
// reflection: a Kubernetes probe (no key, no principal) is answered, a call
// with a key is answered too, the client sends no key of its own, and no
// record is written.
func TestHealthAndReflectionPassThrough(t *testing.T) {
	o := newOrders(t, idem.Config{})
	conn, seen := infraServer(t, o, idemgrpc.Config{}, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)

	for _, tc := range []struct {
		name string
		md   []string // outgoing metadata
	}{
		{"probe without a key", nil},
		{"with a key and a tenant", []string{idemgrpc.MetadataKey, "k-health", "tenant", "acme"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(ctx, tc.md...)
			resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Check: %v, %v; want SERVING", resp.GetStatus(), err)
			}
			if _, err := hc.List(ctx, &healthpb.HealthListRequest{}); err != nil {
				t.Errorf("List: %v", err)
			}
		})
	}
	for _, m := range []string{healthpb.Health_Check_FullMethodName, healthpb.Health_List_FullMethodName} {
		if got := seen.of(m); len(got) != 2 || got[0] != "" || got[1] != "k-health" {
			t.Errorf("%s: keys the server got %q, want [\"\" \"k-health\"]: the client must add none", m, got)
		}
	}

	watch, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("Watch: %v, %v; want SERVING", resp.GetStatus(), err)
	}

	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := refl.Recv(); err != nil || len(resp.GetListServicesResponse().GetService()) == 0 {
		t.Errorf("reflection: %v, %v; want the services listed", resp, err)
	}
	_ = refl.CloseSend()

	if n := countRecords(t, o); n != 0 {
		t.Errorf("%d records after health and reflection calls, want none", n)
	}
}

// TestHealthProtectedOnRequest: a Protect that includes the health service
// protects it like any other method.
func TestHealthProtectedOnRequest(t *testing.T) {
	o := newOrders(t, idem.Config{})
	all := func(string) bool { return true }
	conn, _ := infraServer(t, o, idemgrpc.Config{Protect: all}, all)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	hc := healthpb.NewHealthClient(conn)
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("protected Check without a principal: %v, want PermissionDenied", err)
	}
	ctx = metadata.AppendToOutgoingContext(ctx, "tenant", "acme")
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("protected Check with a principal (the client adds the key): %v", err)
	}
	if n := countRecords(t, o); n != 1 {
		t.Errorf("%d records after one protected Check, want 1", n)
	}
}

func TestDefaultProtect(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{createOrder, true},
		{"/grpc.health.v1.Health/Check", false},
		{"/grpc.health.v1.Health/List", false},
		{"/grpc.health.v1.Health/Watch", false},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", false},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", false},
		{"/grpc.health.v1.HealthCheck/Check", true}, // not the health service
		{"/acme.grpc.health.v1.Health/Check", true}, // another package
		{"/grpc.health.v2.Health/Check", true},      // another version
		{"/grpc.reflection.v1.ServerReflectionX/Info", true},
	} {
		if got := idemgrpc.DefaultProtect(tc.method); got != tc.want {
			t.Errorf("DefaultProtect(%q) = %v, want %v", tc.method, got, tc.want)
		}
	}
}
