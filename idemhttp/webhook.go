package idemhttp

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/idemkit/idem"
)

// VerifyFunc checks that a protected request comes from whom it claims to,
// typically a webhook's signature over its body (see Config.Verify). It
// gets the request and its whole body (r.Body must not be read), and
// returns nil for a request to serve, or an error to refuse it: 401, unless
// the error is (or wraps) a *VerifyError that names another status. A
// signature covers the bytes as sent: when a middleware before this one
// parsed the form, body is the form's encoding instead (see
// Config.Fingerprint), so install this middleware before any that parses
// or decodes the body.
type VerifyFunc func(r *http.Request, body []byte) error

// VerifyError is an error a VerifyFunc returns to choose the status of the
// refusal: 400 for a malformed signature header, 403, or 503 while the
// secret cannot be loaded, so that the sender tries again later.
type VerifyError struct {
	// Status is the status of the answer, 400 to 599; any other value
	// means 401.
	Status int
	// Err says why, for the log; the sender does not see it.
	Err error
}

// Error says the request was not verified, with the status and the reason.
func (e *VerifyError) Error() string {
	return fmt.Sprintf("idemhttp: request not verified (%d): %v", e.Status, e.Err)
}

// Unwrap returns Err, for errors.Is and errors.As.
func (e *VerifyError) Unwrap() error { return e.Err }

// verified runs Config.Verify on a protected request, before its key is
// read or claimed. A request that fails it is answered with a problem
// (status from the error, 401 by default; code "unverified"), logged at
// WARN with the error, and reports false: nothing is claimed or stored,
// so a forged request can neither take a key nor burn it for the real one.
func (m *Middleware[TTx]) verified(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if m.cfg.Verify == nil {
		return true
	}
	err := m.cfg.Verify(r, body)
	if err == nil {
		return true
	}
	status := http.StatusUnauthorized
	var ve *VerifyError
	if errors.As(err, &ve) && ve.Status >= 400 && ve.Status <= 599 {
		status = ve.Status
	}
	m.logger().LogAttrs(r.Context(), slog.LevelWarn, "idemhttp: refused a request that failed verification; nothing claimed",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Int("status", status), slog.Any("error", err))
	// The reason stays in the log: a forger learns nothing from the answer.
	writeProblem(w, status, "unverified",
		"This request could not be verified (its signature, for one), so it was refused. Nothing was done.")
	return false
}

// TargetFingerprint is a Config.Fingerprint for requests whose key alone
// names what they ask, as a webhook's event id does: it hashes what
// DefaultFingerprint hashes but the body (the method, the route, the host,
// the path and the query; idem.Hasher). Use it with a Config.Key that reads
// the sender's event id, behind Config.Verify: a redelivery is then a
// replay even when its bytes differ from the first delivery's (a sender
// that re-serialises the event or stamps each attempt), where
// DefaultFingerprint would answer 422 and the sender would keep
// redelivering; the same id sent to another target (another tenant's
// /webhooks/{tenant}) is still a mismatch, never a replay of the first
// target's answer. Do not use it for keys that clients make: a key reused
// with another body would replay the first one's answer.
func TargetFingerprint(r *http.Request, route string, _ []byte) idem.Fingerprint {
	var h idem.Hasher
	h.AddString("idemhttp target")
	addTarget(&h, r, route)
	return h.Sum()
}
