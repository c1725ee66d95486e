// Package idemrpc is what idem's RPC adapters share, in terms of neither
// gRPC nor Connect: the protocol of the idempotency key over RPC metadata,
// the codes and reasons of idem's own answers, the server's decision for a
// call (refuse, run the handler, replay, let through), the stored form of
// an answer, and the client's key and retry policy.
//
// idemgrpc (grpc-go) and idemconnect (connectrpc.com/connect) are thin
// layers over it, so that both answer a call alike. A service uses one of
// them and never needs this package; it is for writing an adapter for
// another RPC stack. It lives in the library module and imports neither
// gRPC, Connect nor protobuf: an adapter encodes a status (a
// google.rpc.Status) and its details itself.
//
// The codes are gRPC's, which Connect shares by number: an adapter
// converts with a plain conversion (codes.Code(c), connect.Code(c)).
package idemrpc
