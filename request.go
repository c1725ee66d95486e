package idem

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"unicode"
	"unicode/utf8"
)

// Limits on what identifies a request.
const (
	// MaxKeyBytes is the longest idempotency key accepted.
	MaxKeyBytes = 255
	// MaxScopeBytes is the longest scope accepted.
	MaxScopeBytes = 255
)

// Request identifies one intention of one client.
type Request struct {
	// Scope says who is asking and where: a tenant or principal plus the
	// route, so one client's key can never read another's stored response.
	Scope string
	// Key is the idempotency key the client made once for this intention and
	// reuses on every retry of it.
	Key string
	// Fingerprint is a hash of what the request asks for. The same key with
	// another fingerprint is a mismatch, not a retry.
	Fingerprint Fingerprint
}

// Validate checks the scope and key, returning an error that wraps
// ErrInvalidScope or ErrInvalidKey.
func (r Request) Validate() error {
	if err := ValidateKey(r.Key); err != nil {
		return err
	}
	return validateScope(r.Scope)
}

// ValidateKey checks an idempotency key: 1 to MaxKeyBytes bytes of printable
// ASCII (0x20 to 0x7E). The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	if why := printableASCII(key, MaxKeyBytes); why != "" {
		return fmt.Errorf("%w: %s", ErrInvalidKey, why)
	}
	return nil
}

// printableASCII says why s is not 1 to limit bytes of printable ASCII (0x20
// to 0x7E), or "" when it is.
func printableASCII(s string, limit int) string {
	if s == "" {
		return "empty"
	}
	if len(s) > limit {
		return fmt.Sprintf("%d bytes, at most %d", len(s), limit)
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e {
			return fmt.Sprintf("byte 0x%02x at offset %d is not printable ASCII", c, i)
		}
	}
	return ""
}

func validateScope(scope string) error {
	if scope == "" {
		return fmt.Errorf("%w: empty", ErrInvalidScope)
	}
	if len(scope) > MaxScopeBytes {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidScope, len(scope), MaxScopeBytes)
	}
	if !utf8.ValidString(scope) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidScope)
	}
	for i, r := range scope {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: control character %U at offset %d", ErrInvalidScope, r, i)
		}
	}
	return nil
}

// Fingerprint is a SHA-256 over what a request asks for.
type Fingerprint [sha256.Size]byte

// FingerprintRequest hashes a request's method, route and body. Each part is
// framed with its length, so no two different requests share the framing
// ("ab"+"c" and "a"+"bc" hash differently).
func FingerprintRequest(method, route string, body []byte) Fingerprint {
	var h Hasher
	h.AddString(method)
	h.AddString(route)
	h.Add(body)
	return h.Sum()
}

// Hasher builds a Fingerprint from parts, each framed with its length. Use it
// to fingerprint what matters to your requests (selected fields, a
// canonicalized query). The zero value is ready to use.
type Hasher struct {
	h   hash.Hash
	len [8]byte
}

// Add appends one part.
func (h *Hasher) Add(part []byte) {
	h.init()
	binary.BigEndian.PutUint64(h.len[:], uint64(len(part)))
	h.h.Write(h.len[:])
	h.h.Write(part)
}

// AddString appends one part given as a string.
func (h *Hasher) AddString(part string) {
	h.init()
	binary.BigEndian.PutUint64(h.len[:], uint64(len(part)))
	h.h.Write(h.len[:])
	_, _ = io.WriteString(h.h, part) // a hash.Hash never fails a write
}

// Sum returns the fingerprint of the parts added so far.
func (h *Hasher) Sum() Fingerprint {
	h.init()
	var f Fingerprint
	h.h.Sum(f[:0])
	return f
}

// fingerprintDomain separates idem's fingerprints from other uses of SHA-256
// over the same bytes and versions the framing.
const fingerprintDomain = "idem fingerprint v1"

func (h *Hasher) init() {
	if h.h == nil {
		h.h = sha256.New()
		h.h.Write([]byte(fingerprintDomain))
	}
}
