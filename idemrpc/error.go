package idemrpc

import (
	"fmt"
	"time"
)

// ErrorDomain is the Domain of the ErrorInfo detail (google.rpc.ErrorInfo)
// an adapter attaches to the errors idem makes; its Reason is one of the
// Reason constants.
const ErrorDomain = "idem"

// Reasons in the ErrorInfo detail of idem's own answers, so a client can
// tell them apart without parsing messages.
const (
	// ReasonKeyMissing: InvalidArgument, the call needs a key.
	ReasonKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	// ReasonKeyInvalid: InvalidArgument, the key is empty, longer than 255
	// bytes, not printable ASCII, or sent more than once.
	ReasonKeyInvalid = "IDEMPOTENCY_KEY_INVALID"
	// ReasonPrincipalMissing: PermissionDenied, no caller to scope the key to.
	ReasonPrincipalMissing = "PRINCIPAL_MISSING"
	// ReasonMismatch: FailedPrecondition, the key was used with another
	// request.
	ReasonMismatch = "IDEMPOTENCY_KEY_MISMATCH"
	// ReasonInFlight: Aborted, another call holds the key; retry later.
	ReasonInFlight = "IDEMPOTENCY_KEY_IN_FLIGHT"
	// ReasonDatabaseBusy: Aborted, the wait that ran out was for the
	// database itself (SQLite's write lock), not for the key: whether
	// another call holds the key is not known; retry soon.
	ReasonDatabaseBusy = "DATABASE_BUSY"
	// ReasonCommitUnknown: Unavailable, the commit's outcome is unknown; a
	// retry with the same key replays or does the work once.
	ReasonCommitUnknown = "COMMIT_UNKNOWN"
	// ReasonStoreUnavailable: Unavailable or Aborted, nothing was stored;
	// retry with the same key.
	ReasonStoreUnavailable = "STORE_UNAVAILABLE"
	// ReasonNoSchema: Internal, the procedure has no protobuf schema, so
	// its answer could not be replayed; nothing was done (idemconnect).
	ReasonNoSchema = "SCHEMA_MISSING"
	// ReasonStreamUnsupported: Unimplemented, the call is a stream that
	// the server's Protect selects; a key protects unary calls only, so it
	// was refused rather than run unprotected; nothing was done.
	ReasonStreamUnsupported = "STREAM_UNSUPPORTED"
	// ReasonNested: Internal, the call already runs inside a run of the
	// same store that is not a server's of this package (a bare Do, an
	// HTTP middleware's run), or inside another store's server run: its
	// handler would miss the transaction it expects, or commit apart from
	// the outer one; nothing was done.
	ReasonNested = "INTERCEPTOR_NESTED"
)

// Error is an answer idem makes itself, which an adapter turns into its
// stack's status: the code and message, an ErrorInfo detail in ErrorDomain
// when Reason is set, and a RetryInfo detail when RetryAfter is.
type Error struct {
	Code    Code
	Message string
	// Reason is one of the Reason constants, or "" for no ErrorInfo.
	Reason string
	// RetryAfter, when positive, is how long the client should wait
	// before retrying with the same key (a RetryInfo detail).
	RetryAfter time.Duration
}

// Error returns the code and the message.
func (e *Error) Error() string { return fmt.Sprintf("%v: %s", e.Code, e.Message) }
