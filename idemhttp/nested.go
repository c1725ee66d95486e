package idemhttp

import (
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
// one Store), for a request with the outer run's key or none, the outer
// run already protects the request: the handler runs once, in the outer
// run's transaction or lease, and its answer is stored once. Claiming the
// key again would wait on the outer run's own claim and answer 409, which
// the outer run would store.
//
// Everything else is refused: a middleware with its own key function or
// signature check (Config.Key, Config.Verify: a webhook's) inside another
// of the same store, which would skip them, a request with another key (a handler that
// sends sub-requests through the router: passed through, their keys would
// never be recorded, and a later retry of one would do its work again),
// the other mode of the same store (the handler would miss the
// transaction or lease it expects), a Wrap of another Store (one request
// would claim its key in two stores, and the handler would see the inner
// transaction only), and a request inside a function the store's Do or
// DoLease runs without this package.
func (m *Middleware[TTx]) nesting(r *http.Request, leased bool) (inside bool, err error) {
	ctx := r.Context()
	run, underHTTP := ctx.Value(runKey{}).(*handlerRun)
	switch {
	case underHTTP && run.store == any(m.store) && (m.cfg.Key != nil || m.cfg.Verify != nil):
		return true, fmt.Errorf("%w: a middleware with Config.Key or Config.Verify (a webhook's) runs inside the run of another middleware of this store: passed through, its sender's key and signature would go unchecked; protect the webhook route with its own middleware only", errNested)
	case underHTTP && run.store == any(m.store) && !sameKey(r.Header.Values(HeaderKey), run.key):
		return true, fmt.Errorf("%w: a request with another idempotency key runs inside the run of this store's middleware (a handler serving sub-requests through the router?): its key would never be recorded; call the sub-requests' handlers without the middleware, inside the outer run", errNested)
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

// sameKey reports whether a request inside a run, with the key header
// values keys, is the run's own request as far as its key goes: it
// carries the run's key, or none.
func sameKey(keys []string, runKey string) bool {
	return len(keys) == 0 || (len(keys) == 1 && keys[0] == runKey)
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
