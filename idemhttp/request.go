package idemhttp

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
)

// errNoKey is keyFrom's answer for a request without the header.
var errNoKey = errors.New("idemhttp: no Idempotency-Key header")

// keyFrom returns the request's idempotency key. It fails with errNoKey when
// the header is absent, and with an error wrapping idem.ErrInvalidKey when
// it is repeated or is not 1 to idem.MaxKeyBytes bytes of printable ASCII.
func keyFrom(h http.Header) (string, error) {
	values := h.Values(HeaderKey)
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", fmt.Errorf("%w: %d %s headers, want one", idem.ErrInvalidKey, len(values), HeaderKey)
	}
	if err := idem.ValidateKey(values[0]); err != nil {
		return "", err
	}
	return values[0], nil
}

// DefaultRoute is the route of r when Config.Route is nil: the pattern of
// the http.ServeMux entry that matched (r.Pattern, Go 1.22+), or the URL
// path when no ServeMux set one.
func DefaultRoute(r *http.Request) string {
	if r.Pattern != "" {
		return r.Pattern
	}
	if r.URL == nil {
		return ""
	}
	return r.URL.Path
}

// DefaultFingerprint is the fingerprint when Config.Fingerprint is nil: the
// method, the route, the raw query string and the body bytes, each framed
// with its length (idem.Hasher). It is byte-exact: a client retrying must
// send the same query and body bytes, which a retry of one intention does.
func DefaultFingerprint(r *http.Request, route string, body []byte) idem.Fingerprint {
	var h idem.Hasher
	h.AddString(r.Method)
	h.AddString(route)
	if r.URL != nil {
		h.AddString(r.URL.RawQuery)
	} else {
		h.AddString("")
	}
	h.Add(body)
	return h.Sum()
}

// scopeOf builds the scope of a key: the method, then the route and the
// principal quoted (so the framing is unambiguous and every byte printable):
//
//	POST "POST /orders" "tenant-7"
//
// A scope longer than idem.MaxScopeBytes becomes "sha256:" and the hex of a
// framed hash of the three parts; it cannot equal a quoted form, which
// always holds a space.
func scopeOf(principal, method, route string) string {
	s := method + " " + strconv.Quote(route) + " " + strconv.Quote(principal)
	if len(s) <= idem.MaxScopeBytes {
		return s
	}
	var h idem.Hasher
	h.AddString("idemhttp scope")
	h.AddString(method)
	h.AddString(route)
	h.AddString(principal)
	f := h.Sum()
	return "sha256:" + hex.EncodeToString(f[:])
}
