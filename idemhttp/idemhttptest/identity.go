package idemhttptest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

// testPathValues: with the route "POST /invoices/{id}/pay", the key used to
// pay invoice 1 and then sent to pay invoice 2 is a mismatch: invoice 2's
// request never gets invoice 1's answer, and its handler does not run.
func testPathValues[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "checkout-42"
	first := e.send(call{key: key, path: "/invoices/1/pay", body: "{}"})
	if first.status != http.StatusCreated || !strings.Contains(string(first.body), "run=1") {
		e.Fatalf(key, "pay invoice 1: %d %q, want 201 from run 1", first.status, first.body)
	}
	e.expectProblem(key, e.send(call{key: key, path: "/invoices/2/pay", body: "{}"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectRows(key, 1, 1, 1)
	// The first invoice's retry still replays.
	e.expectReplay(key, first, e.send(call{key: key, path: "/invoices/1/pay", body: "{}"}), "Set-Cookie", "Connection", "X-Hop")
	// A percent-encoded path value is another value, not the same one.
	e.expectProblem(key, e.send(call{key: key, path: "/invoices/%31/pay", body: "{}"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectRows(key, 1, 1, 1)
}

// testCatchAll: under a catch-all pattern ("POST /api/") every path is its
// own resource.
func testCatchAll[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "catch-all"
	if r := e.send(call{key: key, path: "/api/refunds/7", body: "x"}); r.status != http.StatusCreated {
		e.Fatalf(key, "first: %d %s", r.status, r.body)
	}
	e.expectProblem(key, e.send(call{key: key, path: "/api/refunds/8", body: "x"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectProblem(key, e.send(call{key: key, path: "/api/refunds/7?amount=1", body: "x"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectRows(key, 1, 1, 1)
}

// testHosts: a pattern without a host serves every host, and the host is
// part of the request (compared case-insensitively); patterns that name
// their host are separate routes, so the same key is fresh on each.
func testHosts[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "hosted"
	first := e.send(call{key: key, host: "shop-a.example", path: "/hosted", body: "x"})
	if first.status != http.StatusCreated {
		e.Fatalf(key, "first: %d %s", first.status, first.body)
	}
	e.expectProblem(key, e.send(call{key: key, host: "shop-b.example", path: "/hosted", body: "x"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectReplay(key, first, e.send(call{key: key, host: "SHOP-A.example", path: "/hosted", body: "x"}), "Set-Cookie", "Connection", "X-Hop")
	e.expectRows(key, 1, 1, 1)

	const routed = "host-routed"
	for i, host := range []string{"a.example", "b.example"} {
		r := e.send(call{key: routed, host: host, path: "/pay", body: "x"})
		if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
			e.Fatalf(routed, "host %s: %d %v %s, want a fresh 201 (its own route)", host, r.status, r.header, r.body)
		}
		e.expectRows(routed, int64(2+i), int64(2+i), int64(2+i))
	}
}

// testPrincipalMissing: a request whose Principal is "" is refused before
// anything is claimed, with a problem that says so.
func testPrincipalMissing[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "anonymous-1"
	r := e.send(call{key: key, anonymous: true, body: "x"})
	e.expectProblem(key, r, http.StatusForbidden, "principal-missing")
	e.expectRows(key, 0, 0, 0)
}

// testAnonymous: with AllowAnonymous, callers without a principal share one
// scope, apart from every named principal's.
func testAnonymous[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{http: idemhttp.Config{AllowAnonymous: true}})
	const key = "anonymous-2"
	first := e.send(call{key: key, anonymous: true, body: "x"})
	if first.status != http.StatusCreated {
		e.Fatalf(key, "anonymous with AllowAnonymous: %d %s, want 201", first.status, first.body)
	}
	e.expectReplay(key, first, e.send(call{key: key, anonymous: true, body: "x"}), "Set-Cookie", "Connection", "X-Hop")
	if r := e.send(call{key: key, principal: "p1", body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "a named principal with the anonymous key: %d %v, want a fresh 201", r.status, r.header)
	}
	e.expectRows(key, 2, 2, 2)
}

// testQuotedKey: the sf-string form of a key ("abc") is the key abc; a
// malformed quoted value is a 400.
func testQuotedKey[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	first := e.send(call{key: `"quoted-1"`, body: "x"})
	if first.status != http.StatusCreated {
		e.Fatalf("quoted-1", "quoted key: %d %s", first.status, first.body)
	}
	e.expectReplay("quoted-1", first, e.send(call{key: "quoted-1", body: "x"}), "Set-Cookie", "Connection", "X-Hop")
	if r := e.send(call{key: `"a\"b"`, body: "x"}); r.status != http.StatusCreated {
		e.Fatalf(`a"b`, "escaped quote: %d %s", r.status, r.body)
	}
	for _, bad := range []string{`"unterminated`, `"bad\escape"`, `"k";param=1`, `""`} {
		e.expectProblem(bad, e.send(call{key: bad, body: "x"}), http.StatusBadRequest, "key-invalid")
	}
	e.expectRows("quoted", 2, 2, 2)
	rec, err := e.Store.Lookup(e.Ctx, idemhttp.Scope("p1", http.MethodPost, "/orders"), `a"b`)
	if err != nil || rec.Key != `a"b` {
		e.Fatalf(`a"b`, "the stored key of the sf-string \"a\\\"b\": %+v, %v", rec, err)
	}
}

// testTransientStatus: 429, 408 and 425 say "not now", not an outcome: they
// are answered but rolled back, so the retry does the work.
func testTransientStatus[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	for _, status := range []int{http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusTooEarly} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			e := setup(t, b, options[TTx]{handler: afterFirstRun(func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Retry-After", "1")
				http.Error(w, "slow down", status)
			})})
			key := fmt.Sprintf("transient-%d", status)
			if r := e.send(call{key: key, body: "x"}); r.status != status {
				e.Fatalf(key, "first: %d %s, want the handler's %d", r.status, r.body, status)
			}
			e.expectRows(key, 0, 0, 1)
			if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
				e.Fatalf(key, "retry after %d: %d %v, want the handler to run again", status, r.status, r.header)
			}
			e.expectRows(key, 1, 1, 2)
		})
	}
}

// testAuthInfo: Authentication-Info and Proxy-Authentication-Info belong to
// one exchange and are not replayed by default.
func testAuthInfo[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Authentication-Info", `nextnonce="a1"`)
		w.Header().Set("Proxy-Authentication-Info", `nextnonce="b2"`)
		e.order(w, r)
	}})
	const key = "auth-info"
	first := e.send(call{key: key, body: "x"})
	if first.header.Get("Authentication-Info") == "" {
		e.Fatalf(key, "the first answer lacks the handler's Authentication-Info")
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}),
		"Set-Cookie", "Connection", "X-Hop", "Authentication-Info", "Proxy-Authentication-Info")
}

// testHandlerEndsTx: a handler that commits the middleware's transaction
// gets a 500 that says the operation may have taken effect (not a 503 that
// claims it was rolled back); the retry gets 409 while the key is held.
func testHandlerEndsTx[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if !e.writeEffect(w, r) {
			return
		}
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := endNative(r.Context(), tx); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}})
	const key = "ends-tx"
	r := e.send(call{key: key, body: "x"})
	e.expectProblem(key, r, http.StatusInternalServerError, "transaction-ended")
	if !strings.Contains(string(r.body), "may have taken effect") {
		e.Fatalf(key, "problem %s does not say the operation may have taken effect", r.body)
	}
	e.expectRows(key, 1, 1, 1)
	e.expectProblem(key, e.send(call{key: key, body: "x"}), http.StatusConflict, "in-flight")
	e.expectRows(key, 1, 1, 1)
}

// endNative commits a native transaction (*sql.Tx or pgx.Tx).
func endNative(ctx context.Context, tx any) error {
	switch t := tx.(type) {
	case interface{ Commit() error }:
		return t.Commit()
	case interface{ Commit(context.Context) error }:
		return t.Commit(ctx)
	}
	return fmt.Errorf("idemhttptest: cannot commit a %T", tx)
}

// testRetriesExhausted: when every attempt fails with a retryable error, the
// answer is a 503 with Retry-After, and nothing is stored.
func testRetriesExhausted[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{store: idem.Config{MaxAttempts: 2}, handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		e.runs.Add(1)
		idemhttp.Fail(w, r, fmt.Errorf("simulated: %w", idem.ErrDeadlock))
	}})
	const key = "exhausted"
	r := e.send(call{key: key, body: "x"})
	e.expectProblem(key, r, http.StatusServiceUnavailable, "store-unavailable")
	e.expectRetryAfter(key, r)
	e.expectRows(key, 0, 0, 2)
}

// testRetryAfterRoundsUp: a RetryAfter of 1.5 s is sent as 2, never 1.
func testRetryAfterRoundsUp[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const bound = 200 * time.Millisecond
	held, release := make(chan struct{}), make(chan struct{})
	e := setup(t, b, options[TTx]{
		store: idem.Config{WaitBound: bound},
		http:  idemhttp.Config{RetryAfter: 1500 * time.Millisecond},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if e.runs.Load() == 0 {
				close(held)
				<-release
			}
			e.order(w, r)
		},
	})
	const key = "retry-after"
	done := make(chan response, 1)
	go func() { done <- e.send(call{key: key, body: "x"}) }()
	select {
	case <-held:
	case <-time.After(time.Minute):
		e.Fatalf(key, "the first request's handler did not start")
	}
	r := e.send(call{key: key, body: "x"})
	close(release)
	e.expectProblem(key, r, http.StatusConflict, e.heldKeyCode())
	if got := r.header.Get("Retry-After"); got != "2" {
		e.Fatalf(key, "Retry-After %q for 1.5 s, want 2 (rounded up)", got)
	}
	if first := <-done; first.status != http.StatusCreated {
		e.Fatalf(key, "first: %d %s", first.status, first.body)
	}
}
