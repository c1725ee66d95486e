package idemhttp

import (
	"encoding/hex"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
)

// answeredFormerly answers r from a record stored under the former scope
// form when Config.FormerScopes is set and one holds the key, and reports
// whether it did.
func (m *Middleware[TTx]) answeredFormerly(w http.ResponseWriter, r *http.Request, req idem.Request, route string, body []byte) bool {
	if !m.cfg.FormerScopes {
		return false
	}
	formerRoute := route
	if !m.ownRoute {
		formerRoute = r.Pattern // DefaultRoute kept the pattern's method
	}
	scope := formerScope(m.cfg.Principal(r), r.Method, formerRoute)
	res, found, err := m.store.Answered(r.Context(), scope, req.Key, m.cfg.Fingerprint(r, formerRoute, body))
	switch {
	case err != nil:
		m.failed(w, r, req, err)
		return true
	case !found:
		return false
	}
	m.answer(w, r, req, res, nil, nil)
	return true
}

// formerScope is the scope idem v0.0 built: the method, then the route and
// the principal quoted, or a hash of the three when that was too long.
func formerScope(principal, method, route string) string {
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
