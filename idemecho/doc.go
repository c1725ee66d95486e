// Package idemecho installs idemhttp's idempotency middleware in echo
// (github.com/labstack/echo/v4) the way echo works: as an
// echo.MiddlewareFunc on routes and groups, with the echo handler running
// inside idem's transaction and the errors it returns rendered or rolled
// back there.
//
//	mw, err := idemecho.New(store, idemhttp.Config{Principal: tenantOf})
//	...
//	e.POST("/orders/:id/pay", pay, mw.Wrap())   // one route
//	v1 := e.Group("/v1", auth, mw.Wrap())        // or a group, after auth
//
//	func pay(c echo.Context) error {
//		tx, _ := idemhttp.Tx[*sql.Tx](c.Request().Context())
//		// write with tx, then answer as usual:
//		return c.JSON(http.StatusCreated, receipt)
//	}
//
// # Where to install it
//
// On routes (e.POST(path, h, mw.Wrap())) and groups (e.Group(prefix,
// mw.Wrap()), g.Use(mw.Wrap())): there echo has matched the route, and the
// adapter hands idemhttp its template (c.Path(), "/orders/:id") with
// idemhttp.WithRoute, so the scope and the fingerprint name the resource:
// idemhttp.Scope(principal, "POST", "/orders/:id") finds a record.
//
// Not with e.Pre: pre-middleware runs before routing, c.Path() is empty, and
// idemhttp refuses protected requests there with 500 "route-missing" (and an
// ERROR log), rather than protect every route under one scope. e.Use runs
// after routing and works for the routes that match; a request that no
// route matches is echo's 404, untouched, when Wrap() is the last
// middleware of e.Use (it then calls echo's 404 handler itself). After
// another e.Use middleware it cannot tell, and a protected request there
// gets 500 "route-missing" instead; prefer routes and groups.
//
// When echo is mounted under an http.ServeMux (mux.Handle("/api/", e)), the
// route is always echo's: the mux's pattern ("/api/") never stands in for
// it, so a request no echo route matches is never protected, stored or
// replayed under it.
//
// Requests echo's router answers itself, with echo.NotFoundHandler (also
// behind a group's catch-all route) or echo.MethodNotAllowedHandler, are
// passed to echo untouched: no key is required, nothing is stored. In a
// group this needs Wrap() to be the group's last middleware: echo wraps
// the catch-all in the group's middleware, and Wrap() recognises the
// router's handler only as the one it calls. Placed earlier, a keyless
// POST to a mistyped path of the group gets 400 "key-missing", and one
// with a key has echo's 404 stored under the catch-all's scope (its
// fingerprint holds the path, so no other path ever replays it).
// A handler registered with RouteNotFound is a handler like any other.
//
// # The handler runs inside the transaction
//
// Under Wrap the echo handler (with the route middleware after this one)
// runs inside the store's transaction; under WrapLease, under its lease.
// For that run c.Request() is the request idemhttp hands the handler: its
// context holds the transaction (idemhttp.Tx) or the lease (idemhttp.Lease),
// and its body is a fresh copy, so c.Bind reads it again. c.Response() is a
// fresh echo.Response over idemhttp's buffer: c.JSON, c.String, c.Blob and
// the rest write into it, and it reaches the client only once the answer
// is stored. Nothing is sent before: c.Response().Flush sends nothing (a
// handler that only flushed has not answered), and Hijack fails with
// http.ErrNotSupported. c.Param, c.QueryParam and c.Get work as usual.
//
// echo's BodyLimit middleware before Wrap() works as without idem: a body
// over its limit gets 413 ("body-too-large", before anything is claimed),
// also one sent chunked, whose size only shows while idemhttp reads it.
//
// The handler must be re-runnable: on a retryable database error
// (idem.ErrSerialization, ErrDeadlock, ErrUnavailable), whether the handler
// returns it or reports it with idemhttp.Fail, the store rolls back and runs
// the whole transaction again, handler included, on a new response and body.
// Values the handler put in the echo.Context with c.Set stay from one run to
// the next; do not let a run depend on them.
//
// # The errors a handler returns
//
//   - an *echo.HTTPError (echo.NewHTTPError(409, ...), echo.ErrNotFound,
//     c.Bind's errors, which are HTTPErrors, and a 503 for a dependency
//     that is down) is an answer: echo's HTTPErrorHandler renders it inside
//     the transaction (c.Error), and the store treats it as any response
//     the handler writes. A 4xx is stored and replayed, and what the
//     handler wrote to the database commits with it. So a handler that
//     INSERTs and then returns 409 commits its INSERT with the stored 409:
//     the answer a retry replays and the database agree. Check before you
//     write, or return one of the errors below, when a 4xx must leave
//     nothing behind. 400 and 422 say the request never began: they are
//     served but rolled back and not stored, so the client may correct
//     the request and send it with the same key; call
//     idemhttp.NotAnOutcome(c.Request()) before returning another status
//     that means the same (a 404 for an unknown item, say). 408, 425, 429
//     and every 5xx are served with their
//     status but rolled back and not stored (idem.Config.StoreStatus;
//     under WrapLease the lease is released, its recorded steps kept), and
//     a 5xx is logged with its error. So a 503 (with the Retry-After the
//     handler set on c.Response().Header()) reaches the client as a 503,
//     which idemhttp.Transport retries with the same key.
//   - anything else (plain errors, an HTTPError carrying a retryable
//     database error or idem.ErrLeaseLost, any error returned after the
//     handler already wrote its response) fails the run as idemhttp.Fail
//     does: everything rolls back and nothing is stored; a retryable
//     database error runs the handler again, any other one answers 500
//     "handler-failed" (503 under WrapLease, whose recorded steps are kept)
//     and is logged.
//
// Once idemhttp has written the final answer (the handler's, a replay with
// Idempotent-Replayed: true, 422 for another request with the same key, 409
// while it is in flight), the middleware restores c's request and response
// (committed, with that answer's status) and returns nil, so echo renders
// nothing more; the middleware around it sees the final status in
// c.Response().Status. A panic in the handler rolls back, nothing is
// stored, and it propagates to echo's Recover middleware with c restored.
//
// Requests whose method needs no key (by default all but POST and PATCH,
// see idemhttp.Config.Methods) go to the handler untouched, and echo renders
// their errors as usual.
//
// echo.WrapMiddleware(idemhttpMiddleware.Wrap) is not a substitute: echo
// renders the handler's error after the middleware has finished, so the
// transaction sees no answer (idemhttp rolls back with 500 "no-response").
package idemecho
