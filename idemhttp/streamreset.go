package idemhttp

import (
	"reflect"
)

// HTTP/2 error codes (RFC 9113, section 7) with which a server resets a
// stream that a retry can get past.
const (
	// h2InternalError: the server failed before it answered (Go's
	// server sends it for a handler that panicked, http.ErrAbortHandler
	// included; proxies for an upstream that failed).
	h2InternalError = 0x2
	// h2RefusedStream: the server did not process the request at all.
	h2RefusedStream = 0x7
	// h2Cancel: the server (or a proxy) gave up on the stream.
	h2Cancel = 0x8
)

// streamReset reports whether err holds an HTTP/2 stream reset
// (RST_STREAM) with INTERNAL_ERROR, REFUSED_STREAM or CANCEL: the HTTP/2
// form of the connection an HTTP/1.1 server drops before answering. Such
// errors on the client side come from the peer: a client whose own
// context ended gets the context's error instead, and RoundTrip stops on
// it.
func streamReset(err error) bool {
	code, ok := streamErrorCode(err, 0)
	if !ok {
		return false
	}
	switch code {
	case h2InternalError, h2RefusedStream, h2Cancel:
		return true
	}
	return false
}

// maxErrorDepth bounds the walk of an error tree.
const maxErrorDepth = 32

// streamErrorCode returns the code of the first HTTP/2 stream error in
// err's tree (Unwrap() error and Unwrap() []error).
//
// net/http's bundled HTTP/2 client reports a stream reset as its
// unexported http2StreamError, which has no method besides Error, so
// errors.As cannot name it; golang.org/x/net/http2 reports it as its
// exported StreamError, a copy of the same type. Both are recognised by
// that type's shape, not by the message: a struct named StreamError or
// http2StreamError with the uint32 fields StreamID and Code.
func streamErrorCode(err error, depth int) (uint64, bool) {
	if err == nil || depth > maxErrorDepth {
		return 0, false
	}
	if code, ok := streamErrorShape(err); ok {
		return code, true
	}
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		return streamErrorCode(e.Unwrap(), depth+1)
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if code, ok := streamErrorCode(inner, depth+1); ok {
				return code, true
			}
		}
	}
	return 0, false
}

// streamErrorShape returns err's Code when err (or what it points to) is a
// stream error as streamErrorCode describes it.
func streamErrorShape(err error) (uint64, bool) {
	v := reflect.ValueOf(err)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return 0, false
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0, false
	}
	switch v.Type().Name() {
	case "StreamError", "http2StreamError":
	default:
		return 0, false
	}
	id, code := v.FieldByName("StreamID"), v.FieldByName("Code")
	if !id.IsValid() || id.Kind() != reflect.Uint32 || !code.IsValid() || code.Kind() != reflect.Uint32 {
		return 0, false
	}
	return code.Uint(), true
}
