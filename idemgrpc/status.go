package idemgrpc

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem/idemrpc"
)

// ErrorDomain is the Domain of the errdetails.ErrorInfo detail attached to
// every status this package makes; its Reason is one of the Reason
// constants.
const ErrorDomain = idemrpc.ErrorDomain

// Reasons in the ErrorInfo detail of the statuses this package makes, so a
// client can tell them apart without parsing messages. They are
// idemconnect's too.
const (
	// ReasonKeyMissing: InvalidArgument, the method needs a key.
	ReasonKeyMissing = idemrpc.ReasonKeyMissing
	// ReasonKeyInvalid: InvalidArgument, the key is empty, longer than 255
	// bytes, not printable ASCII, or sent more than once.
	ReasonKeyInvalid = idemrpc.ReasonKeyInvalid
	// ReasonPrincipalMissing: PermissionDenied, no caller to scope the key to.
	ReasonPrincipalMissing = idemrpc.ReasonPrincipalMissing
	// ReasonMismatch: FailedPrecondition, the key was used with another
	// request.
	ReasonMismatch = idemrpc.ReasonMismatch
	// ReasonInFlight: Aborted, another call holds the key; retry later.
	ReasonInFlight = idemrpc.ReasonInFlight
	// ReasonDatabaseBusy: Aborted, the wait that ran out was for the
	// database itself (SQLite's write lock), not for the key: whether
	// another call holds the key is not known; retry soon.
	ReasonDatabaseBusy = idemrpc.ReasonDatabaseBusy
	// ReasonCommitUnknown: Unavailable, the commit's outcome is unknown; a
	// retry with the same key replays or does the work once.
	ReasonCommitUnknown = idemrpc.ReasonCommitUnknown
	// ReasonStoreUnavailable: Unavailable or Aborted, nothing was stored;
	// retry with the same key.
	ReasonStoreUnavailable = idemrpc.ReasonStoreUnavailable
	// ReasonStreamUnsupported: Unimplemented, a streaming method that
	// Config.Protect selects; nothing was done.
	ReasonStreamUnsupported = idemrpc.ReasonStreamUnsupported
	// ReasonNested: Internal, the call already runs inside a run that is
	// not this store's interceptor's (a bare Do, an idemhttp middleware's
	// run, another store's interceptor); nothing was done.
	ReasonNested = idemrpc.ReasonNested
)

// statusOf is the status error of an answer idem made (an
// *idemrpc.Error): its code and message, with an ErrorInfo detail when it
// has a reason and a RetryInfo detail when it says when to retry. Another
// error is returned as it is.
func statusOf(err error) error {
	var e *idemrpc.Error
	if !errors.As(err, &e) {
		return err
	}
	st := status.New(codes.Code(e.Code), e.Message)
	var details []protoadapt.MessageV1
	if e.Reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain})
	}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	if len(details) > 0 {
		if d, err := st.WithDetails(details...); err == nil { // these well-known messages always encode
			st = d
		}
	}
	return st.Err()
}
