package idemgrpc

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestOutcomeRoundTrip: a stored message or status decodes as it was
// encoded, trailer included.
func TestOutcomeRoundTrip(t *testing.T) {
	st := status.New(codes.NotFound, "no such order").Proto()
	for _, o := range []outcome{
		{message: []byte{0x0a, 0x01, 'x'}, trailer: metadata.Pairs("x-total", "1", "x-total", "2", "x-bin", "\x00\xff")},
		{status: st, trailer: metadata.Pairs("x-a", "")},
		{status: st},
		{},
	} {
		got, err := decodeOutcome(o.encode())
		if err != nil {
			t.Fatalf("decode %+v: %v", o, err)
		}
		if string(got.message) != string(o.message) || !proto.Equal(got.status, o.status) || (len(o.trailer) > 0 && !reflect.DeepEqual(got.trailer, o.trailer)) || (len(o.trailer) == 0 && len(got.trailer) != 0) {
			t.Errorf("round trip of %+v gave %+v", o, got)
		}
	}
}

// TestOutcomeV1: an answer stored before trailers were (version 1: the
// status's length, the status, the message) still decodes.
func TestOutcomeV1(t *testing.T) {
	sb, _ := proto.Marshal(status.New(codes.FailedPrecondition, "insufficient funds").Proto())
	v1 := func(st, msg []byte) []byte {
		return append(append(binary.AppendUvarint([]byte{outcomeV1}, uint64(len(st))), st...), msg...)
	}
	o, err := decodeOutcome(v1(nil, []byte{0x0a, 0x01, 'x'}))
	if err != nil || o.status != nil || string(o.message) != "\x0a\x01x" || o.trailer != nil {
		t.Errorf("v1 message: %+v, %v", o, err)
	}
	o, err = decodeOutcome(v1(sb, nil))
	if err != nil || o.status.GetCode() != int32(codes.FailedPrecondition) || o.status.GetMessage() != "insufficient funds" {
		t.Errorf("v1 status: %+v, %v", o, err)
	}
}

// TestOutcomeCorrupt: stored bytes that do not decode are an error (the
// call answers Internal), never an answer made of garbage.
func TestOutcomeCorrupt(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":              nil,
		"unknown version":    {3, 0, 0},
		"v1 status too long": {outcomeV1, 0x7f},
		"v1 bad status":      {outcomeV1, 2, 0xff, 0xff},
		"v2 status too long": {outcomeV2, 0x7f},
		"v2 bad trailer":     {outcomeV2, 0, 3, 0x05, 'a', 'b'},
		"v2 bad status":      {outcomeV2, 2, 0xff, 0xff, 0},
	} {
		if o, err := decodeOutcome(b); !errors.Is(err, errCorruptOutcome) {
			t.Errorf("%s: %+v, %v; want errCorruptOutcome", name, o, err)
		}
	}
}
