package idem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemkit/idem/internal/framing"
)

// MaxHeaderBytes is the largest encoded response header stored.
const MaxHeaderBytes = 64 << 10

// Response is the outcome the winner stores and every retry replays: the
// status, the header values (in order for each name) and the body, byte for
// byte.
//
// Work that has no HTTP status, such as a queue consumer's or a gRPC call's,
// stores Status 0 (NoStatus): "done", with Body as an optional small payload
// and Header usually nil. It replays as Status 0 with the same body.
type Response struct {
	// Status is the HTTP status code, 100 to 599, or NoStatus (0) for work
	// that is done but has no HTTP status.
	Status int
	// Header holds the response headers; the values of each name keep
	// their order.
	Header http.Header
	// Body is the response body, replayed byte for byte.
	Body []byte
}

// NoStatus is the Status of a Response for work that has no HTTP status: a
// consumed message, a gRPC call. It means "done" and is stored like any
// other status (Config.StoreStatus is asked about it too; the default
// stores it).
const NoStatus = 0

// validate checks the status code: NoStatus or an HTTP status.
func (r Response) validate() error {
	if r.Status != NoStatus && (r.Status < 100 || r.Status > 599) {
		return fmt.Errorf("%w: status %d", ErrInvalidResponse, r.Status)
	}
	return nil
}

// headerEncodingV1 is the first byte of every encoded header, so the format
// can change without misreading old rows.
const headerEncodingV1 = 1

// errCorruptHeader is returned when a stored header cannot be decoded.
var errCorruptHeader = errors.New("idem: stored header is corrupt")

// encodeHeader turns a header into the stored form: a version byte, then
// the header as framing.AppendHeader frames it (names in sorted order, each
// with its values in their original order, every string and count a
// uvarint length and its bytes). A nil or empty header encodes as an empty
// slice.
func encodeHeader(h http.Header) []byte {
	if len(h) == 0 {
		return []byte{}
	}
	size := 1 + binary.MaxVarintLen64
	for name, values := range h {
		size += binary.MaxVarintLen64*2 + len(name)
		for _, v := range values {
			size += binary.MaxVarintLen64 + len(v)
		}
	}
	return framing.AppendHeader(append(make([]byte, 0, size), headerEncodingV1), h)
}

// decodeHeader reverses encodeHeader. An empty input gives a nil header.
func decodeHeader(b []byte) (http.Header, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if b[0] != headerEncodingV1 {
		return nil, fmt.Errorf("%w: unknown encoding %d", errCorruptHeader, b[0])
	}
	r := framing.NewReader(b[1:], errCorruptHeader)
	h := r.Header()
	if err := r.End(); err != nil {
		return nil, err
	}
	return h, nil
}
