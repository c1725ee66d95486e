package idemrpc

import (
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
)

// Metadata names of the protocol: the same as idemhttp's headers, in the
// lower case gRPC metadata requires (HTTP header names match them
// whatever their case).
const (
	// MetadataKey carries the client's idempotency key.
	MetadataKey = "idempotency-key"
	// MetadataReplayed is "true" in the response header of a replayed
	// answer.
	MetadataReplayed = "idempotent-replayed"
)

// serverKey checks the key entry's values as a server received them: one
// value that idem.ValidateKey accepts. field names the entry in the
// refusal's message ("idempotency-key metadata entry").
func serverKey(values []string, subject, field string) (string, error) {
	switch len(values) {
	case 0:
		return "", &Error{Code: InvalidArgument, Reason: ReasonKeyMissing,
			Message: "this " + subject + " requires an " + field + "; make one key per operation and send it with every retry"}
	case 1:
	default:
		return "", &Error{Code: InvalidArgument, Reason: ReasonKeyInvalid,
			Message: fmt.Sprintf("%d %ss, want one", len(values), field)}
	}
	if err := idem.ValidateKey(values[0]); err != nil {
		return "", &Error{Code: InvalidArgument, Reason: ReasonKeyInvalid, Message: strings.TrimPrefix(err.Error(), "idem: ")}
	}
	return values[0], nil
}

// NewKey returns a fresh idempotency key: a random (version 4) UUID from
// crypto/rand. Make one per intention and reuse it for every retry of it.
func NewKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never returns an error
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ClientKey is the key a client sends on every attempt of one call: the
// caller's, when the outgoing call carries one (sent holds the key entry's
// values), else a new one from newKey (NewKey when nil), with made true.
// A key the server would refuse (not exactly one value, or one that
// idem.ValidateKey refuses) is an error matching idem.ErrInvalidKey: the
// call is not worth sending.
func ClientKey(sent []string, newKey func() string) (key string, made bool, err error) {
	switch len(sent) {
	case 0:
		if newKey == nil {
			newKey = NewKey
		}
		key, made = newKey(), true
	case 1:
		key = sent[0]
	default:
		return "", false, fmt.Errorf("%w: %d keys on one call, want one", idem.ErrInvalidKey, len(sent))
	}
	if err := idem.ValidateKey(key); err != nil {
		return "", false, err
	}
	return key, made, nil
}
