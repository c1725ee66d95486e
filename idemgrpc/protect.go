package idemgrpc

import "github.com/idemkit/idem/idemrpc"

// DefaultProtect is the Protect of Config and Client when none is set: it
// protects every method but those of gRPC's own services: health checking
// (grpc.health.v1.Health), server reflection
// (grpc.reflection.v1.ServerReflection and its v1alpha) and the admin
// services (google.golang.org/grpc/admin): channelz
// (grpc.channelz.v1.Channelz) and CSDS
// (envoy.service.status.v3.ClientStatusDiscoveryService). A Kubernetes
// probe, a grpcurl listing or a debugging tool carries no key and no
// principal, asks for nothing to be done, and must neither be refused nor
// write a record. To protect those methods too, set Protect to a function
// that says so.
//
// It is for unary methods: the stream interceptor lets every stream
// through unless Config.Protect is set (see Server.StreamInterceptor).
func DefaultProtect(fullMethod string) bool { return !idemrpc.Infrastructure(fullMethod) }
