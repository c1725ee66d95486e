package framing_test

import (
	"errors"
	"net/http"
	"reflect"
	"testing"

	"github.com/idemkit/idem/internal/framing"
)

var errCorrupt = errors.New("corrupt")

func TestHeaderRoundTrip(t *testing.T) {
	h := http.Header{"X-B": {"2", ""}, "X-A": {"1"}, "Empty": {}}
	b := framing.AppendHeader(nil, h)
	// Names in byte order: Empty, X-A, X-B.
	want := []byte{3, 5, 'E', 'm', 'p', 't', 'y', 0, 3, 'X', '-', 'A', 1, 1, '1', 3, 'X', '-', 'B', 2, 1, '2', 0}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("AppendHeader = %v, want %v", b, want)
	}
	r := framing.NewReader(b, errCorrupt)
	got := r.Header()
	if err := r.End(); err != nil || !reflect.DeepEqual(got, h) {
		t.Fatalf("Header = %v, %v; want %v", got, err, h)
	}
}

func TestCorrupt(t *testing.T) {
	good := framing.AppendHeader(nil, http.Header{"A": {"1"}})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"truncated", good[:len(good)-1]},
		{"count past the end", []byte{200, 1}},
		{"bad length", []byte{0x80}},
		{"trailing bytes", append(append([]byte{}, good...), 0)},
	} {
		r := framing.NewReader(tc.b, errCorrupt)
		h := r.Header()
		if err := r.End(); !errors.Is(err, errCorrupt) || (h != nil && tc.name != "trailing bytes") {
			t.Errorf("%s: %v, %v; want nil and an error wrapping errCorrupt", tc.name, h, err)
		}
	}
}
