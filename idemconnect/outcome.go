package idemconnect

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"connectrpc.com/connect"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// A call's stored outcome is the body of an idem.Response with Status
// idem.NoStatus and the response header (or, for an error, its metadata)
// in Response.Header. The body is a version byte, then three parts each
// but the last preceded by its length as a uvarint: the error as an
// encoded google.rpc.Status (empty for success), the trailers (names
// sorted, each with its values, every string length-prefixed), and the
// response message's protobuf encoding (empty for an error).
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
	var sb []byte
	if o.status != nil {
		sb, _ = proto.Marshal(o.status) // a Status of code, string and Anys always encodes
	}
	tb := encodeHeader(o.trailer)
	b := make([]byte, 0, 1+2*binary.MaxVarintLen64+len(sb)+len(tb)+len(o.message))
	b = append(b, outcomeV1)
	b = binary.AppendUvarint(b, uint64(len(sb)))
	b = append(b, sb...)
	b = binary.AppendUvarint(b, uint64(len(tb)))
	b = append(b, tb...)
	return append(b, o.message...)
}

func decodeOutcome(b []byte) (outcome, error) {
	if len(b) == 0 || b[0] != outcomeV1 {
		return outcome{}, fmt.Errorf("%w: unknown encoding", errCorruptOutcome)
	}
	r := reader{b: b[1:]}
	sb, tb := r.bytes(), r.bytes()
	if r.err != nil {
		return outcome{}, r.err
	}
	o := outcome{message: r.b}
	if len(sb) > 0 {
		o.status = new(spb.Status)
		if err := proto.Unmarshal(sb, o.status); err != nil {
			return outcome{}, fmt.Errorf("%w: %w", errCorruptOutcome, err)
		}
	}
	var err error
	if o.trailer, err = decodeHeader(tb); err != nil {
		return outcome{}, err
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

func encodeHeader(h http.Header) []byte {
	if len(h) == 0 {
		return nil
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	var b []byte
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(h[name])))
		for _, v := range h[name] {
			b = appendString(b, v)
		}
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func decodeHeader(b []byte) (http.Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	r := reader{b: b}
	n := r.count()
	h := make(http.Header, min(n, 64))
	for i := 0; i < n && r.err == nil; i++ {
		name := string(r.bytes())
		values := make([]string, r.count())
		for j := range values {
			values[j] = string(r.bytes())
		}
		h[name] = values
	}
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%w: %d bytes after the trailers", errCorruptOutcome, len(r.b))
	}
	if r.err != nil {
		return nil, r.err
	}
	return h, nil
}

// reader reads uvarint-framed values, remembering the first error.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	n, w := binary.Uvarint(r.b)
	if w <= 0 {
		r.err = fmt.Errorf("%w: bad length", errCorruptOutcome)
		return 0
	}
	r.b = r.b[w:]
	return n
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: length %d past the end", errCorruptOutcome, n)
	}
	if r.err != nil {
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// count reads a count of items, each at least one byte long, so that a
// corrupt count cannot make a huge allocation.
func (r *reader) count() int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: count %d past the end", errCorruptOutcome, n)
	}
	if r.err != nil {
		return 0
	}
	return int(n) //nolint:gosec // n <= len(r.b)
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
