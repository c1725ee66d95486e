package idemhttp

import (
	"net/http"

	"github.com/idemkit/idem"
)

// CanonicalJSONFingerprint is a Config.Fingerprint for routes whose body is
// JSON, for clients that may re-serialize the body when they retry. It is
// DefaultFingerprint (method, route, host, path, query and body) of the
// body's RFC 8785 canonical form (idem.CanonicalJSON) instead of its bytes.
// So a retry whose body has its properties in another order, other
// whitespace or escapes, or its numbers in other forms (1.0, 1e0, 10E-1) is
// the same request, and replays; a body with another value is still a
// mismatch (422).
//
// A body that has no canonical form (empty, a form, text, or JSON that RFC
// 8785 refuses: a repeated property name, invalid UTF-8, an escaped lone
// surrogate, a number beyond a float64) is hashed byte for byte, as
// DefaultFingerprint hashes it. It is not refused here: the handler decides
// what such a body means, and answers 400 if it is bad. Such a body never
// fingerprints like a JSON one: a canonical form is its own canonical form,
// so bytes that have none never equal one.
//
// It costs a parse of the body (see docs/http.md for the figures). A body
// already in canonical form, or with none, fingerprints as under
// DefaultFingerprint; any other JSON body does not, so turning it on for a
// live route makes a retry of such a request sent before the change a
// mismatch (422, nothing done twice) until that record's retention passes.
func CanonicalJSONFingerprint(r *http.Request, route string, body []byte) idem.Fingerprint {
	if canonical, err := idem.CanonicalJSON(body); err == nil {
		body = canonical
	}
	return DefaultFingerprint(r, route, body)
}
