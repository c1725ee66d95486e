package idemhttp

import (
	"net/http"

	"github.com/idemkit/idem"
)

// CanonicalJSONFingerprint is a Config.Fingerprint for routes whose body is
// JSON, for clients that may re-serialize the body when they retry. It is
// DefaultFingerprint (method, route, host, path, query and body) of the
// body's canonical form (idem.CanonicalJSONExact) instead of its bytes:
// RFC 8785's form (properties sorted, no whitespace, strings escaped one
// way) with every number written as its exact decimal value. So a retry
// whose body has its properties in another order, other whitespace or
// escapes, or its numbers in other forms (1.0, 1e0, 10E-1) is the same
// request, and replays; a body with another value is still a mismatch
// (422), even when the values differ only past float64 precision (ids
// 9007199254740993 and 9007199254740992, amounts 0.10000000000000000001
// and 0.1), which RFC 8785's own form would equate.
//
// A body that has no canonical form (empty, a form, text, or JSON with a
// repeated property name, invalid UTF-8 or an escaped lone surrogate) is
// hashed byte for byte, as DefaultFingerprint hashes it. It is not refused
// here: the handler decides what such a body means, and answers 400 if it
// is bad. Such a body never fingerprints like a JSON one: a canonical form
// is its own canonical form, so bytes that have none never equal one.
//
// It costs a parse of the body (see docs/http.md for the figures). A body
// already in canonical form (RFC 8785's included), or with none,
// fingerprints as under DefaultFingerprint; any other JSON body does not,
// so turning it on for a live route makes a retry of such a request sent
// before the change a mismatch (422, nothing done twice) until that
// record's retention passes.
func CanonicalJSONFingerprint(r *http.Request, route string, body []byte) idem.Fingerprint {
	if canonical, err := idem.CanonicalJSONExact(body); err == nil {
		body = canonical
	}
	return DefaultFingerprint(r, route, body)
}
