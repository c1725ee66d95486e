// Package framing is the length-prefixed encoding idem stores headers in
// (the core's response header, the RPC adapters' trailers): every string
// and count is a uvarint, a string's bytes follow its length.
package framing

import (
	"encoding/binary"
	"fmt"
	"net/http"
	"slices"
)

// AppendHeader appends h to b: its number of names, then, for each name in
// byte order, the name, its number of values and each value in order.
func AppendHeader(b []byte, h http.Header) []byte {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = AppendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(h[name])))
		for _, v := range h[name] {
			b = AppendString(b, v)
		}
	}
	return b
}

// AppendString appends s to b, preceded by its length.
func AppendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// AppendBytes appends p to b, preceded by its length.
func AppendBytes(b, p []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(p))), p...)
}

// Reader reads framed values from its bytes. It keeps the first error,
// which wraps the corrupt error it was made with; once it has one, every
// read returns a zero value.
type Reader struct {
	b       []byte
	err     error
	corrupt error
}

// NewReader reads b; its errors wrap corrupt.
func NewReader(b []byte, corrupt error) *Reader { return &Reader{b: b, corrupt: corrupt} }

// Err is the first error met, nil if none.
func (r *Reader) Err() error { return r.err }

// Rest returns the bytes not read yet.
func (r *Reader) Rest() []byte { return r.b }

func (r *Reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{r.corrupt}, args...)...)
	}
}

// Uvarint reads a uvarint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad length")
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Count reads a count of items that are each at least one byte long, so
// that a corrupt count cannot make a huge allocation.
func (r *Reader) Count() int {
	v := r.Uvarint()
	if r.err == nil && v > uint64(len(r.b)) {
		r.fail("count %d past the end", v)
	}
	if r.err != nil {
		return 0
	}
	return int(v) //nolint:gosec // v <= len(r.b), checked above
}

// Bytes reads a length and that many bytes (aliasing the input).
func (r *Reader) Bytes() []byte {
	n := r.Count()
	if r.err != nil {
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// Header reads what AppendHeader appended.
func (r *Reader) Header() http.Header {
	n := r.Count()
	h := make(http.Header, min(n, 64))
	for i := 0; i < n && r.err == nil; i++ {
		name := string(r.Bytes())
		values := make([]string, r.Count())
		for j := range values {
			values[j] = string(r.Bytes())
		}
		h[name] = values
	}
	if r.err != nil {
		return nil
	}
	return h
}

// End fails the reader when bytes are left after what was read.
func (r *Reader) End() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}
