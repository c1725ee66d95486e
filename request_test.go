package idem_test

import (
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestValidateKey(t *testing.T) {
	var printable strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		printable.WriteByte(c)
	}
	for _, tc := range []struct {
		name string
		key  string
		ok   bool
	}{
		{"one byte", "k", true},
		{"every printable ASCII byte", printable.String(), true},
		{"space (0x20)", " ", true},
		{"tilde (0x7e)", "~", true},
		{"255 bytes", strings.Repeat("k", idem.MaxKeyBytes), true},
		{"empty", "", false},
		{"256 bytes", strings.Repeat("k", idem.MaxKeyBytes+1), false},
		{"unit separator (0x1f)", "a\x1fb", false},
		{"NUL", "a\x00", false},
		{"newline", "a\nb", false},
		{"DEL (0x7f)", "a\x7f", false},
		{"byte 0x80", "a\x80", false},
		{"UTF-8 letter", "clé", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := idem.ValidateKey(tc.key)
			if tc.ok && err != nil {
				t.Errorf("ValidateKey(%q) = %v, want nil", tc.key, err)
			}
			if !tc.ok && !errors.Is(err, idem.ErrInvalidKey) {
				t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", tc.key, err)
			}
			// Request.Validate checks the key the same way.
			err = idem.Request{Scope: "s", Key: tc.key}.Validate()
			if tc.ok != (err == nil) || (!tc.ok && !errors.Is(err, idem.ErrInvalidKey)) {
				t.Errorf("Request{Key: %q}.Validate() = %v, want ok=%v", tc.key, err, tc.ok)
			}
		})
	}
}

func TestValidateScope(t *testing.T) {
	for _, tc := range []struct {
		name  string
		scope string
		ok    bool
	}{
		{"ASCII", "tenant-1 POST /orders", true},
		{"255 bytes of UTF-8", strings.Repeat("ü", 127) + "s", true},
		{"255 bytes of ASCII", strings.Repeat("s", idem.MaxScopeBytes), true},
		{"DEL (0x7f)", "a\x7fb", false},
		{"empty", "", false},
		{"256 bytes", strings.Repeat("s", idem.MaxScopeBytes+1), false},
		{"256 bytes of UTF-8", strings.Repeat("ü", 128), false},
		{"tab", "tenant\t1", false},
		{"NUL", "tenant\x001", false},
		{"C1 control U+0085", "tenant\u00851", false},
		{"invalid UTF-8", "tenant\xff", false},
		{"truncated UTF-8", "tenant\xc3", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := idem.Request{Scope: tc.scope, Key: "k"}.Validate()
			if tc.ok && err != nil {
				t.Errorf("scope %q: %v, want nil", tc.scope, err)
			}
			if !tc.ok && !errors.Is(err, idem.ErrInvalidScope) {
				t.Errorf("scope %q: %v, want ErrInvalidScope", tc.scope, err)
			}
		})
	}
}

// TestFingerprintFraming: parts are framed with their length, so moving a
// byte from one part to the next, or splitting one part in two, changes the
// fingerprint.
func TestFingerprintFraming(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b idem.Fingerprint
	}{
		{"method/route boundary", idem.FingerprintRequest("POST", "/orders", nil), idem.FingerprintRequest("POS", "T/orders", nil)},
		{"route/body boundary", idem.FingerprintRequest("POST", "/orders", []byte("1")), idem.FingerprintRequest("POST", "/orders1", nil)},
		{"empty method", idem.FingerprintRequest("", "GET/x", nil), idem.FingerprintRequest("GET", "/x", nil)},
		{"empty body and no body part", hasherSum([]string{"a", "b"}, nil, true), hasherSum([]string{"a", "b"}, nil, false)},
		{"strings: ab+c and a+bc", hasherSum([]string{"ab", "c"}, nil, false), hasherSum([]string{"a", "bc"}, nil, false)},
		{"bytes: ab+c and a+bc", hasherSum(nil, [][]byte{[]byte("ab"), []byte("c")}, false), hasherSum(nil, [][]byte{[]byte("a"), []byte("bc")}, false)},
		{"one part and two", hasherSum([]string{"abc"}, nil, false), hasherSum([]string{"ab", "c"}, nil, false)},
		{"empty part counts", hasherSum([]string{"a", ""}, nil, false), hasherSum([]string{"a"}, nil, false)},
		{"different bodies", idem.FingerprintRequest("POST", "/orders", []byte(`{"amount":100}`)), idem.FingerprintRequest("POST", "/orders", []byte(`{"amount":999}`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.a == tc.b {
				t.Errorf("fingerprints collide: %x", tc.a)
			}
		})
	}
	// Add and AddString frame the same bytes the same way, and
	// FingerprintRequest is the Hasher over method, route and body.
	var h idem.Hasher
	h.AddString("POST")
	h.Add([]byte("/orders"))
	h.AddString("body")
	if got, want := h.Sum(), idem.FingerprintRequest("POST", "/orders", []byte("body")); got != want {
		t.Errorf("Hasher over the parts = %x, FingerprintRequest = %x", got, want)
	}
}

func hasherSum(strs []string, parts [][]byte, emptyBody bool) idem.Fingerprint {
	var h idem.Hasher
	for _, s := range strs {
		h.AddString(s)
	}
	for _, p := range parts {
		h.Add(p)
	}
	if emptyBody {
		h.Add(nil)
	}
	return h.Sum()
}

// TestFingerprintStable pins the fingerprint format: SHA-256 over the domain
// "idem fingerprint v1", then each part as a big-endian uint64 length and its
// bytes. Stored records hold these values, so a change makes every retry
// after an upgrade a mismatch.
func TestFingerprintStable(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  idem.Fingerprint
		want string
	}{
		{"request", idem.FingerprintRequest("POST", "/orders", []byte(`{"item":88}`)), "a25578a1e8f8687beb397869d68bdeeac352cd49c4566bc84d4dcbd9f610ab65"},
		{"no parts", hasherSum(nil, nil, false), "55c29f326f15819eef8fdedfdf7d603af8c9ec87c9da2f7eb8b513cf23200c70"},
	} {
		if got := hex.EncodeToString(tc.got[:]); got != tc.want {
			t.Errorf("%s: fingerprint %s, want %s", tc.name, got, tc.want)
		}
	}
}
