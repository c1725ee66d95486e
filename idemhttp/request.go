package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// errNoKey is keyFrom's answer for a request without the header.
var errNoKey = errors.New("idemhttp: no Idempotency-Key header")

// keyFrom returns the request's idempotency key. It fails with errNoKey when
// the header is absent, and with an error wrapping idem.ErrInvalidKey when
// it is repeated, is a malformed quoted string, or is not 1 to
// idem.MaxKeyBytes bytes of printable ASCII.
//
// The IETF draft defines the header as an RFC 8941 sf-string ("abc"); most
// clients send the bare key (abc). Both are accepted: a value that starts
// with a double quote is parsed as an sf-string, anything else is the key
// as sent.
func keyFrom(h http.Header) (string, error) {
	values := h.Values(HeaderKey)
	switch len(values) {
	case 0:
		return "", errNoKey
	case 1:
	default:
		return "", fmt.Errorf("%w: %d %s headers, want one", idem.ErrInvalidKey, len(values), HeaderKey)
	}
	key := values[0]
	if strings.HasPrefix(key, `"`) {
		var err error
		if key, err = parseSFString(key); err != nil {
			return "", err
		}
	}
	if err := idem.ValidateKey(key); err != nil {
		return "", err
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string (section 3.3.3): a double
// quote, then printable ASCII where '"' and '\' appear only escaped by a
// backslash, then a double quote and nothing after it (parameters are not
// supported; surrounding whitespace is trimmed by net/http).
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", fmt.Errorf("%w: quoted key has a backslash that escapes neither '\"' nor '\\' at offset %d", idem.ErrInvalidKey, i-1)
			}
			b.WriteByte(v[i])
		case c == '"':
			if rest := v[i+1:]; rest != "" {
				return "", fmt.Errorf("%w: %q follows the quoted key (parameters are not supported)", idem.ErrInvalidKey, rest)
			}
			return b.String(), nil
		case c < 0x20 || c > 0x7e:
			return "", fmt.Errorf("%w: byte 0x%02x at offset %d is not printable ASCII", idem.ErrInvalidKey, c, i)
		default:
			b.WriteByte(c)
		}
	}
	return "", fmt.Errorf("%w: quoted key has no closing '\"'", idem.ErrInvalidKey)
}

// routeKey is the context key of the route an adapter set with WithRoute.
type routeKey struct{}

// WithRoute returns a shallow copy of r that carries route, the route
// template a router matched ("/orders/:id" in echo and gin,
// "/orders/{id}" in chi). DefaultRoute prefers it to r.Pattern. The
// framework adapters (idemecho, idemgin) call it; so can a router's own
// middleware, once it has matched.
func WithRoute(r *http.Request, route string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), routeKey{}, route))
}

// DefaultRoute is the route of r when Config.Route is nil: the route set
// with WithRoute, else the pattern of the http.ServeMux entry that matched
// (r.Pattern, Go 1.22+) without its method, which the scope already holds:
// "/invoices/{id}/pay" for "POST /invoices/{id}/pay". It is "" when
// the middleware runs before routing (it wraps a whole mux, or a router's
// top-level Use): the middleware then refuses protected requests (see
// Config.Unrouted).
func DefaultRoute(r *http.Request) string {
	if route, ok := r.Context().Value(routeKey{}).(string); ok && route != "" {
		return route
	}
	return patternRoute(r.Pattern)
}

// patternRoute is a ServeMux pattern, "[METHOD ][HOST]/[PATH]", without its
// method.
func patternRoute(pattern string) string {
	if i := strings.IndexAny(pattern, " \t"); i >= 0 {
		return strings.TrimLeft(pattern[i:], " \t")
	}
	return pattern
}

// DefaultFingerprint is the fingerprint when Config.Fingerprint is nil. It
// hashes, each part framed with its length (idem.Hasher):
//
//   - the method and the route;
//   - the host (r.Host, ASCII letters lower-cased), unless the ServeMux pattern that
//     matched names a host and so already fixes it;
//   - the escaped path, with the values of its wildcards (/invoices/2/pay);
//   - the raw query string;
//   - the body bytes (for a form a middleware parsed before this one, the
//     form's encoding: see Config.Fingerprint).
//
// So the same key sent to another resource (another invoice, another
// catch-all path, another host) is a mismatch (422), never a replay of the
// first resource's answer. It is byte-exact: a client retrying must send the
// same target and body bytes, which a retry of one intention does (for
// clients that re-serialize a JSON body on a retry, see
// CanonicalJSONFingerprint).
func DefaultFingerprint(r *http.Request, route string, body []byte) idem.Fingerprint {
	var h idem.Hasher
	addTarget(&h, r, route)
	h.Add(body)
	return h.Sum()
}

// addTarget adds what DefaultFingerprint hashes before the body: the
// method, the route, the host (or "" when the pattern fixes it), the
// escaped path and the raw query.
func addTarget(h *idem.Hasher, r *http.Request, route string) {
	h.AddString(r.Method)
	h.AddString(route)
	if patternHasHost(r.Pattern) {
		h.AddString("")
	} else {
		h.AddString(asciiLower(requestHost(r)))
	}
	if r.URL != nil {
		h.AddString(r.URL.EscapedPath())
		h.AddString(r.URL.RawQuery)
	} else {
		h.AddString("")
		h.AddString("")
	}
}

// patternHasHost reports whether a ServeMux pattern, "[METHOD ][HOST]/[PATH]",
// names a host.
func patternHasHost(pattern string) bool {
	pattern = patternRoute(pattern)
	return pattern != "" && !strings.HasPrefix(pattern, "/")
}

// asciiLower lower-cases the ASCII letters of s and leaves every other byte
// as it is (host names compare case-insensitively, and only in ASCII).
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// requestHost is the host the request was sent to.
func requestHost(r *http.Request) string {
	if r.Host != "" || r.URL == nil {
		return r.Host
	}
	return r.URL.Host
}

// Scope is the scope of a key sent by principal with method to route, as
// the middleware builds it: idem.Scope with the principal first, then the
// method and the quoted route,
//
//	"tenant-7" POST "/orders/{id}/pay"
//
// so idem.ScopePrefix(principal) selects one tenant's records, and the CLI
// finds a record with -principal, -method and -route.
func Scope(principal, method, route string) string {
	return idem.Scope(principal, method+" "+strconv.Quote(route))
}
