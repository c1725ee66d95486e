package idemconnect

import (
	"errors"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idemkit/idem/idemrpc"
)

// ErrorDomain is the Domain of the errdetails.ErrorInfo detail attached to
// every error this package makes; its Reason is one of the Reason
// constants.
const ErrorDomain = idemrpc.ErrorDomain

// Reasons in the ErrorInfo detail of the errors this package makes, so a
// client can tell them apart without parsing messages. They are the same
// strings as idemgrpc's.
const (
	// ReasonKeyMissing: InvalidArgument, the procedure needs a key.
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
	// ReasonNoSchema: Internal, the procedure has no protobuf schema
	// (connect.WithSchema), so its answer could not be replayed; nothing
	// was done.
	ReasonNoSchema = idemrpc.ReasonNoSchema
	// ReasonStreamUnsupported: Unimplemented, a streaming procedure that
	// Config.Protect selects; nothing was done.
	ReasonStreamUnsupported = idemrpc.ReasonStreamUnsupported
	// ReasonNested: Internal, the call already runs inside a run that is
	// not this store's interceptor's (a bare Do, an idemhttp middleware's
	// run, another store's interceptor); nothing was done.
	ReasonNested = idemrpc.ReasonNested
)

// errorFor is the connect error of an answer idem made (an
// *idemrpc.Error): its code and message, with an ErrorInfo detail when it
// has a reason and a RetryInfo detail when it says when to retry. Another
// error is returned as it is.
func errorFor(err error) error {
	var e *idemrpc.Error
	if !errors.As(err, &e) {
		return err
	}
	var details []proto.Message
	if e.Reason != "" {
		details = append(details, &errdetails.ErrorInfo{Reason: e.Reason, Domain: ErrorDomain})
	}
	if e.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(e.RetryAfter)})
	}
	return withDetails(connect.Code(e.Code), e.Message, details...)
}

// withInfo makes a connect error with an ErrorInfo detail.
func withInfo(code connect.Code, msg, reason string) *connect.Error {
	return withDetails(code, msg, &errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
}

func withDetails(code connect.Code, msg string, details ...proto.Message) *connect.Error {
	e := connect.NewError(code, errors.New(msg))
	for _, d := range details {
		if ed, err := connect.NewErrorDetail(d); err == nil { // these well-known messages always encode
			e.AddDetail(ed)
		}
	}
	return e
}

// Reason returns the Reason of err's ErrorInfo detail in idem's domain
// (ErrorDomain), or "" when err carries none: a client tells the refusals
// of this package apart with it.
func Reason(err error) string {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return ""
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if info, ok := v.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
				return info.GetReason()
			}
		}
	}
	return ""
}

// RetryDelay returns the delay of err's RetryInfo detail, and whether it has
// one.
func RetryDelay(err error) (time.Duration, bool) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return 0, false
	}
	for _, d := range ce.Details() {
		if v, err := d.Value(); err == nil {
			if ri, ok := v.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
				return ri.GetRetryDelay().AsDuration(), true
			}
		}
	}
	return 0, false
}
