package idemconnect

import (
	"strings"

	"connectrpc.com/connect"
)

// infrastructure are the services that DefaultProtect leaves alone, by
// procedure prefix: gRPC health checking and server reflection, which
// connect-go serves through connectrpc.com/grpchealth and grpcreflect.
var infrastructure = [...]string{
	"/grpc.health.v1.Health/",
	"/grpc.reflection.v1.ServerReflection/",
	"/grpc.reflection.v1alpha.ServerReflection/",
}

// DefaultProtect is the Protect of Config and Client when none is set. It
// protects every unary procedure but
//
//   - those declared free of side effects or idempotent in their schema
//     (option idempotency_level = NO_SIDE_EFFECTS or IDEMPOTENT, which
//     generated code passes with connect.WithIdempotency): a retry of
//     those is safe without a key, and a NO_SIDE_EFFECTS procedure may be
//     called with HTTP GET, which carries no key;
//   - gRPC's health and reflection services: a probe carries no key and no
//     principal and must neither be refused nor recorded.
//
// Streaming procedures are never intercepted. To protect more, set Protect
// to a function that says so.
func DefaultProtect(spec connect.Spec) bool {
	if spec.StreamType != connect.StreamTypeUnary {
		return false
	}
	switch spec.IdempotencyLevel {
	case connect.IdempotencyNoSideEffects, connect.IdempotencyIdempotent:
		return false
	}
	for _, prefix := range infrastructure {
		if strings.HasPrefix(spec.Procedure, prefix) {
			return false
		}
	}
	return true
}
