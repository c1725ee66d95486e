package idemecho

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// Middleware is idemhttp's middleware for echo: it runs echo handlers inside
// the idempotent transactions of one Store. It is safe for concurrent use;
// one Middleware may protect many routes and groups.
type Middleware[TTx any] struct {
	http   *idemhttp.Middleware[TTx]
	logger *slog.Logger // Config.Logger; nil for slog.Default()
}

// New returns a Middleware on store, configured as idemhttp.New configures
// its own; it fails with idemhttp.New's errors (wrapping
// idem.ErrInvalidConfig). Config.Route may stay nil: the adapter hands
// idemhttp the route template echo matched (c.Path(), "/orders/:id").
func New[TTx any](store *idem.Store[TTx], cfg idemhttp.Config) (*Middleware[TTx], error) {
	m, err := idemhttp.New(store, cfg)
	if err != nil {
		return nil, fmt.Errorf("idemecho: %w", err)
	}
	return &Middleware[TTx]{http: m, logger: cfg.Logger}, nil
}

// Wrap returns the echo middleware that runs the handler in one transaction
// (idemhttp.Middleware.Wrap). Install it on routes or groups:
//
//	e.POST("/orders", createOrder, mw.Wrap())
//	v1 := e.Group("/v1", mw.Wrap())
//
// In the handler, idemhttp.Tx[TTx](c.Request().Context()) is the
// transaction its writes belong in. The handler must be re-runnable: a
// retryable database error runs it again, on a fresh response and body.
func (m *Middleware[TTx]) Wrap() echo.MiddlewareFunc {
	return m.adapt(m.http.Wrap, func(ctx context.Context) bool {
		_, ok := idemhttp.Tx[TTx](ctx)
		return ok
	})
}

// WrapLease is Wrap in lease mode (idemhttp.Middleware.WrapLease), for
// handlers that call something outside the database: no transaction is held
// while the handler runs; it gets the lease with
// idemhttp.Lease[TTx](c.Request().Context()) and records a step after each
// external call.
func (m *Middleware[TTx]) WrapLease() echo.MiddlewareFunc {
	return m.adapt(m.http.WrapLease, func(ctx context.Context) bool {
		_, ok := idemhttp.Lease[TTx](ctx)
		return ok
	})
}

// adapt turns one of idemhttp's wrappers into an echo middleware. protected
// reports whether a run of the handler is inside the store (a transaction
// or a lease) rather than passed through (a method that needs no key).
func (m *Middleware[TTx]) adapt(wrap func(http.Handler) http.Handler, protected func(context.Context) bool) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			route := c.Path()
			if routerFallback(next) || (route != "" && routerFallback(c.Handler())) {
				// echo's router answers 404 or 405 here (no route matched
				// under e.Use, a group's catch-all route, a path registered
				// for other methods): no endpoint, so nothing to protect,
				// key or not. With no route, only next tells: before
				// routing (e.Pre) c.Handler() is echo's 404 handler too.
				return next(c)
			}
			outerReq, outerResp := c.Request(), c.Response()
			// Later echo code (the middleware around this one, a recover
			// middleware after a panic) sees c as it was, with the response
			// idemhttp wrote the final answer to.
			defer func() {
				c.SetRequest(outerReq)
				c.SetResponse(outerResp)
			}()
			var passed error // next's error when idemhttp passed the request through
			h := wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !protected(r.Context()) {
					// Passed through: the body is echo's, as without
					// idem (its errors unchanged by withStatusBody).
					r.Body = outerReq.Body
					c.SetRequest(r)
					passed = next(c) // echo renders it, as without idem
					return
				}
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(runWriter{w}, c.Echo()))
				m.run(c, next, w, r)
			}))
			req := idemhttp.WithRoute(outerReq, route)
			if route == "" {
				// No echo route matched (or none yet, under e.Pre): the
				// pattern of a ServeMux that echo is mounted under is not
				// this endpoint's route, and must not stand in for it
				// (idemhttp then answers "route-missing").
				req.Pattern = ""
			}
			h.ServeHTTP(outerResp, withStatusBody(req))
			return passed
		}
	}
}

// run runs the handler once inside the store, on a fresh echo.Response over
// w, and turns the error it returns into an answer or a failure.
func (m *Middleware[TTx]) run(c echo.Context, next echo.HandlerFunc, w http.ResponseWriter, r *http.Request) {
	err := next(c)
	switch {
	case err == nil:
	case c.Response().Committed:
		// The handler answered and then failed: its answer cannot be
		// trusted to describe what it did, so none is stored.
		idemhttp.Fail(w, r, fmt.Errorf("idemecho: handler returned an error after writing its %d response: %w", c.Response().Status, err))
	case rendered(err):
		// An answer: echo's error handler writes it inside the
		// transaction, where it is stored (or, for 5xx, 408, 425 and
		// 429, served and rolled back) like any response the handler
		// writes. A 503 stays a 503, which clients retry.
		c.Error(err)
		if status := c.Response().Status; status >= http.StatusInternalServerError {
			m.log().LogAttrs(r.Context(), slog.LevelError, "idemecho: handler returned a server error, rendered as its answer",
				slog.Int("status", status), slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
		}
	default:
		idemhttp.Fail(w, r, err)
	}
}

// log returns the logger idemhttp.Config named, or slog.Default().
func (m *Middleware[TTx]) log() *slog.Logger {
	if m.logger != nil {
		return m.logger
	}
	return slog.Default()
}

// rendered reports whether err is an answer that echo's HTTPErrorHandler
// renders inside the transaction: an *echo.HTTPError (c.Bind's errors are
// ones) that does not carry a database error the store retries or a lost
// lease. Everything else fails the run.
func rendered(err error) bool {
	var he *echo.HTTPError
	if !errors.As(err, &he) {
		return false
	}
	return !errors.Is(err, idem.ErrSerialization) && !errors.Is(err, idem.ErrDeadlock) &&
		!errors.Is(err, idem.ErrUnavailable) && !errors.Is(err, idem.ErrLeaseLost)
}

// routerFallback reports whether h is the handler echo's router picks for a
// request no route answers (echo.NotFoundHandler, also behind a group's
// catch-all route) or one registered for other methods only
// (echo.MethodNotAllowedHandler). Func values do not compare, so their code
// pointers do.
func routerFallback(h echo.HandlerFunc) bool {
	if h == nil {
		return false
	}
	p := reflect.ValueOf(h).Pointer()
	return p == reflect.ValueOf(echo.NotFoundHandler).Pointer() ||
		p == reflect.ValueOf(echo.MethodNotAllowedHandler).Pointer()
}
