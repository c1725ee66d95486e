package idemhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
)

// errNested is the failure of a protected request that reached a second
// middleware it cannot pass through (see Middleware.nesting).
var errNested = errors.New("idemhttp: middleware nested on one route")

// nesting tells whether r already runs inside a run of a store, and what
// this middleware (under WrapLease when leased) does with it: pass it
// through (err nil), or refuse it (err wraps errNested and says why).
//
// Inside a run of its own store in the same mode (Wrap in Wrap, WrapLease
// in WrapLease: a group's middleware and the route's, two Middlewares of
// one Store), the outer run already protects the request: the handler
// runs once, in the outer run's transaction or lease, and its answer is
// stored once. Claiming the key again would wait on the outer run's own
// claim and answer 409, which the outer run would store.
//
// Everything else is refused: the other mode of the same store (the
// handler would miss the transaction or lease it expects), a Wrap of
// another Store (one request would claim its key in two stores, and the
// handler would see the inner transaction only), and a request inside a
// function the store's Do or DoLease runs without this package.
func (m *Middleware[TTx]) nesting(ctx context.Context, leased bool) (inside bool, err error) {
	run, underHTTP := ctx.Value(runKey{}).(*handlerRun)
	switch {
	case underHTTP && run.store == any(m.store) && (run.lease != nil) == leased:
		return true, nil
	case underHTTP && run.store == any(m.store):
		inner, outer := "Wrap", "WrapLease"
		if leased {
			inner, outer = outer, inner
		}
		return true, fmt.Errorf("%w: %s runs inside %s of the same store: the handler would miss the %s it expects; keep one of them on this route", errNested, inner, outer, modeOf(leased))
	case underHTTP:
		return true, fmt.Errorf("%w: it runs inside the middleware of another idem.Store: one request would claim its key in two stores; protect each route with one Store", errNested)
	case m.store.InRun(ctx):
		return true, fmt.Errorf("%w: it runs inside a function of this store's Do or DoLease: claiming its key again would wait on that run's own claim; call the handler without the middleware there", errNested)
	}
	return false, nil
}

func modeOf(leased bool) string {
	if leased {
		return "lease"
	}
	return "transaction"
}

// refuseNested answers a request nesting refused: 500 "middleware-nested".
// Inside another run of this package, that run fails (Fail), so it stores
// nothing and logs the error (Middleware.failed); inside a bare Do or
// DoLease the refusal is logged here.
func (m *Middleware[TTx]) refuseNested(w http.ResponseWriter, r *http.Request, err error) {
	if run, ok := r.Context().Value(runKey{}).(*handlerRun); ok {
		run.fail(err)
	} else {
		m.logger().LogAttrs(r.Context(), slog.LevelError, "idemhttp: refused a request: middleware nested on one route",
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	writeNestedProblem(w)
}

func writeNestedProblem(w http.ResponseWriter) {
	writeProblem(w, http.StatusInternalServerError, "middleware-nested",
		"The service is misconfigured: this endpoint is protected twice. Nothing was done.")
}
