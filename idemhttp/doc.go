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
//	any     first request: the handler's answer                yes, unless 5xx,
//	                                                           400, 408, 422,
//	                                                           425, 429 or
//	                                                           NotAnOutcome
//	same    retry of a stored answer: status, headers and      -
//	        body as stored, plus Idempotent-Replayed: true
//	400     Idempotency-Key missing, repeated or malformed     no
//	        (empty, over 255 bytes, not printable ASCII, a
//	        malformed quoted string), or the body could not
//	        be read
//	401     Config.Verify refused the request (its status if   no
//	        it chose one with a VerifyError): "unverified"
//	403     no principal (Config.Principal returned ""), and   no
//	        Config.AllowAnonymous is not set
//	409     another request holds the key (or, on SQLite, the  no
//	        database) past the store's wait bound; Retry-After
//	413     request body over Config.MaxRequestBody, or over   no
//	        a limit before the middleware (http.MaxBytesReader,
//	        a reader failing with an error whose StatusCode()
//	        is 413, as a framework's body limit does)
//	422     the key was used with a different request (another no
//	        resource, query or body)
//	500     the handler called Fail, or its response is too    no (rolled back)
//	        large to store (idem.Config.MaxBody, MaxHeaderBytes)
//	500     a middleware before this one read the body and did no
//	        not restore it ("body-consumed"), or the middleware
//	        of one store is nested in a way that cannot work
//	        ("middleware-nested"); nothing done
//	500     the handler returned without WriteHeader or Write  no (rolled back)
//	        ("no-response"; unless Config.ImplicitOK)
//	500     the handler committed or rolled back the           the handler's
//	        transaction itself ("transaction-ended"; see       writes, if it
//	        idem.TxEndedError): if it committed, retries get   committed
//	        409 until the key expires
//	503     the database failed or a commit's outcome is       no (or unknown)
//	        unknown; Retry-After. Retrying with the same key
//	        is safe: it replays or does the work once
//
// The handler's own answers that are not an outcome are served but rolled
// back, so nothing the handler wrote commits and the next request with the
// key runs the handler again: a status that says "not now" (5xx, 408, 425
// and 429), and one that says the request never began (400 and 422: it
// failed validation; see idem.DefaultStoreStatus and
// idem.Config.StoreStatus). A client that gets a 400 or 422 from the
// handler may correct the request and send it with the same key, as
// Stripe's API allows; idem's own 422 ("key-mismatch") is different: the
// key already holds another request's outcome. A handler marks any other
// answer given before its work began (a 404 for a referenced item that
// does not exist, say) with NotAnOutcome. Every other status, 4xx
// included, commits with the handler's writes and replays.
//
// On PostgreSQL a statement that fails aborts the whole transaction, so a
// handler that catches the error (a unique violation) and answers has
// nothing left to commit (see idem.ErrTxAborted): a 4xx answer is served
// but not stored, rolled back and logged as a WARN, and a retry runs the
// handler again; a 2xx or 3xx answer claims work that was rolled back, so
// the client gets 500 "handler-failed" instead. To store such an answer,
// keep the transaction usable: a savepoint around the statement that may
// fail, or INSERT ... ON CONFLICT DO NOTHING (see docs/backends.md).
// A panic in the handler rolls back and propagates to net/http (or your
// recovery middleware); nothing is stored.
//
// A handler that returns without calling WriteHeader or Write has not
// answered, and nothing is stored for it: its writes roll back, the client
// gets 500 "no-response" and the middleware logs an ERROR, so a retry runs
// it again. This is what a framework that renders a returned error after
// the middleware produces (echo.WrapMiddleware around Wrap, with a handler
// that returns an error): net/http would answer an empty 200, which would
// commit the work and be replayed to every retry. WriteHeader(200) without
// a body, or a Write of no bytes, is an answer: an empty 200, stored and
// replayed. Config.ImplicitOK restores net/http's implicit 200 for
// handlers that answer by writing nothing.
//
// The middleware's own errors are RFC 9457 problem details
// (application/problem+json) with type "about:blank", the status phrase as
// title, a detail for people, and a "code" member for programs:
// "key-missing", "key-invalid", "unverified", "principal-missing", "body-too-large",
// "body-unreadable", "key-mismatch", "in-flight", "database-busy" (a 409
// on SQLite when the wait was for the database's write lock, not for the
// key), "route-missing", "body-consumed", "middleware-nested",
// "response-too-large", "handler-failed", "no-response",
// "transaction-ended", "commit-unknown", "lease-lost", "store-unavailable".
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
// Proxy-Authorization, TE, Trailer, Transfer-Encoding, Upgrade), trailers
// (the names Trailer lists, and http.TrailerPrefix ones), Content-Length
// (always set from the body when written) and the two headers this package
// adds. Config.StoreHeader decides the rest; its default,
// DefaultStoreHeader, also leaves out Date (the server sets a current one
// on every response), Set-Cookie (a session must not be handed out again,
// nor kept in the database), and Authentication-Info and
// Proxy-Authentication-Info (they belong to one authentication exchange).
//
// Trailers reach the first response only. The handler's trailers, declared
// in the Trailer header or set with http.TrailerPrefix, follow its body as
// net/http would send them (that response has no Content-Length, so
// HTTP/1.1 sends it chunked). Replays carry none: a trailer describes one
// transfer (a checksum or a timing taken while the body streamed), any hop
// that removes the chunked framing may drop it, and a stored record keeps
// the status, the header and the body only.
//
// A Content-Type the handler did not set is sniffed the way net/http does
// before the response is stored, so the first answer and its replays agree.
//
// # Scope and fingerprint
//
// A key is looked up within its scope, and a stored record answers only a
// request with the same fingerprint; anything else with that key is a 422.
//
// The scope is the principal (Config.Principal: the authenticated client or
// tenant) first, then the method and the route, as Scope builds it:
//
//	"tenant-7" POST "/invoices/{id}/pay"
//
// (the operation hashed when longer than idem.MaxScopeBytes), so
// idem.ScopePrefix("tenant-7") selects one tenant's records. The route
// (Config.Route) is by default the route a framework adapter set with
// WithRoute, else the ServeMux pattern that matched without its method,
// such as "/invoices/{id}/pay". A protected request without a route (the
// middleware wraps a whole mux, or runs in a router's top-level Use) is
// refused with 500 "route-missing" unless Config.Unrouted is set. The
// route is the pattern, not the concrete path, so a key reused on another
// resource of the same route meets its first use and is a mismatch, never
// a fresh key: keys never collide across clients, methods or routes, and a
// key cannot read another client's answer.
//
// The fingerprint (Config.Fingerprint, by default DefaultFingerprint) covers
// what identifies the resource and the change: the method, the route, the
// host (unless the pattern names one), the escaped path with its wildcard
// values, the raw query and the body bytes (or, for a form a middleware
// before this one parsed, that form). So with the pattern
// "POST /invoices/{id}/pay", a key used to pay invoice 1 and then sent to
// pay invoice 2 gets 422, and invoice 2's handler does not run.
//
// A request whose Principal is "" is refused (403, "principal-missing") and
// logged: the middleware belongs after authentication. Config.AllowAnonymous
// accepts such requests in one shared scope, for endpoints anonymous by
// design.
//
// For clients that re-serialize a JSON body when they retry (another
// property order, other number forms), CanonicalJSONFingerprint hashes the
// body's canonical form (RFC 8785's, with numbers compared by exact
// value) instead of its bytes (opt-in: it changes the fingerprints of JSON
// bodies; see its documentation).
//
// To customise: keep Route a pattern, and make Fingerprint hash everything
// that tells two requests apart, with idem.Hasher. For example, to ignore
// the order of query parameters and hash only the fields that matter:
//
//	Fingerprint: func(r *http.Request, route string, body []byte) idem.Fingerprint {
//		var h idem.Hasher
//		h.AddString(r.Method)
//		h.AddString(route)
//		h.AddString(r.URL.EscapedPath())
//		h.AddString(r.URL.Query().Encode()) // sorted by key
//		h.Add(selectedFields(body))         // yours
//		return h.Sum()
//	}
//
// # Keys on the wire
//
// The Idempotency-Key header carries one key: the bare key as most clients
// send it (order-4711), or an RFC 8941 sf-string as the IETF draft defines
// it ("order-4711", with \" and \\ escapes), which is the same key. A value
// that starts with a double quote but is not a well-formed sf-string (or
// has parameters) is a 400.
//
// # Webhooks
//
// A received webhook is a retry by design: the sender redelivers until it
// gets a 2xx, under its own event id. Config.Key takes the key from where
// the sender puts it (HeaderKeyFunc("X-GitHub-Delivery"),
// JSONKeyFunc("id") for Stripe's event id), Config.Verify checks the
// signature before anything is claimed, a Principal that names the sender
// gives its ids a scope of their own, and TargetFingerprint lets a
// redelivery replay even when its bytes differ. See ExampleJSONKeyFunc,
// ExampleHeaderKeyFunc and docs/webhooks.md.
//
// # Handlers that call out: WrapLease
//
// A handler that calls a payment provider or another service cannot keep
// its effect in one transaction. WrapLease runs it in idem's lease mode
// (idem.Store.DoLease): no transaction is held while it runs; it gets the
// lease with Lease, checks Lease.Step to skip what an earlier attempt
// recorded, records a step after each external call (with that step's own
// writes, Lease.RecordStep) and sends Lease.DownstreamKey(step) as the
// provider's idempotency key. Its answer is stored when it returns, with
// the same answers as Wrap for retries; Fail or a panic release the lease
// and answer 503, a status that is not stored releases it and is served,
// and a retry resumes from the last recorded step. A released lease keeps
// the key for its request, so under WrapLease a corrected request gets 422
// after a plain 400; a handler that answers before its work began calls
// NotAnOutcome, which deletes the lease's record (idem.Lease.Forget) and so
// frees the key, unless a step was recorded. A handler that answers nothing releases the lease
// too, with 500 "no-response" (unless Config.ImplicitOK). While the lease
// is held a retry gets 409 with a Retry-After until the lease ends; a
// handler that outlived its lease while another attempt took the work over
// gets 503 "lease-lost".
//
// # Limits
//
// The response is buffered, so handlers cannot stream, flush, hijack or send
// 1xx informational responses through the middleware. A Flush writes
// nothing (http.ResponseController reports it unsupported) and a 1xx is
// dropped, so a handler that did only these has not answered. If the store
// retries a transaction after a serialization failure or deadlock (see
// Fail), the handler runs again, from a fresh copy of the request body, in
// a new transaction; only the last run's answer is sent.
//
// # Client
//
// Transport is an http.RoundTripper that gives every request with a
// non-safe method one key (NewKey) unless the caller set one (then it keeps
// that), and sends that same key and the same body on every attempt. A key
// made per HTTP call would be a request id and protect nothing; one made
// per RoundTrip is one per intention.
//
// By default (DefaultRetry) it retries every method, GET included, on
// transient network errors (refused, reset or dropped connections,
// timeouts, temporary DNS failures) and on 409, 429, 502, 503 and 504 unless
// the answer is a replay (Idempotent-Replayed: true). An application's own
// 409 is retried too: once against this package's middleware (the retry
// gets the stored 409 replayed), up to MaxAttempts against other servers.
// Transport.Retry replaces the rule (to leave GETs or application 409s
// alone: the middleware's in-flight 409 always carries Retry-After), and
// Transport.OnRetry sees each failed attempt before the wait. Waits are a
// capped, jittered exponential backoff that honours Retry-After.
//
// http.Client.Timeout bounds all attempts and waits together, so it alone
// would end every retry at once: set Transport.AttemptTimeout to bound each
// attempt (up to its response headers; the body stays readable until you
// close it), and Client.Timeout or the request's context for the total.
//
// When it stops, RoundTrip returns the last response whenever the last
// attempt got one (a retryable status included, body intact; its Request
// carries the key), and otherwise an *AbandonedError (inside the
// *url.Error of http.Client) with the Key, the Attempts, the last Status
// and the last error, wrapping ctx.Err() when the context ended. To resume
// an abandoned intention, send it again with that key in the
// Idempotency-Key header: the server replays the first answer or does the
// work once.
package idemhttp
