package idemrpc

import "strings"

// infrastructure are the services of gRPC itself that the adapters'
// DefaultProtect leaves alone, by full method name prefix.
var infrastructure = [...]string{
	// Health checking: Check, List and the Watch stream.
	"/grpc.health.v1.Health/",
	// Server reflection: the ServerReflectionInfo stream.
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
	// The admin services (google.golang.org/grpc/admin): channelz
	// (GetTopChannels, GetServers, ...) and CSDS (FetchClientStatus and
	// the StreamClientStatus stream).
	"/grpc.channelz.v1.Channelz/",
	"/envoy.service.status.v3.ClientStatusDiscoveryService/",
}

// Infrastructure reports whether fullMethod ("/pkg.Service/Method") is one
// of gRPC's own services: health checking (grpc.health.v1.Health), server
// reflection (grpc.reflection.v1 and v1alpha ServerReflection) and the
// admin services, channelz (grpc.channelz.v1.Channelz) and CSDS
// (envoy.service.status.v3.ClientStatusDiscoveryService). A probe, a
// grpcurl listing or a debugging tool carries no key and no principal,
// asks for nothing to be done, and must neither be refused nor write a
// record.
func Infrastructure(fullMethod string) bool {
	for _, prefix := range infrastructure {
		if strings.HasPrefix(fullMethod, prefix) {
			return true
		}
	}
	return false
}
