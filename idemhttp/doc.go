// Package idemhttp puts idem in front of net/http handlers, and gives
// clients the other half of the contract: one key per intention, reused on
// every retry.
//
// # Server
//
// A Middleware wraps the handlers of non-safe methods (POST and PATCH by
// default). For each request it reads the Idempotency-Key header, reads the
// body (up to Config.MaxRequestBody), and runs the handler inside
// idem.Store.Do: the handler gets the transaction from the request context
// with Tx, writes its effect in it, and answers as usual. The answer is
// buffered, stored in the same transaction as the effect, and written to the
// client only after the commit. A retry with the same key replays it.
//
//	mw, err := idemhttp.New(store, idemhttp.Config{Principal: tenantOf})
//	mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(createOrder)))
//
//	func createOrder(w http.ResponseWriter, r *http.Request) {
//		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
//		... tx.ExecContext(r.Context(), "INSERT INTO orders ...") ...
//	}
//
// What a client sees on a protected request:
//
//	status  when                                               stored
//	------  -------------------------------------------------  ------
//	any     first request: the handler's answer                yes, unless 5xx
//	same    retry of a stored answer: status, headers and      -
//	        body as stored, plus Idempotent-Replayed: true
//	400     Idempotency-Key missing, repeated or malformed     no
//	        (empty, over 255 bytes, not printable ASCII), or
//	        the body could not be read
//	409     another request holds the key (or, on SQLite, the  no
//	        database) past the store's wait bound; Retry-After
//	413     request body over Config.MaxRequestBody            no
//	422     the key was used with a different request          no
//	500     the handler called Fail, or its response is too    no (rolled back)
//	        large to store (idem.Config.MaxBody, MaxHeaderBytes)
//	503     the database failed or a commit's outcome is       no (or unknown)
//	        unknown; Retry-After. Retrying with the same key
//	        is safe: it replays or does the work once
//
// The handler's own 5xx answers are served but rolled back (see
// idem.Config.StoreServerErrors), so a retry runs the handler again; every
// other status, 4xx included, commits with the handler's writes and replays.
// A panic in the handler rolls back and propagates to net/http (or your
// recovery middleware); nothing is stored.
//
// The middleware's own errors are RFC 9457 problem details
// (application/problem+json) with type "about:blank", the status phrase as
// title, a detail for people, and a "code" member for programs:
// "key-missing", "key-invalid", "body-too-large", "body-unreadable",
// "key-mismatch", "in-flight", "response-too-large", "handler-failed",
// "commit-unknown", "store-unavailable".
//
// # Retention
//
// Every response to a protected request carries Idempotency-Retention: the
// store's retention window in whole seconds (idem.Config.Retention, 86400 by
// default). Within the window a retry replays; after it, the key is free
// and a retry does the work again. It is part of your API contract: say it
// in your API's documentation too.
//
// # Headers on replay
//
// Headers are filtered before they are stored, not at replay: the first
// response carries everything the handler set, and every replay carries the
// stored subset. Never stored: hop-by-hop headers (Connection and the names
// it lists, Keep-Alive, Proxy-Connection, Proxy-Authenticate,
// Proxy-Authorization, TE, Trailer, Transfer-Encoding, Upgrade), trailers,
// Content-Length (always set from the body when written) and the two
// headers this package adds. Config.StoreHeader decides the rest; its
// default, DefaultStoreHeader, also leaves out Date (the server sets a
// current one on every response) and Set-Cookie (a session must not be
// handed out again, nor kept in the database).
//
// A Content-Type the handler did not set is sniffed the way net/http does
// before the response is stored, so the first answer and its replays agree.
//
// # Scope and fingerprint
//
// Keys are scoped by Config.Principal (the authenticated client or tenant),
// the method and the route (Config.Route, by default the ServeMux pattern
// that matched, else the URL path), so keys never collide across clients or
// endpoints and a key cannot read another client's answer. The fingerprint
// (Config.Fingerprint) is by default the method, route, raw query and body
// bytes: the same key with another body or query is a 422, not a retry.
//
// # Limits
//
// The response is buffered, so handlers cannot stream, flush, hijack or send
// 1xx informational responses through the middleware. If the store retries a
// transaction after a serialization failure or deadlock (see Fail), the
// handler runs again, from a fresh copy of the request body, in a new
// transaction; only the last run's answer is sent.
//
// # Client
//
// Transport is an http.RoundTripper that gives every request with a
// non-safe method one key (NewKey) unless the caller set one, and retries it
// with that same key and the same body on network errors, 409, 429, 502, 503
// and 504, with capped, jittered exponential backoff that honours
// Retry-After, within the request's context and Transport.MaxAttempts. A key
// made per HTTP call would be a request id and protect nothing; one made per
// RoundTrip is one per intention.
package idemhttp
