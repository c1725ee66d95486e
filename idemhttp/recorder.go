package idemhttp

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/idemkit/idem"
)

// recorder buffers a handler's answer until the transaction has committed.
// It follows net/http's rules: headers changed after WriteHeader do not
// count (but trailers do), a Write without WriteHeader means 200 (a Write of
// no bytes too), and an unset Content-Type is sniffed from the body. It
// implements nothing but http.ResponseWriter, so http.ResponseController
// reports Flush, Hijack and deadlines as unsupported: a Flush writes
// nothing, and a handler that only flushed has not answered.
type recorder struct {
	header http.Header // what the handler edits
	sent   http.Header // the header as of WriteHeader
	status int
	body   bytes.Buffer
	limit  int  // the largest body the store keeps
	over   bool // the handler wrote more than limit
}

func newRecorder(limit int) *recorder {
	return &recorder{header: make(http.Header), limit: limit}
}

// Header returns the header map the handler fills before WriteHeader.
func (rec *recorder) Header() http.Header { return rec.header }

// WriteHeader records the status and a snapshot of the header. Like
// net/http it panics for a code outside 100-999; informational (1xx) codes
// cannot be sent before the commit and are dropped.
func (rec *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if rec.status != 0 || code < 200 {
		return
	}
	rec.status = code
	rec.sent = rec.header.Clone()
	if rec.sent == nil {
		rec.sent = make(http.Header)
	}
}

// Write buffers p. Past the store's body limit it fails with an error
// wrapping idem.ErrTooLarge, and the middleware rolls back.
func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if !bodyAllowed(rec.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if rec.over || rec.body.Len()+len(p) > rec.limit {
		rec.over = true
		return 0, fmt.Errorf("%w: body over %d bytes", idem.ErrTooLarge, rec.limit)
	}
	return rec.body.Write(p)
}

// answered reports whether the handler answered: it called WriteHeader
// with a final status, or Write.
func (rec *recorder) answered() bool { return rec.status != 0 }

// finish completes the answer after the handler returned: the implied 200
// (for a handler that did not answer, when the middleware allows it), the
// sniffed Content-Type, and the limit check.
func (rec *recorder) finish() (idem.Response, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.over {
		return idem.Response{}, fmt.Errorf("idemhttp: handler wrote a body over %d bytes: %w", rec.limit, idem.ErrTooLarge)
	}
	_, hasType := rec.sent["Content-Type"]
	_, hasTE := rec.sent["Transfer-Encoding"]
	if !hasType && !hasTE && rec.body.Len() > 0 && bodyAllowed(rec.status) {
		rec.sent.Set("Content-Type", http.DetectContentType(rec.body.Bytes()))
	}
	return idem.Response{Status: rec.status, Header: rec.sent, Body: rec.body.Bytes()}, nil
}

// trailer returns the trailers the handler set, as net/http would send them
// once the handler returned: the names it declared in the Trailer header
// before WriteHeader, with the values they have now, and the names it set
// with http.TrailerPrefix, with that prefix. Nil when there are none.
func (rec *recorder) trailer() http.Header {
	if !bodyAllowed(rec.status) {
		return nil // net/http sends no trailers without a body
	}
	var t http.Header
	set := func(name string, values []string) {
		if len(values) == 0 {
			return
		}
		if t == nil {
			t = make(http.Header)
		}
		t[name] = slices.Clone(values)
	}
	for name := range headerTokens(rec.sent, "Trailer") {
		set(name, rec.header[name])
	}
	for name, values := range rec.header {
		if strings.HasPrefix(name, http.TrailerPrefix) {
			set(name, values)
		}
	}
	return t
}

// bodyAllowed reports whether a response with status may have a body.
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}
