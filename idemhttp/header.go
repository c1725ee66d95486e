package idemhttp

import (
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// hopByHop are headers that describe one connection, never a stored
// answer (RFC 9110 section 7.6.1, and the old proxy ones).
var hopByHop = map[string]bool{
	"Connection":          true,
	"Keep-Alive":          true,
	"Proxy-Connection":    true,
	"Proxy-Authenticate":  true,
	"Proxy-Authorization": true,
	"Te":                  true,
	"Trailer":             true,
	"Transfer-Encoding":   true,
	"Upgrade":             true,
}

// DefaultStoreHeader is the Config.StoreHeader used when none is set: it
// stores every header except Date (the server sends a current one on every
// response), Set-Cookie (a session must not be handed out again, nor kept
// in the database), and Authentication-Info and Proxy-Authentication-Info
// (they belong to one authentication exchange, a next nonce for example).
// To replay cookies as well:
//
//	StoreHeader: func(name string) bool {
//		return name == "Set-Cookie" || idemhttp.DefaultStoreHeader(name)
//	}
func DefaultStoreHeader(name string) bool {
	switch name {
	case "Date", "Set-Cookie", "Authentication-Info", "Proxy-Authentication-Info":
		return false
	}
	return true
}

// neverStored reports the headers no configuration stores: hop-by-hop ones,
// trailers, Content-Length (set from the body when written) and this
// package's own.
func neverStored(name string) bool {
	return hopByHop[name] || strings.HasPrefix(name, http.TrailerPrefix) ||
		name == "Content-Length" || name == HeaderReplayed || name == HeaderRetention
}

// storedHeader is the part of h that is stored and replayed.
func (m *Middleware[TTx]) storedHeader(h http.Header) http.Header {
	listed := connectionTokens(h)
	out := make(http.Header, len(h))
	for name, values := range h {
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if neverStored(canon) || listed[canon] || !m.cfg.StoreHeader(canon) {
			continue
		}
		out[name] = slices.Clone(values)
	}
	return out
}

// connectionTokens returns the header names listed in Connection, which
// are hop-by-hop too.
func connectionTokens(h http.Header) map[string]bool {
	var names map[string]bool
	for _, v := range h.Values("Connection") {
		for token := range strings.SplitSeq(v, ",") {
			if token = strings.TrimSpace(token); token != "" {
				if names == nil {
					names = make(map[string]bool)
				}
				names[textproto.CanonicalMIMEHeaderKey(token)] = true
			}
		}
	}
	return names
}

// writeResponse sends an answer: the header h on top of what w already
// has, Content-Length from the body, then the body. Framing headers the
// server owns (Content-Length, Transfer-Encoding, Trailer) are not copied.
func writeResponse(w http.ResponseWriter, status int, h http.Header, body []byte) {
	if status == idem.NoStatus {
		// A record stored without an HTTP status (by a queue consumer, say)
		// under this scope: "done", with its payload.
		status = http.StatusOK
	}
	dst := w.Header()
	for name, values := range h {
		switch textproto.CanonicalMIMEHeaderKey(name) {
		case "Content-Length", "Transfer-Encoding", "Trailer":
			continue
		}
		dst[name] = slices.Clone(values)
	}
	if bodyAllowed(status) {
		dst.Set("Content-Length", strconv.Itoa(len(body)))
	} else {
		dst.Del("Content-Length")
	}
	w.WriteHeader(status)
	if bodyAllowed(status) && len(body) > 0 {
		_, _ = w.Write(body) // the client is gone if this fails; nothing to undo
	}
}
