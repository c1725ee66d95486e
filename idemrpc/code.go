package idemrpc

import "strconv"

// Code is a status code, numbered as gRPC numbers them; Connect uses the
// same numbers.
type Code uint32

// The status codes.
const (
	OK                 Code = 0
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

var codeNames = [...]string{
	"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound", "AlreadyExists",
	"PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated",
}

// String returns the code's name as gRPC spells it ("InvalidArgument").
func (c Code) String() string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return "Code(" + strconv.FormatUint(uint64(c), 10) + ")"
}

// DefaultStoreCode is the store policy of both adapters (their
// DefaultStoreCode): like idem.DefaultStoreStatus for HTTP, it stores
// outcomes and refuses the codes that are not one. OK and the answers about
// the state a call met (NotFound, AlreadyExists, PermissionDenied,
// Unauthenticated, FailedPrecondition, OutOfRange) are stored. Not stored,
// so the next call with the key runs the handler: InvalidArgument, which
// says the request never began (it failed validation, HTTP's 400: the
// client may correct it and send it with the same key), and the codes that
// say "not now": Canceled, Unknown, DeadlineExceeded, ResourceExhausted,
// Aborted, Unimplemented, Internal, Unavailable and DataLoss. A handler
// answers any other error without storing it by wrapping it with its
// adapter's NotAnOutcome.
func DefaultStoreCode(c Code) bool {
	switch c {
	case OK, NotFound, AlreadyExists, PermissionDenied,
		Unauthenticated, FailedPrecondition, OutOfRange:
		return true
	}
	return false
}
