package idemgin

import (
	"context"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Middleware wraps gin handlers in idemhttp's idempotent transactions of one
// Store. It is safe for concurrent use; one Middleware may wrap many
// handlers.
type Middleware[TTx any] struct {
	http *idemhttp.Middleware[TTx]
}

// New returns a Middleware on store, configured as idemhttp.New is (cfg's
// Route, when nil, is idemhttp.DefaultRoute, which sees gin's FullPath). It
// fails, with an error wrapping idem.ErrInvalidConfig, where idemhttp.New
// does.
func New[TTx any](store *idem.Store[TTx], cfg idemhttp.Config) (*Middleware[TTx], error) {
	mw, err := idemhttp.New(store, cfg)
	if err != nil {
		return nil, err
	}
	return &Middleware[TTx]{http: mw}, nil
}

// Wrap returns h protected by the middleware, as idemhttp's Wrap protects
// an http.Handler: a request with a configured method needs a key and runs
// h inside the store's transaction (idemhttp.Tx), once per run of the
// transaction; other requests go straight to h. Register the result as the
// last handler of a route: r.POST("/orders/:id/pay", mw.Wrap(pay)).
func (m *Middleware[TTx]) Wrap(h gin.HandlerFunc) gin.HandlerFunc {
	return m.wrap(h, m.http.Wrap, func(ctx context.Context) bool {
		_, ok := idemhttp.Tx[TTx](ctx)
		return ok
	})
}

// WrapLease is Wrap in lease mode (idemhttp's WrapLease), for handlers that
// call something outside the database: no transaction is held while h
// runs; h gets the lease with idemhttp.Lease and records a step after each
// external call.
func (m *Middleware[TTx]) WrapLease(h gin.HandlerFunc) gin.HandlerFunc {
	return m.wrap(h, m.http.WrapLease, func(ctx context.Context) bool {
		_, ok := idemhttp.Lease[TTx](ctx)
		return ok
	})
}

// wrap adapts h to protect, an idemhttp wrapper; inRun tells a run of the
// middleware from a request it passes through.
func (m *Middleware[TTx]) wrap(h gin.HandlerFunc, protect func(http.Handler) http.Handler, inRun func(context.Context) bool) gin.HandlerFunc {
	if h == nil {
		panic("idemgin: nil handler")
	}
	return func(c *gin.Context) {
		ginWriter, ginRequest := c.Writer, c.Request
		// Inside a run of this middleware already (Wrap of a Wrap): the
		// outer run owns the answer; idemhttp passes the request through
		// (or refuses it), and h then writes to the outer run's writer.
		outer := m.inAnyRun(ginRequest.Context())
		passed, answered := false, false
		defer func() {
			c.Writer, c.Request = ginWriter, ginRequest
			if answered {
				c.Writer = sealedWriter{ginWriter}
			}
		}()
		base := len(c.Errors)
		bound := boundBodyOf(c)
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if outer || !inRun(r.Context()) {
				// A method the middleware does not protect, or a request
				// an outer run protects: gin's writer as it stands, and
				// the outer run's transaction, if any.
				passed = true
				c.Writer, c.Request = ginWriter, r
				h(c)
				return
			}
			runOnce(c, h, w, r, base, bound)
		})
		route := c.FullPath()
		r := bound.request(idemhttp.WithRoute(ginRequest, route))
		if route == "" {
			// No gin route matched: the pattern of a ServeMux that gin is
			// mounted under is not this endpoint's route, and must not
			// stand in for it (idemhttp then answers "route-missing").
			r.Pattern = ""
		}
		// idemhttp's final answer goes through gin's writer, so that gin
		// (its logger, c.Writer.Status) sees the status that was sent.
		protect(next).ServeHTTP(ginWriter, r)
		if !passed && !outer {
			// The answer is final (and may be stored): send its header
			// now, and seal c.Writer (above), so that a later status or
			// write (a middleware's, after c.Next) cannot make the
			// client's answer differ from the stored one. After a panic
			// nothing was answered, and gin's Recovery may answer.
			ginWriter.WriteHeaderNow()
			answered = true
		}
	}
}

// inAnyRun reports whether ctx is a run's of a middleware of this
// transaction type: Wrap's (a transaction) or WrapLease's (a lease).
func (m *Middleware[TTx]) inAnyRun(ctx context.Context) bool {
	_, tx := idemhttp.Tx[TTx](ctx)
	_, lease := idemhttp.Lease[TTx](ctx)
	return tx || lease
}

// runOnce runs h once inside the middleware, on w and r, the buffer and
// request idemhttp made for this run; base is how many errors c held
// before the first run, bound the body a middleware bound before it.
func runOnce(c *gin.Context, h gin.HandlerFunc, w http.ResponseWriter, r *http.Request, base int, bound boundBody) {
	c.Errors = c.Errors[:base]
	bound.reset(c)
	rw := newRunWriter(r.Context(), w)
	defer rw.close()
	c.Writer, c.Request = rw, r
	h(c)
	switch {
	case len(c.Errors) > base && (!rw.Written() || voids(c.Errors[base:])):
		idemhttp.Fail(w, r, runError(c.Errors[base:]))
	case rw.Written():
	case rw.explicit:
		// c.Status without a body: gin sends it once the chain has run.
		rw.WriteHeaderNow()
	}
}

// voids reports whether errs hold an error that voids an answer already
// written: a retryable database error (idem.ErrSerialization, ErrDeadlock,
// ErrUnavailable) or a lost lease, after which the run's writes cannot
// commit with it. Other errors recorded beside an answer (c.AbortWithError,
// an error kept for a logging middleware) leave the answer standing.
func voids(errs []*gin.Error) bool {
	for _, e := range errs {
		if errors.Is(e, idem.ErrSerialization) || errors.Is(e, idem.ErrDeadlock) ||
			errors.Is(e, idem.ErrUnavailable) || errors.Is(e, idem.ErrLeaseLost) {
			return true
		}
	}
	return false
}

// runError is the error of a run that recorded errs with c.Error and wrote
// nothing: the one error, or all of them joined (errors.Is sees each).
func runError(errs []*gin.Error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}
