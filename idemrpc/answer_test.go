package idemrpc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemkit/idem/idemrpc"
)

// TestAnswerRoundTrip: an answer decodes as it was encoded, after the
// adapter's version byte.
func TestAnswerRoundTrip(t *testing.T) {
	for _, a := range []idemrpc.Answer{
		{Message: []byte{0x0a, 0x01, 'x'}, Trailer: http.Header{"X-B": {"1", "2"}, "X-A": {""}, "x-lower-bin": {"\x00\xff"}}},
		{Status: []byte{0x08, 0x05, 0x12, 0x01, 'n'}},
		{Status: []byte{0x08, 0x09}, Trailer: http.Header{"X-A": {"1"}}},
		{},
	} {
		b := a.Append([]byte{7})
		if b[0] != 7 {
			t.Fatalf("Append overwrote the version byte: %x", b)
		}
		got, err := idemrpc.ParseAnswer(b[1:])
		if err != nil {
			t.Fatalf("parse %+v: %v", a, err)
		}
		if !bytes.Equal(got.Status, a.Status) || !bytes.Equal(got.Message, a.Message) || !reflect.DeepEqual(got.Trailer, a.Trailer) {
			t.Errorf("round trip of %+v gave %+v", a, got)
		}
		if (got.Status == nil) != (len(a.Status) == 0) {
			t.Errorf("status %v: nil must mean a message", got.Status)
		}
	}
}

// TestAnswerCorrupt: stored bytes that do not decode are an error matching
// ErrCorruptAnswer (the call answers Internal), never an answer made of
// garbage nor a huge allocation.
func TestAnswerCorrupt(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":            nil,
		"status too long":  {0x7f},
		"trailer too long": {0, 0x7f},
		"bad varint":       {0xff},
		"bad trailer":      {0, 3, 0x05, 'a', 'b'},
		"trailer count":    {0, 2, 0x7f, 0},
		"values count":     append([]byte{0, 12, 1, 1, 'a'}, binary.AppendUvarint(nil, 1<<62)...),
		"after trailers":   {0, 5, 1, 1, 'a', 0, 9},
	} {
		if a, err := idemrpc.ParseAnswer(b); !errors.Is(err, idemrpc.ErrCorruptAnswer) {
			t.Errorf("%s: %+v, %v; want ErrCorruptAnswer", name, a, err)
		}
	}
}
