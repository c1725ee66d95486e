package idemrpc_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/idemrpc"
)

// TestDefaultStoreCode: outcomes are stored; "not now" and InvalidArgument
// (the request never began) are not.
func TestDefaultStoreCode(t *testing.T) {
	stored := map[idemrpc.Code]bool{
		idemrpc.OK: true, idemrpc.InvalidArgument: false, idemrpc.NotFound: true, idemrpc.AlreadyExists: true,
		idemrpc.PermissionDenied: true, idemrpc.Unauthenticated: true, idemrpc.FailedPrecondition: true, idemrpc.OutOfRange: true,
	}
	for c := idemrpc.OK; c <= idemrpc.Unauthenticated+1; c++ {
		if got := idemrpc.DefaultStoreCode(c); got != stored[c] {
			t.Errorf("DefaultStoreCode(%v) = %v, want %v", c, got, stored[c])
		}
	}
}

func TestCodeString(t *testing.T) {
	for c, want := range map[idemrpc.Code]string{idemrpc.OK: "OK", idemrpc.FailedPrecondition: "FailedPrecondition", idemrpc.Unauthenticated: "Unauthenticated", 17: "Code(17)"} {
		if got := c.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", uint32(c), got, want)
		}
	}
	e := &idemrpc.Error{Code: idemrpc.Aborted, Message: "later"}
	if !strings.Contains(e.Error(), "Aborted") || !strings.Contains(e.Error(), "later") {
		t.Errorf("Error() = %q", e.Error())
	}
}

// TestInfrastructure: gRPC's own services, by exact service name.
func TestInfrastructure(t *testing.T) {
	for _, tc := range []struct {
		method string
		want   bool
	}{
		{"/grpc.health.v1.Health/Check", true},
		{"/grpc.health.v1.Health/Watch", true},
		{"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true},
		{"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true},
		{"/grpc.channelz.v1.Channelz/GetTopChannels", true},
		{"/envoy.service.status.v3.ClientStatusDiscoveryService/FetchClientStatus", true},
		{"/orders.v1.Orders/Create", false},
		{"/grpc.health.v1.HealthCheck/Check", false},
		{"/acme.grpc.channelz.v1.Channelz/GetServers", false},
		{"/grpc.channelz.v2.Channelz/GetServers", false},
		{"grpc.channelz.v1.Channelz/GetServers", false},
	} {
		if got := idemrpc.Infrastructure(tc.method); got != tc.want {
			t.Errorf("Infrastructure(%q) = %v, want %v", tc.method, got, tc.want)
		}
	}
}
