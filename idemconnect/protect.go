package idemconnect

import (
	"connectrpc.com/connect"

	"github.com/idemkit/idem/idemrpc"
)

// DefaultProtect is the Protect of Config and Client when none is set. It
// protects every unary procedure but
//
//   - those declared free of side effects or idempotent in their schema
//     (option idempotency_level = NO_SIDE_EFFECTS or IDEMPOTENT, which
//     generated code passes with connect.WithIdempotency): a retry of
//     those is safe without a key, and a NO_SIDE_EFFECTS procedure may be
//     called with HTTP GET, which carries no key;
//   - gRPC's own services, as idemgrpc.DefaultProtect: health checking
//     and server reflection (connectrpc.com/grpchealth and grpcreflect
//     serve them), channelz and CSDS: a probe or a debugging tool carries
//     no key and no principal and must neither be refused nor recorded.
//
// It selects no streaming procedure: those go through untouched. To
// protect more, set Protect to a function that says so (a stream it
// selects is refused; see Server.Interceptor).
func DefaultProtect(spec connect.Spec) bool {
	if spec.StreamType != connect.StreamTypeUnary {
		return false
	}
	switch spec.IdempotencyLevel {
	case connect.IdempotencyNoSideEffects, connect.IdempotencyIdempotent:
		return false
	}
	return !idemrpc.Infrastructure(spec.Procedure)
}
