package idemconnect

import (
	"errors"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemkit/idem/idemrpc"
)

// A call's stored outcome is the body of an idem.Response with Status
// idem.NoStatus and the response header (or, for an error, its metadata)
// in Response.Header. The body is a version byte, outcomeV1, then an
// idemrpc.Answer: the error as an encoded google.rpc.Status (empty for
// success), the trailers, and the response message's protobuf encoding
// (empty for an error).
//
// It is not idemgrpc's encoding, and the scopes differ (Scope), so an
// answer stored by one stack is never replayed by the other.
const outcomeV1 = 1

var errCorruptOutcome = errors.New("idemconnect: stored outcome is corrupt")

// outcome is one stored answer.
type outcome struct {
	status  *spb.Status // nil: success
	trailer http.Header
	message []byte
}

func (o outcome) encode() []byte {
	a := idemrpc.Answer{Trailer: o.trailer, Message: o.message}
	if o.status != nil {
		a.Status, _ = proto.Marshal(o.status) // a Status of code, string and Anys always encodes
	}
	return a.Append([]byte{outcomeV1})
}

func decodeOutcome(b []byte) (outcome, error) {
	if len(b) == 0 || b[0] != outcomeV1 {
		return outcome{}, fmt.Errorf("%w: unknown encoding", errCorruptOutcome)
	}
	a, err := idemrpc.ParseAnswer(b[1:])
	if err != nil {
		return outcome{}, fmt.Errorf("%w: %w", errCorruptOutcome, err)
	}
	o := outcome{trailer: a.Trailer, message: a.Message}
	if len(a.Status) > 0 {
		o.status = new(spb.Status)
		if err := proto.Unmarshal(a.Status, o.status); err != nil {
			return outcome{}, fmt.Errorf("%w: %w", errCorruptOutcome, err)
		}
	}
	return o, nil
}

// statusOf is the stored form of a connect error: code, message, details.
func statusOf(e *connect.Error) *spb.Status {
	st := &spb.Status{Code: int32(e.Code()), Message: e.Message()} //nolint:gosec // connect codes are 1 to 16
	for _, d := range e.Details() {
		st.Details = append(st.Details, &anypb.Any{TypeUrl: "type.googleapis.com/" + d.Type(), Value: d.Bytes()})
	}
	return st
}

// errorOf rebuilds the connect error statusOf stored.
func errorOf(st *spb.Status) *connect.Error {
	e := connect.NewError(connect.Code(st.GetCode()), errors.New(st.GetMessage())) //nolint:gosec // stored from a connect.Code
	for _, a := range st.GetDetails() {
		if d, err := connect.NewErrorDetail(a); err == nil { // an Any is used as is: never fails
			e.AddDetail(d)
		}
	}
	return e
}

// headerDiff returns what after holds that before did not: the names whose
// values changed, with their values in after. It is what a handler run
// added to a connect.CallInfo header.
func headerDiff(before, after http.Header) http.Header {
	var d http.Header
	for name, values := range after {
		if slices.Equal(before[name], values) || len(values) == 0 {
			continue
		}
		if d == nil {
			d = make(http.Header)
		}
		d[name] = slices.Clone(values)
	}
	return d
}

// resetHeader makes h equal to saved again, so that a handler run that is
// re-run does not see (or add twice) what the rolled-back run set.
func resetHeader(h, saved http.Header) {
	for name := range h {
		if _, ok := saved[name]; !ok {
			delete(h, name)
		}
	}
	for name, values := range saved {
		h[name] = slices.Clone(values)
	}
}

// mergeInto appends from's values to into's.
func mergeInto(into, from http.Header) http.Header {
	if len(from) == 0 {
		return into
	}
	if into == nil {
		into = make(http.Header, len(from))
	}
	for name, values := range from {
		into[name] = append(into[name], values...)
	}
	return into
}
