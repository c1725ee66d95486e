package idem

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/http"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// TestHeaderRoundTrip: every name, every value, in order, survives storage,
// including empty values, names without values and an empty name.
func TestHeaderRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    http.Header
	}{
		{"one value", http.Header{"Content-Type": {"application/json"}}},
		{"values keep their order", http.Header{"X-Multi": {"zeta", "alpha", "mid dle", "alpha"}}},
		{"empty values are kept", http.Header{"X-Multi": {"", "a", ""}}},
		{"name without values", http.Header{"X-Empty": {}, "Location": {"/x"}}},
		{"empty name", http.Header{"": {"v"}, "A": {"b"}}},
		{"non-canonical names are kept as given", http.Header{"x-lower": {"1"}, "X-Lower": {"2"}}},
		{"bytes beyond ASCII", http.Header{"X-Bin": {"\x00\xff\n", "ünï"}}},
		{"long value", http.Header{"X-Long": {strings.Repeat("v", 70000)}}},
		{"many names", func() http.Header {
			h := http.Header{}
			for i := range 300 {
				h[string(rune('A'+i%26))+strings.Repeat("x", i)] = []string{strings.Repeat("v", i)}
			}
			return h
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeHeader(encodeHeader(tc.h))
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !reflect.DeepEqual(got, tc.h) {
				t.Errorf("round trip:\n got  %q\n want %q", got, tc.h)
			}
		})
	}
	for _, h := range []http.Header{nil, {}} {
		if b := encodeHeader(h); b == nil || len(b) != 0 {
			t.Errorf("encodeHeader(%#v) = %#v, want an empty, non-nil slice", h, b)
		}
	}
	if h, err := decodeHeader(nil); h != nil || err != nil {
		t.Errorf("decodeHeader(nil) = %v, %v; want nil, nil", h, err)
	}
}

// TestHeaderEncodingStable pins the stored format: version byte 1, the name
// count, then each name in sorted order with its values, every string and
// count a uvarint length first. Stored rows are read back with it.
func TestHeaderEncodingStable(t *testing.T) {
	h := http.Header{"B": {"x", ""}, "A": {"yz"}, "C": {}}
	want := []byte{1, 3, 1, 'A', 1, 2, 'y', 'z', 1, 'B', 2, 1, 'x', 0, 1, 'C', 0}
	if got := encodeHeader(h); !bytes.Equal(got, want) {
		t.Errorf("encodeHeader(%v) = %v, want %v", h, got, want)
	}
}

// TestDecodeCorruptHeader: a corrupt stored header is an error, never a
// panic or a silently different header.
func TestDecodeCorruptHeader(t *testing.T) {
	good := encodeHeader(http.Header{"A": {"b"}})
	huge := binary.AppendUvarint([]byte{1}, 1<<62)
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"unknown version", append([]byte{2}, good[1:]...)},
		{"version only", []byte{1}},
		{"trailing bytes", append(append([]byte{}, good...), 0)},
		{"truncated value", good[:len(good)-1]},
		{"truncated length", []byte{1, 1, 0x80}},
		{"name count beyond the data", []byte{1, 5, 1, 'A', 0}},
		{"value count beyond the data", []byte{1, 1, 1, 'A', 9, 0}},
		{"string length beyond the data", []byte{1, 1, 200, 'A'}},
		{"huge name count", huge},
		{"huge value count", binary.AppendUvarint([]byte{1, 1, 1, 'A'}, 1<<62)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := decodeHeader(tc.b)
			if !errors.Is(err, errCorruptHeader) {
				t.Errorf("decodeHeader(%v) = %v, %v; want errCorruptHeader", tc.b, h, err)
			}
		})
	}
}

// TestDecodeHeaderBoundsAllocation: a corrupt count cannot make decoding
// allocate more than the stored bytes justify.
func TestDecodeHeaderBoundsAllocation(t *testing.T) {
	for _, b := range [][]byte{
		binary.AppendUvarint([]byte{1}, 1<<20),
		binary.AppendUvarint([]byte{1, 1, 1, 'A'}, 1<<20),
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := decodeHeader(b)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Errorf("decodeHeader(%v): no error", b)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
			t.Errorf("decodeHeader of %d corrupt bytes allocated %d bytes", len(b), n)
		}
	}
}
