package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// KeyFunc returns the idempotency key of a protected request, from wherever
// its sender puts it: a header, a field of the body. It gets the request
// and its whole body (read up to Config.MaxRequestBody; r.Body must not be
// read). It fails with an error wrapping ErrKeyMissing when the request
// carries no key, and with any other error when the key is there but not
// usable; either way the request is answered 400 and nothing is claimed.
// The key it returns is checked with idem.ValidateKey as well.
//
// When a middleware before this one parsed the form, body is the form's
// encoding (see Config.Fingerprint), not the bytes sent.
type KeyFunc func(r *http.Request, body []byte) (string, error)

// ErrKeyMissing is what a KeyFunc returns (wrapped) for a request without a
// key: the answer is 400 "key-missing" instead of "key-invalid".
var ErrKeyMissing = errors.New("idemhttp: no idempotency key")

// HeaderKeyFunc returns a KeyFunc that takes the key from the header name,
// as sent: "X-GitHub-Delivery" for GitHub, "webhook-id" for senders that
// follow Standard Webhooks (Svix among them). The header must be there
// exactly once. Unlike the Idempotency-Key header (DefaultKey), the value
// is not parsed as a quoted string.
func HeaderKeyFunc(name string) KeyFunc {
	return func(r *http.Request, _ []byte) (string, error) {
		values := r.Header.Values(name)
		switch len(values) {
		case 0:
			return "", fmt.Errorf("%w: no %s header", ErrKeyMissing, name)
		case 1:
			return values[0], nil
		default:
			return "", fmt.Errorf("%w: %d %s headers, want one", idem.ErrInvalidKey, len(values), name)
		}
	}
}

// JSONKeyFunc returns a KeyFunc that takes the key from a field of a JSON
// object body: JSONKeyFunc("id") for Stripe's event id, JSONKeyFunc("data",
// "id") for a field of a nested object. The field must be a string or a
// number (whose key is the number as written, so the number 1 and the
// string "1" are one key). A body that is not a JSON
// object, or where the path leads through something that is not an object,
// is refused with an error wrapping idem.ErrInvalidKey; a path that ends
// nowhere, or in null, with one wrapping ErrKeyMissing. It panics without
// a path: that is a mistake in the program, not in a request.
func JSONKeyFunc(path ...string) KeyFunc {
	if len(path) == 0 {
		panic("idemhttp: JSONKeyFunc needs the name of the field that holds the key")
	}
	path = append([]string(nil), path...)
	where := strings.Join(path, ".")
	return func(_ *http.Request, body []byte) (string, error) {
		raw := json.RawMessage(body)
		for i, name := range path {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
				if i == 0 {
					return "", fmt.Errorf("%w: the body is not a JSON object, so it has no field %q", idem.ErrInvalidKey, where)
				}
				return "", fmt.Errorf("%w: %q is not a JSON object, so it has no field %q", idem.ErrInvalidKey, strings.Join(path[:i], "."), where)
			}
			v, ok := obj[name]
			if !ok {
				return "", fmt.Errorf("%w: the body has no field %q", ErrKeyMissing, where)
			}
			raw = v
		}
		raw = bytes.TrimSpace(raw)
		switch {
		case bytes.Equal(raw, []byte("null")):
			return "", fmt.Errorf("%w: the body's field %q is null", ErrKeyMissing, where)
		case len(raw) > 0 && raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", fmt.Errorf("%w: the body's field %q: %w", idem.ErrInvalidKey, where, err)
			}
			return s, nil
		case len(raw) > 0 && (raw[0] == '-' || '0' <= raw[0] && raw[0] <= '9'):
			return string(raw), nil // json.Unmarshal checked it is a JSON value
		}
		return "", fmt.Errorf("%w: the body's field %q is not a string or a number", idem.ErrInvalidKey, where)
	}
}

// DefaultKey reads the key as the middleware does when Config.Key is nil:
// the Idempotency-Key header, once, as the bare key or the IETF draft's
// quoted sf-string; its errors wrap idem.ErrInvalidKey, or ErrKeyMissing
// when the header is absent. It is there for KeyFuncs that fall back to
// it. (With Config.Key nil, the header is read before the body, so a
// request without a key gets 400 whatever its body.)
func DefaultKey(r *http.Request, _ []byte) (string, error) {
	key, err := keyFrom(r.Header)
	if errors.Is(err, errNoKey) {
		return "", fmt.Errorf("%w: %w", ErrKeyMissing, err)
	}
	return key, err
}

// requestKey reads a protected request's key with Config.Key (or
// DefaultKey), validates it and, when it is missing or unusable, answers
// 400 and reports false. The answers for the Idempotency-Key header name
// it; those of a Config.Key name what it said.
func (m *Middleware[TTx]) requestKey(w http.ResponseWriter, r *http.Request, body []byte) (string, bool) {
	if m.cfg.Key == nil {
		key, err := keyFrom(r.Header)
		switch {
		case errors.Is(err, errNoKey):
			writeProblem(w, http.StatusBadRequest, "key-missing",
				"This request needs an Idempotency-Key header: make one key for this operation and send it again on every retry of it.")
			return "", false
		case err != nil:
			reason := strings.TrimPrefix(err.Error(), idem.ErrInvalidKey.Error()+": ")
			writeProblem(w, http.StatusBadRequest, "key-invalid",
				fmt.Sprintf("The Idempotency-Key header is not usable (%s). A key is 1 to %d bytes of printable ASCII, sent once.", reason, idem.MaxKeyBytes))
			return "", false
		}
		return key, true
	}
	key, err := m.cfg.Key(r, body)
	if err == nil {
		err = idem.ValidateKey(key)
	}
	switch {
	case errors.Is(err, ErrKeyMissing):
		writeProblem(w, http.StatusBadRequest, "key-missing",
			fmt.Sprintf("This request carries no idempotency key (%s). Nothing was done.", keyReason(err)))
		return "", false
	case err != nil:
		writeProblem(w, http.StatusBadRequest, "key-invalid",
			fmt.Sprintf("This request's idempotency key is not usable (%s). A key is 1 to %d bytes of printable ASCII. Nothing was done.", keyReason(err), idem.MaxKeyBytes))
		return "", false
	}
	return key, true
}

// keyReason is a key error's message without the sentinels' prefixes.
func keyReason(err error) string {
	s := err.Error()
	for _, prefix := range []string{ErrKeyMissing.Error() + ": ", idem.ErrInvalidKey.Error() + ": "} {
		s = strings.TrimPrefix(s, prefix)
	}
	return s
}
