package idemgrpc

import (
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrorDomain is the Domain of the errdetails.ErrorInfo detail attached to
// every status this package makes; its Reason is one of the Reason
// constants.
const ErrorDomain = "idem"

// Reasons in the ErrorInfo detail of the statuses this package makes, so a
// client can tell them apart without parsing messages.
const (
	// ReasonKeyMissing: InvalidArgument, the method needs a key.
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
)

// withInfo makes a status error with an ErrorInfo detail.
func withInfo(code codes.Code, msg, reason string) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// retryLater makes a status error with ErrorInfo and RetryInfo details: the
// call may succeed if retried with the same key after the delay.
func (s *Server[TTx]) retryLater(code codes.Code, msg, reason string) error {
	return retryStatus(code, msg, reason, s.cfg.RetryAfter)
}

func retryStatus(code codes.Code, msg, reason string, after time.Duration) error {
	st := status.New(code, msg)
	if d, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(after)},
	); err == nil {
		st = d
	}
	return st.Err()
}
