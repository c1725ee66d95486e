package idemrpc_test

import (
	"errors"
	"testing"

	"github.com/idemkit/idem/idemrpc"
)

// TestAnswerCode: an answer's code and message, read from the encoded
// google.rpc.Status without protobuf; a message answer is OK.
func TestAnswerCode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status []byte
		code   idemrpc.Code
		msg    string
	}{
		{"message", nil, idemrpc.OK, ""},
		{"code and message", []byte{0x08, 0x03, 0x12, 0x04, 'n', 'o', 'p', 'e'}, idemrpc.InvalidArgument, "nope"},
		{"message first", []byte{0x12, 0x01, 'x', 0x08, 0x05}, idemrpc.NotFound, "x"},
		{"code alone", []byte{0x08, 0x09}, idemrpc.FailedPrecondition, ""},
		{"details skipped", []byte{0x08, 0x06, 0x1a, 0x03, 0x0a, 0x01, 'a', 0x12, 0x02, 'h', 'i'}, idemrpc.AlreadyExists, "hi"},
		{"unknown fixed fields skipped", []byte{0x21, 1, 2, 3, 4, 5, 6, 7, 8, 0x2d, 1, 2, 3, 4, 0x08, 0x10}, idemrpc.Unauthenticated, ""},
		{"a code past the known ones", []byte{0x08, 0x63}, idemrpc.Code(99), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg, err := idemrpc.Answer{Status: tc.status}.Code()
			if err != nil || code != tc.code || msg != tc.msg {
				t.Fatalf("Code() = %v, %q, %v; want %v, %q", code, msg, err, tc.code, tc.msg)
			}
		})
	}
}

// TestAnswerCodeCorrupt: a status that does not decode is an error
// matching ErrCorruptAnswer, never a code.
func TestAnswerCodeCorrupt(t *testing.T) {
	for name, status := range map[string][]byte{
		"truncated tag":    {0x80},
		"truncated varint": {0x08, 0x80},
		"length past end":  {0x12, 0x05, 'a'},
		"short fixed64":    {0x21, 1, 2},
		"group wire type":  {0x0b},
		"truncated length": {0x12},
		"short fixed32":    {0x2d, 1},
	} {
		t.Run(name, func(t *testing.T) {
			if code, msg, err := (idemrpc.Answer{Status: status}).Code(); !errors.Is(err, idemrpc.ErrCorruptAnswer) {
				t.Fatalf("Code() = %v, %q, %v; want ErrCorruptAnswer", code, msg, err)
			}
		})
	}
}
