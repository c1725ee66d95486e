package idemconnect

import (
	"encoding/binary"
	"errors"
	"net/http"
	"reflect"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
)

// TestOutcomeRoundTrip: a stored success or error decodes as it was
// encoded.
func TestOutcomeRoundTrip(t *testing.T) {
	e := withInfo(connect.CodeNotFound, "no such order", "NOPE")
	for _, o := range []outcome{
		{message: []byte{0x0a, 0x01, 'x'}, trailer: http.Header{"X-B": {"1", "2"}, "X-A": {""}}},
		{status: statusOf(e)},
		{},
	} {
		got, err := decodeOutcome(o.encode())
		if err != nil {
			t.Fatalf("decode %+v: %v", o, err)
		}
		if string(got.message) != string(o.message) || !reflect.DeepEqual(got.trailer, o.trailer) || (got.status == nil) != (o.status == nil) {
			t.Errorf("round trip of %+v gave %+v", o, got)
		}
		if o.status != nil {
			back := errorOf(got.status)
			if back.Code() != e.Code() || back.Message() != e.Message() || len(back.Details()) != 1 {
				t.Fatalf("error round trip: %v, want %v", back, e)
			}
			v, err := back.Details()[0].Value()
			if info, ok := v.(*errdetails.ErrorInfo); err != nil || !ok || info.GetReason() != "NOPE" {
				t.Errorf("detail %v %v, want the ErrorInfo", v, err)
			}
		}
	}
}

// TestOutcomeCorrupt: a stored outcome that does not decode is an error
// (the call answers Internal), never a message made of garbage.
func TestOutcomeCorrupt(t *testing.T) {
	good := outcome{message: []byte("m"), trailer: http.Header{"X-A": {"1"}}}.encode()
	for name, b := range map[string][]byte{
		"empty":            nil,
		"unknown version":  append([]byte{2}, good[1:]...),
		"status too long":  {outcomeV1, 0x7f},
		"trailer too long": {outcomeV1, 0, 0x7f},
		"bad varint":       {outcomeV1, 0xff},
		"bad status":       {outcomeV1, 2, 0xff, 0xff, 0},
		"bad trailer":      {outcomeV1, 0, 3, 0x05, 'a', 'b'},
		"trailer count":    {outcomeV1, 0, 2, 0x7f, 0},
		"values count":     append([]byte{outcomeV1, 0, 12, 1, 1, 'a'}, binary.AppendUvarint(nil, 1<<62)...),
	} {
		if o, err := decodeOutcome(b); !errors.Is(err, errCorruptOutcome) {
			t.Errorf("%s: %+v, %v; want errCorruptOutcome", name, o, err)
		}
	}
}
