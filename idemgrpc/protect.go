package idemgrpc

import "strings"

// infrastructure are the services gRPC itself provides that DefaultProtect
// leaves alone: health checking (grpc.health.v1.Health: Check and List,
// and the Watch stream) and server reflection (ServerReflectionInfo, a
// stream), by full method name prefix.
var infrastructure = [...]string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// DefaultProtect is the Protect of Config and Client when none is set: it
// protects every method but those of gRPC's health service
// (grpc.health.v1.Health) and server reflection
// (grpc.reflection.v1.ServerReflection and its v1alpha). A Kubernetes
// probe or a grpcurl listing carries no key and no principal, asks for
// nothing to be done, and must neither be refused nor write a record. To
// protect those methods too, set Protect to a function that says so.
func DefaultProtect(fullMethod string) bool {
	for _, prefix := range infrastructure {
		if strings.HasPrefix(fullMethod, prefix) {
			return false
		}
	}
	return true
}
