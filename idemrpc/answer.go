package idemrpc

import (
	"encoding/binary"
	"errors"
	"net/http"
	"slices"

	"github.com/idemkit/idem/internal/framing"
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
	var tb []byte
	if len(a.Trailer) > 0 {
		tb = framing.AppendHeader(nil, a.Trailer)
	}
	b = slices.Grow(b, 2*binary.MaxVarintLen64+len(a.Status)+len(tb)+len(a.Message))
	b = framing.AppendBytes(b, a.Status)
	b = framing.AppendBytes(b, tb)
	return append(b, a.Message...)
}

// ParseAnswer decodes what Append appended. Its errors match
// ErrCorruptAnswer.
func ParseAnswer(b []byte) (Answer, error) {
	r := framing.NewReader(b, ErrCorruptAnswer)
	sb, tb := r.Bytes(), r.Bytes()
	if err := r.Err(); err != nil {
		return Answer{}, err
	}
	a := Answer{Message: r.Rest()}
	if len(sb) > 0 {
		a.Status = sb
	}
	if len(tb) > 0 {
		t := framing.NewReader(tb, ErrCorruptAnswer)
		a.Trailer = t.Header()
		if err := t.End(); err != nil {
			return Answer{}, err
		}
	}
	return a, nil
}
