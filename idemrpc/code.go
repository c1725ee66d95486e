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
// outcomes and refuses the codes that say "not now". OK and the client's
// mistakes (InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
// Unauthenticated, FailedPrecondition, OutOfRange) are stored; Canceled,
// Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Unimplemented,
// Internal, Unavailable and DataLoss are not, so a retry runs the handler.
func DefaultStoreCode(c Code) bool {
	switch c {
	case OK, InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
		Unauthenticated, FailedPrecondition, OutOfRange:
		return true
	}
	return false
}
