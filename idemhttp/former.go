package idemhttp

import (
	"encoding/hex"
	"net/http"
	"strconv"

	"github.com/idemkit/idem"
)

// formerly answers r from a record stored under the former scope form
// when Config.FormerScopes is set and one holds the key, and reports
// whether it did. Under WrapLease, a pending former record whose lease
// ended (its holder crashed or failed, keeping its steps) is not answered
// but returned, to be resumed under its own scope by the caller; otherwise
// req comes back as it was.
func (m *Middleware[TTx]) formerly(w http.ResponseWriter, r *http.Request, req idem.Request, route string, body []byte, leased bool) (idem.Request, bool) {
	if !m.cfg.FormerScopes {
		return req, false
	}
	formerRoute := route
	if !m.ownRoute {
		formerRoute = r.Pattern // DefaultRoute kept the pattern's method
	}
	former := idem.Request{
		Scope:       formerScope(m.cfg.Principal(r), r.Method, formerRoute),
		Key:         req.Key,
		Fingerprint: m.cfg.Fingerprint(r, formerRoute, body),
	}
	res, found, err := m.store.Answered(r.Context(), former.Scope, former.Key, former.Fingerprint)
	switch {
	case err != nil:
		m.failed(w, r, req, err)
		return req, true
	case !found:
		return req, false
	case leased && res.Outcome == idem.InFlight && res.Record.LeaseExpired:
		return former, false
	}
	m.answer(w, r, req, res, nil, nil)
	return req, true
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
