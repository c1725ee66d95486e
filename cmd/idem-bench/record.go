package main

import (
	"encoding/binary"
	"net/http"
	"slices"
)

// encodeHeader writes a response header the way idem stores it (a version
// byte, then the sorted names, each with its values, every string and count
// as a uvarint length and its bytes), so that records the benchmark's own
// schemes write (seed) replay through idem too. A test checks it against
// what Store.Do stores.
func encodeHeader(h http.Header) []byte {
	if len(h) == 0 {
		return []byte{}
	}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, name := range names {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(h[name])))
		for _, v := range h[name] {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return b
}
