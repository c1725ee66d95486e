package idemgrpc_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/admin"
	channelzpb "google.golang.org/grpc/channelz/grpc_channelz_v1"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgrpc"
)

// TestAdminServicesPassThrough: gRPC's admin services (admin.Register:
// channelz, and CSDS when xDS is linked in) are left alone by default, by
// the server and the client interceptor alike, as health and reflection
// are: a debugging tool's call carries no key and no principal, is
// answered and writes no record.
func TestAdminServicesPassThrough(t *testing.T) {
	o := newOrders(t, idem.Config{})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	seen := &keysSeen{keys: map[string][]string{}}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(seen.interceptor, newServer(t, o, idemgrpc.Config{}).UnaryInterceptor()))
	cleanup, err := admin.Register(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor((&idemgrpc.Client{MaxAttempts: 2}).UnaryInterceptor()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cz := channelzpb.NewChannelzClient(conn)
	if _, err := cz.GetServers(ctx, &channelzpb.GetServersRequest{}); err != nil {
		t.Errorf("channelz GetServers: %v", err)
	}
	if _, err := cz.GetTopChannels(ctx, &channelzpb.GetTopChannelsRequest{}); err != nil {
		t.Errorf("channelz GetTopChannels: %v", err)
	}
	for _, m := range []string{channelzpb.Channelz_GetServers_FullMethodName, channelzpb.Channelz_GetTopChannels_FullMethodName} {
		if got := seen.of(m); len(got) != 1 || got[0] != "" {
			t.Errorf("%s: keys the server got %q, want [\"\"]: the client must add none", m, got)
		}
	}
	if n := countRecords(t, o); n != 0 {
		t.Errorf("%d records after channelz calls, want none", n)
	}
}

// TestDefaultProtectLeavesAdminAlone: channelz and CSDS, every method,
// are gRPC's own; a service of the same name elsewhere is not.
func TestDefaultProtectLeavesAdminAlone(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{"/grpc.channelz.v1.Channelz/GetTopChannels", false},
		{"/grpc.channelz.v1.Channelz/GetSocket", false},
		{"/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus", false},
		{"/envoy.service.status.v3.ClientStatusDiscoveryService/StreamClientStatus", false},
		{"/acme.grpc.channelz.v1.Channelz/GetServers", true},
		{"/grpc.channelz.v2.Channelz/GetServers", true},
		{"/envoy.service.status.v3.ClientStatusDiscoveryServiceX/Fetch", true},
	} {
		if got := idemgrpc.DefaultProtect(tc.method); got != tc.want {
			t.Errorf("DefaultProtect(%q) = %v, want %v", tc.method, got, tc.want)
		}
	}
}
