package idemrpc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
)

// ErrCorruptAnswer is returned when a stored answer cannot be decoded.
var ErrCorruptAnswer = errors.New("idemrpc: stored answer is corrupt")

// Answer is a call's answer in the form the adapters store it, in the body
// of an idem.Response with Status idem.NoStatus; the response header goes
// in the Response's Header. The adapter writes a version byte of its own
// before it (Append) and checks it before Parse.
//
// The encoding is three parts, each but the last preceded by its length as
// a uvarint: Status, Trailer (names sorted, each with its values, every
// string length-prefixed), Message.
type Answer struct {
	// Status is an error answer's google.rpc.Status as the adapter encoded
	// it (code, message, details); nil for a message.
	Status []byte
	// Trailer holds the response trailers.
	Trailer http.Header
	// Message is the response message's protobuf encoding; empty for an
	// error.
	Message []byte
}

// Append appends a's encoding to b.
func (a Answer) Append(b []byte) []byte {
	tb := encodeHeader(a.Trailer)
	b = slices.Grow(b, 2*binary.MaxVarintLen64+len(a.Status)+len(tb)+len(a.Message))
	b = binary.AppendUvarint(b, uint64(len(a.Status)))
	b = append(b, a.Status...)
	b = binary.AppendUvarint(b, uint64(len(tb)))
	b = append(b, tb...)
	return append(b, a.Message...)
}

// ParseAnswer decodes what Append appended. Its errors match
// ErrCorruptAnswer.
func ParseAnswer(b []byte) (Answer, error) {
	r := reader{b: b}
	sb, tb := r.bytes(), r.bytes()
	if r.err != nil {
		return Answer{}, r.err
	}
	a := Answer{Message: r.b}
	if len(sb) > 0 {
		a.Status = sb
	}
	var err error
	if a.Trailer, err = decodeHeader(tb); err != nil {
		return Answer{}, err
	}
	return a, nil
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
		r.err = fmt.Errorf("%w: %d bytes after the trailers", ErrCorruptAnswer, len(r.b))
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
		r.err = fmt.Errorf("%w: bad length", ErrCorruptAnswer)
		return 0
	}
	r.b = r.b[w:]
	return n
}

func (r *reader) bytes() []byte {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)) {
		r.err = fmt.Errorf("%w: length %d past the end", ErrCorruptAnswer, n)
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
		r.err = fmt.Errorf("%w: count %d past the end", ErrCorruptAnswer, n)
	}
	if r.err != nil {
		return 0
	}
	return int(n) //nolint:gosec // n <= len(r.b)
}
