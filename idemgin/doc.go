// Package idemgin protects gin (github.com/gin-gonic/gin) handlers with
// idemhttp's idempotency middleware: a retried POST with the same
// Idempotency-Key replays the first answer instead of doing the work again,
// and the handler's writes commit in the same transaction as that answer.
//
//	mw, err := idemgin.New(store, idemhttp.Config{Principal: tenantOf})
//	...
//	r.POST("/orders/:id/pay", mw.Wrap(pay))
//	r.POST("/orders/:id/ship", mw.WrapLease(ship)) // calls a carrier's API
//
// Inside the handler, everything gin offers works as usual on the run's
// request and writer: c.Param, c.ShouldBindJSON (on a fresh copy of the
// body), c.JSON, c.AbortWithStatusJSON. The transaction is in the request's
// context:
//
//	tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
//
// # Wrap the handler, not the router
//
// There is no gin middleware (a gin.HandlerFunc for router.Use or
// group.Use), on purpose. When the transaction fails with a retryable
// error (a serialization failure, a deadlock), idem runs it again, handler
// included. A gin middleware reaches the handler through c.Next, which
// advances a position in the chain that gin keeps private: the second
// c.Next finds the chain spent, the handler does not run, and the
// transaction commits with no answer (or the client gets idemhttp's
// "no-response"). Wrap holds the handler itself and calls it once per run.
// router.Use is wrong for a second reason: gin runs the engine's
// middleware for unmatched requests too (NoRoute, NoMethod), where the
// middleware would store gin's 404 as the answer to a key.
//
// Wrap the last handler of a route (a handler after it cannot write: see
// below). The wrapped handler must not call c.Next.
//
// # The route
//
// The scope of a key (idemhttp.Scope) names the route gin matched,
// c.FullPath(), such as "/orders/:id/pay", so one key cannot be replayed
// across endpoints and the same key on another order is a mismatch (422).
// A request with no matched route (a wrapped NoRoute or NoMethod handler)
// has an empty FullPath and gets idemhttp's 500 "route-missing", unless
// idemhttp.Config.Unrouted is set; the pattern of an http.ServeMux that gin
// is mounted under is not used in its place.
//
// # Each run
//
// Every run of the handler gets c.Request set to idemhttp's request (its
// context carries the transaction or lease, its body is a fresh copy) and
// c.Writer set to a fresh gin.ResponseWriter that buffers the answer until
// the commit, so a re-run writes a clean answer of its own. Each run starts
// with c.Errors as it was before the first run: the errors of a discarded
// run are dropped, those of the last run stay for gin. Nothing is sent before the
// commit: Flush sends nothing, Hijack fails with http.ErrNotSupported,
// Pusher is nil and informational (1xx) statuses are dropped. Each run
// also starts with ShouldBindBodyWith's cache (c.Keys[gin.BodyBytesKey]) as
// it was before the first run (see below). Other state of the gin.Context
// (the other Keys, Abort) is not undone between runs.
//
// # A body bound before the handler
//
// A gin middleware that binds with c.ShouldBindBodyWith before the wrapped
// handler (a validation middleware, say) drains c.Request.Body and keeps
// the bytes in c.Keys under gin.BodyBytesKey. Those bytes are then the
// request's body: the middleware fingerprints them (so the same key with
// another body is a mismatch, 422), and every run of the handler gets them
// twice over, as a fresh c.Request.Body and as a fresh copy in
// ShouldBindBodyWith's cache, whatever an earlier run did to either. With
// no body bound before it, every run starts without that cache, as the
// first did.
//
// How a run ends:
//
//   - it wrote an answer (c.JSON, c.String, c.AbortWithStatusJSON, ...):
//     the answer is stored and replayed, unless its status is one idem
//     does not store (5xx, 408, 425, 429), which rolls back, or it then
//     recorded a retryable database error or a lost lease with c.Error
//     (matching idem.ErrSerialization, ErrDeadlock, ErrUnavailable or
//     ErrLeaseLost: a raw driver error is not recognised here), which
//     voids the answer and runs the handler again;
//   - it sent a status without a body (c.AbortWithStatus,
//     c.AbortWithError): that status is the answer, errors or not;
//   - it wrote nothing and recorded errors with c.Error (a failed c.JSON
//     records its error this way): it failed with those errors, as with
//     idemhttp.Fail. The transaction rolls back, a retryable database
//     error among them runs the handler again, and otherwise the client
//     gets 500 "handler-failed". To have a retryable error re-run the
//     handler, record it and return without writing;
//   - it set a status without writing (c.Status(204)) and recorded no
//     error: that status is the answer, as gin would send it;
//   - it wrote nothing at all: idemhttp's "no-response" (500, rolled back),
//     or an empty 200 with idemhttp.Config.ImplicitOK.
//
// After the wrapped handler returns, c.Writer and c.Request are gin's own
// again, and the answer idemhttp sent (the handler's, a replay, a 409, a
// 422 or a problem) went through gin's writer: c.Writer.Status() and Size()
// are that answer's, so gin's logger logs the right code. c.Writer is then
// sealed: a status or write after the answer (a middleware after c.Next
// rendering c.Errors, say) is dropped, and the write fails with
// ErrAnswered, so the client gets exactly what a retry replays.
package idemgin
