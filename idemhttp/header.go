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

// storedHeader is the part of h that is stored and replayed: not the names
// Connection lists (hop-by-hop too), nor those Trailer lists (trailers).
func (m *Middleware[TTx]) storedHeader(h http.Header) http.Header {
	hop, trailers := headerTokens(h, "Connection"), headerTokens(h, "Trailer")
	out := make(http.Header, len(h))
	for name, values := range h {
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if neverStored(canon) || hop[canon] || trailers[canon] || !m.cfg.StoreHeader(canon) {
			continue
		}
		out[name] = slices.Clone(values)
	}
	return out
}

// headerTokens returns the header names listed in h's field name (such as
// Connection or Trailer), canonical.
func headerTokens(h http.Header, name string) map[string]bool {
	var names map[string]bool
	for _, v := range h.Values(name) {
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
//
// trailer (from recorder.trailer; nil for replays and problems) is sent
// after the body the way the handler set it: h's Trailer declaration and
// the TrailerPrefix names go out with the header, the declared names'
// values after the body, where net/http reads them. With trailers there is
// no Content-Length, so that HTTP/1.1 sends the body chunked, the one
// framing that carries trailers.
func writeResponse(w http.ResponseWriter, status int, h http.Header, body []byte, trailer http.Header) {
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
	switch {
	case !bodyAllowed(status):
		dst.Del("Content-Length")
	case len(trailer) > 0:
		dst.Del("Content-Length")
		if declared := h.Values("Trailer"); len(declared) > 0 {
			dst["Trailer"] = slices.Clone(declared)
		}
		for name, values := range trailer {
			if strings.HasPrefix(name, http.TrailerPrefix) {
				dst[name] = slices.Clone(values)
			}
		}
	default:
		dst.Set("Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	if bodyAllowed(status) && len(body) > 0 {
		_, _ = w.Write(body) // the client is gone if this fails; nothing to undo
	}
	for name, values := range trailer {
		if !strings.HasPrefix(name, http.TrailerPrefix) {
			dst[name] = slices.Clone(values) // after WriteHeader: a trailer, not a header
		}
	}
}
