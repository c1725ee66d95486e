// Package idemgrpc makes retried unary gRPC calls safe: a server
// interceptor that runs each protected call's handler inside an idem
// transaction and replays its answer to retries, and a client interceptor
// that makes one idempotency key per call and retries with it.
//
// It lives in a module of its own (github.com/idemkit/idem/idemgrpc), so
// that idem's module graph stays free of gRPC.
//
// # Server
//
// The client sends its key in the idempotency-key metadata entry
// (MetadataKey), the same on every attempt of one intention. For a
// protected method (Config.Protect; default: DefaultProtect, every method
// but gRPC's own services: health, reflection, channelz, CSDS) the
// interceptor
//
//   - checks the key like HTTP does (1-255 bytes of printable ASCII, one
//     entry): otherwise InvalidArgument, nothing runs;
//   - scopes it to Config.Principal (required; an empty principal is
//     PermissionDenied unless Config.AllowAnonymous) and the full method
//     name, so one caller's key can never replay another's answer;
//   - fingerprints the method and the request message's deterministic
//     protobuf encoding (DefaultFingerprint);
//   - runs the handler in the store's transaction (reach it with Tx),
//     stores the answer in it and commits, then sends the answer.
//
// The answers:
//
//	first call           the handler's answer; a stored code (DefaultStoreCode: OK and the
//	                     answers about the state the call met) commits with the handler's
//	                     writes; InvalidArgument (the request never began: the client may
//	                     correct it and call again with the same key), an error marked with
//	                     NotAnOutcome, any other code or a plain error rolls back, is not
//	                     stored, and is sent as the handler gave it
//	retry, same request  the stored message, or the stored status (code, message, details),
//	                     with the stored header and trailer and idempotent-replayed: true
//	                     in the header
//	same key, other      FailedPrecondition, reason IDEMPOTENCY_KEY_MISMATCH; nothing runs
//	request              (the scope holds the method: on another method the key is fresh)
//	key held elsewhere   Aborted, reason IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo (Config.RetryAfter)
//	store failed         Unavailable (or Aborted after conflicts) with RetryInfo: retry with the key
//	a stream Protect     Unimplemented, reason STREAM_UNSUPPORTED (StreamInterceptor); nothing runs
//	selects
//
// A mismatch is FailedPrecondition, not InvalidArgument: the request is
// valid on its own (with a fresh key it would succeed); it is refused
// because of stored state, the key's earlier request, and repeating it
// will not help until the client changes the key. It also keeps
// InvalidArgument for a key that is malformed. A call in flight is Aborted,
// gRPC's code for a concurrency conflict to be retried at a higher level,
// with a RetryInfo detail (google.rpc.RetryInfo) saying when.
//
// Every status this package makes carries an errdetails.ErrorInfo with
// Domain "idem" and one of the Reason constants.
//
// A replay returns a message of the method's own response type when its
// .proto file is in the global protobuf registry (generated code registers
// it); otherwise a carrier message holding the stored bytes, which the
// client decodes as its own response type all the same.
//
// The response header and trailer metadata a handler sets (grpc.SetHeader,
// SendHeader, SetTrailer) are stored with its answer and replayed with it,
// as idemconnect does. They are kept until the call is answered: when a
// retryable database error runs the handler again in a fresh transaction,
// only the last run's reach the client, and when no run answers (the
// retries ran out, the commit failed) none do. So SendHeader sends nothing
// at once, and grpc.SetSendCompressor does not work on the handler's
// context; call it in an interceptor outside this one.
//
// gRPC's own services are left alone by default, by the server and the
// client interceptor alike: health checking (grpc.health.v1.Health: Check,
// List, Watch), server reflection (grpc.reflection.v1 and v1alpha
// ServerReflection) and the admin services of google.golang.org/grpc/admin,
// channelz (grpc.channelz.v1.Channelz) and CSDS
// (envoy.service.status.v3.ClientStatusDiscoveryService). A Kubernetes
// probe or a debugging tool carries no key and no principal and must be
// neither refused nor recorded. A Protect that returns true for them
// protects them like any method.
//
// A key protects a unary call only. Install Server.StreamInterceptor too:
// when Config.Protect is set, a streaming method it selects is refused
// with Unimplemented (reason STREAM_UNSUPPORTED) instead of running as if
// its key protected it. Without Protect set, streams go through untouched.
//
// A call already inside a run of the same store (the interceptor chained
// twice, say a global one and a per-service one) goes through to its
// handler, which works in the outer run's transaction: one claim, one
// record. Inside any other run (a bare Store.Do, an idemhttp middleware's
// run, another store's interceptor) a call is refused with Internal,
// reason INTERCEPTOR_NESTED, and nothing is done: its handler would miss
// the transaction it expects, or commit apart from the outer one.
//
// What idemgrpc shares with idemconnect (the decision for each call, the
// codes and reasons, the stored answer, the client's policy) is package
// idemrpc, so the two answer alike.
//
// # Client
//
// Client.UnaryInterceptor makes one key per call before the first attempt
// (a key the caller set is kept), reuses it on every retry, retries
// Unavailable, Aborted and DeadlineExceeded of an attempt with backoff or
// the server's RetryInfo, within MaxAttempts and the call's context, and
// never retries InvalidArgument, FailedPrecondition or a replayed answer.
package idemgrpc
