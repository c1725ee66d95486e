// Package idemconnect makes retried unary Connect calls (connectrpc.com/connect)
// safe: a handler interceptor that runs each protected call's handler
// inside an idem transaction and replays its answer to retries, and a
// client interceptor that makes one idempotency key per call and retries
// with it. It serves the Connect, gRPC and gRPC-Web protocols alike.
//
// It lives in a module of its own (github.com/idemkit/idem/idemconnect), so
// that idem's module graph stays free of connect-go.
//
// # Server
//
// The client sends its key in the Idempotency-Key header (HeaderKey), the
// same on every attempt of one intention. For a protected procedure
// (Config.Protect; default: DefaultProtect, every unary procedure not
// declared NO_SIDE_EFFECTS or IDEMPOTENT, but gRPC's own services: health,
// reflection, channelz and CSDS) the interceptor
//
//   - checks the key like HTTP does (1-255 bytes of printable ASCII, one
//     header): otherwise InvalidArgument, nothing runs;
//   - scopes it to Config.Principal (required; an empty principal is
//     PermissionDenied unless Config.AllowAnonymous) and the procedure
//     (Scope), so one caller's key can never replay another's answer;
//   - fingerprints the procedure and the request message's deterministic
//     protobuf encoding (DefaultFingerprint): the same request sent as
//     JSON or as protobuf is the same request;
//   - runs the handler in the store's transaction (reach it with Tx),
//     stores the answer in it and commits, then sends the answer.
//
// The answers:
//
//	first call           the handler's answer; a success or a *connect.Error with a stored code
//	                     (DefaultStoreCode: the answers about the state the call met) commits
//	                     with the handler's writes; CodeInvalidArgument (the request never
//	                     began: the client may correct it and call again with the same key),
//	                     an error marked with NotAnOutcome, any other code or a plain error
//	                     rolls back, is not stored, and is sent as given
//	retry, same request  the stored message with the stored response header and trailers, or
//	                     the stored error (code, message, details, metadata), with
//	                     Idempotent-Replayed: true in the header (an error's metadata)
//	same key, other      FailedPrecondition, reason IDEMPOTENCY_KEY_MISMATCH; nothing runs
//	request              (the scope holds the procedure: on another one the key is fresh)
//	key held elsewhere   Aborted, reason IDEMPOTENCY_KEY_IN_FLIGHT, RetryInfo (Config.RetryAfter)
//	store failed         Unavailable (or Aborted after conflicts) with RetryInfo: retry with the key
//	no schema            Internal, reason SCHEMA_MISSING; nothing runs
//
// Every error this package makes carries an errdetails.ErrorInfo with
// Domain "idem" and one of the Reason constants (read it with Reason), the
// same reasons as idemgrpc's.
//
// # Replay and the schema
//
// An interceptor does not know the handler's Go response type, so a replay
// is built from the procedure's schema: connect.Spec.Schema must be a
// protoreflect.MethodDescriptor, which generated code always passes
// (connect.WithSchema). The stored protobuf bytes are decoded into a
// dynamicpb message of the schema's output type, which connect encodes as
// protobuf or JSON like the original: a typed client decodes it as its
// own response type. A protected procedure without a schema is refused
// before its handler runs, and a handler whose message is not the schema's
// output type is rolled back with Internal, rather than storing an answer
// that would replay as something else. Interceptors installed outside this
// one see a replay as a *connect.Response[dynamicpb.Message]; use
// protoreflect, not a type assertion to the generated type, if they read
// the message. Handlers must use a protobuf codec (the default ones).
//
// The response header and trailers a handler sets, on its
// *connect.Response, on its *connect.Error's metadata or through
// connect.CallInfo, are stored and replayed (connect itself drops the
// protocols' reserved headers when it sends them). When a retryable
// database error re-runs the handler, what a rolled-back run set through
// CallInfo is discarded first; when no run answers (the retries ran out,
// the commit failed), what the runs set through CallInfo is not sent.
//
// # Streams and nesting
//
// A key protects a unary call only. DefaultProtect selects no streaming
// procedure, and those go through untouched; a streaming procedure that a
// Protect of your own selects is refused with Unimplemented (reason
// STREAM_UNSUPPORTED) before its handler runs, never run as if its key
// protected it.
//
// A call already inside a run of the same store (the interceptor installed
// twice, say on the whole mux and on one service) goes through to its
// handler, which works in the outer run's transaction: one claim, one
// record. Inside any other run (a bare Store.Do, an idemhttp middleware's
// run, another store's interceptor) a call is refused with Internal,
// reason INTERCEPTOR_NESTED, and nothing is done: its handler would miss
// the transaction it expects, or commit apart from the outer one.
//
// What idemconnect shares with idemgrpc (the decision for each call, the
// codes and reasons, the stored answer's layout, the client's policy) is
// package idemrpc, so the two answer alike.
//
// Answers are stored in an encoding of this package, under a scope that
// names the Connect stack ("connect:" and the procedure): an answer stored
// by idemgrpc for the same method is never replayed here, nor the reverse.
//
// # Client
//
// Client.Interceptor makes one key per call before the first attempt (a
// key the caller set is kept), reuses it on every retry, retries
// Unavailable, Aborted and DeadlineExceeded of an attempt with backoff or
// the server's RetryInfo, within MaxAttempts and the call's context, and
// never retries a final answer or a replayed one. When it gives up on a
// retryable answer it returns a *GaveUpError with the key, so the
// intention can be tried again later with the same key.
package idemconnect
