// Package idemhttptest is the HTTP suite every idem backend runs to prove
// that idemhttp's middleware keeps its contract on a real database: 400 for
// a missing or malformed key, 413 before anything is claimed, 422 for a
// reused key, 409 with Retry-After while a key is held, byte-exact replays
// with Idempotent-Replayed, 5xx and panics and oversized responses rolled
// back, 500 and nothing stored for a handler that answered nothing, 503 for
// a commit that failed or whose outcome is unknown, and the retention
// header on every protected response.
//
// It is an ordinary package, so a backend's tests call it with the same
// Backend they give the conformance suite:
//
//	func TestHTTP(t *testing.T) {
//		idemhttptest.Run(t, conformance.Backend[*sql.Tx]{Name: "mydb", Open: open})
//	}
//
// Every case is a parallel subtest on a conformance.Fixture (the harness the
// conformance suite uses too), with its own tables. The handler writes its
// effect in the transaction from idemhttp.Tx through the driver's Wrap, so
// the suite runs on any transaction type.
//
// Files: idemhttptest.go the cases and their world, send.go the requests and
// the checks of answers, replay.go keys, replays and scopes, identity.go
// what identifies a request, concurrency.go waits and races, failures.go
// rollbacks and faults, noresponse.go handlers that answer nothing, lease.go
// lease mode, webhook.go keys from the body and verification first.
package idemhttptest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
)

// retention is the store's retention in every case; the header says 5400.
const retention = 90 * time.Minute

// Run runs every case against b as parallel subtests of t.
func Run[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	t.Helper()
	conformance.RunCases(t, b, cases[TTx]())
}

func cases[TTx any]() []conformance.Case[TTx] {
	return []conformance.Case[TTx]{
		{Name: "MissingKey400", Run: testMissingKey[TTx]},
		{Name: "MalformedKey400", Run: testMalformedKey[TTx]},
		{Name: "SafeMethodPassesThrough", Run: testSafeMethod[TTx]},
		{Name: "ReplayByteForByte", Run: testReplay[TTx]},
		{Name: "ReplayKeepsConfiguredHeaders", Run: testStoreHeader[TTx]},
		{Name: "ReplayImplicitStatusAndSniffedType", Run: testImplicitStatus[TTx]},
		{Name: "ClientErrorIsStored", Run: testClientErrorStored[TTx]},
		{Name: "ValidationFailureNotStored", Run: testValidationNotStored[TTx]},
		{Name: "LeaseNotAnOutcome", Run: testLeaseNotAnOutcome[TTx]},
		{Name: "Mismatch422", Run: testMismatch[TTx]},
		{Name: "ScopeSeparatesPrincipalsRoutesMethods", Run: testScopes[TTx]},
		{Name: "InFlight409", Run: testInFlight[TTx]},
		{Name: "ConcurrentSameKeyOneEffect", Run: testConcurrent[TTx]},
		{Name: "BodyTooLarge413", Run: testBodyTooLarge[TTx]},
		{Name: "ServerErrorNotStored", Run: testServerError[TTx]},
		{Name: "ResponseTooLargeRollsBack", Run: testResponseTooLarge[TTx]},
		{Name: "PanicLeavesNoRecord", Run: testPanic[TTx]},
		{Name: "FailRollsBack", Run: testFail[TTx]},
		{Name: "FailRetryableRunsAgain", Run: testFailRetryable[TTx]},
		{Name: "CommitUnknown503", Run: testCommitUnknown[TTx]},
		{Name: "CommitFailed503NothingStored", Run: testCommitFailed[TTx]},
		{Name: "PathValuesAreTheResource", Run: testPathValues[TTx]},
		{Name: "CatchAllPatternTargets", Run: testCatchAll[TTx]},
		{Name: "HostIsPartOfTheRequest", Run: testHosts[TTx]},
		{Name: "PrincipalMissing403", Run: testPrincipalMissing[TTx]},
		{Name: "AnonymousByOptIn", Run: testAnonymous[TTx]},
		{Name: "QuotedKeyIsTheSameKey", Run: testQuotedKey[TTx]},
		{Name: "TransientStatusNotStored", Run: testTransientStatus[TTx]},
		{Name: "AuthenticationInfoNotReplayed", Run: testAuthInfo[TTx]},
		{Name: "HandlerEndsTransaction", Run: testHandlerEndsTx[TTx]},
		{Name: "RetriesExhausted503", Run: testRetriesExhausted[TTx]},
		{Name: "RetryAfterRoundsUp", Run: testRetryAfterRoundsUp[TTx]},
		{Name: "LeaseReplayAndMismatch", Run: testLeaseReplay[TTx]},
		{Name: "LeaseHeld409", Run: testLeaseHeld[TTx]},
		{Name: "LeaseFailResumes", Run: testLeaseFailResumes[TTx]},
		{Name: "LeaseTransientStatusResumes", Run: testLeaseTransient[TTx]},
		{Name: "LeaseLost503", Run: testLeaseLost[TTx]},
		{Name: "NoResponse500RollsBack", Run: testNoResponse[TTx]},
		{Name: "EmptyAnswersAreStored", Run: testEmptyAnswers[TTx]},
		{Name: "ImplicitOKStoresEmpty200", Run: testImplicitOK[TTx]},
		{Name: "LeaseNoResponseResumes", Run: testLeaseNoResponse[TTx]},
		{Name: "WebhookVerifyFirst", Run: testWebhookVerifyFirst[TTx]},
	}
}

// env is one case's world: a fixture, an effect table the handler writes
// to, and a ServeMux with the middleware in front of it.
type env[TTx any] struct {
	*conformance.Fixture[TTx]
	effects string
	mux     *http.ServeMux
	runs    atomic.Int64 // handler runs inside a transaction
}

// heldKeyCode is the problem code of a request that waited out the bound
// for a key another request's open transaction holds: "in-flight", or on a
// backend whose writers take the whole database (SQLite), where the wait
// was for the database, "database-busy".
func (e *env[TTx]) heldKeyCode() string {
	if e.Driver.Dialect().Capabilities().DatabaseWriteLock {
		return "database-busy"
	}
	return "in-flight"
}

// options change a case's setup.
type options[TTx any] struct {
	store idem.Config
	http  idemhttp.Config
	// driver wraps the backend's driver (to inject faults).
	driver func(dialect.Driver[TTx]) dialect.Driver[TTx]
	// handler is the protected handler; nil means env.order.
	handler func(e *env[TTx], w http.ResponseWriter, r *http.Request)
}

// setup makes the case's fixture and routes the suite's patterns through
// the middleware to the case's handler.
func setup[TTx any](t *testing.T, b conformance.Backend[TTx], o options[TTx]) *env[TTx] {
	t.Helper()
	cfg := o.store
	cfg.Retention = retention
	f := conformance.NewFixture(t, b, conformance.FixtureOptions[TTx]{Config: cfg, Wrap: o.driver})
	e := &env[TTx]{Fixture: f, effects: f.CreateTable("fx", "run BIGINT NOT NULL")}
	store := f.Store

	hc := o.http
	hc.Principal = func(r *http.Request) string { return r.Header.Get("X-Principal") }
	if hc.Logger == nil {
		hc.Logger = slog.New(slog.NewTextHandler(testLog{t}, nil))
	}
	if hc.RetryAfter == 0 {
		hc.RetryAfter = 2 * time.Second
	}
	mw, err := idemhttp.New(store, hc)
	if err != nil {
		t.Fatalf("[%s] idemhttp.New: %v", b.Name, err)
	}
	handle := o.handler
	if handle == nil {
		handle = (*env[TTx]).order
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(e, w, r) })
	h := mw.Wrap(handler)
	e.mux = http.NewServeMux()
	// Lease mode: the case's handler (leaseOrder by default) under WrapLease.
	leased := handler
	if o.handler == nil {
		leased = func(w http.ResponseWriter, r *http.Request) { e.leaseOrder(w, r) }
	}
	e.mux.Handle("POST /leased/{id}", mw.WrapLease(leased))
	for _, pattern := range []string{"/orders", "/other",
		"POST /invoices/{id}/pay", // path values
		"POST /api/",              // a catch-all
		"POST /hosted",            // any host
		"POST a.example/pay",      // host patterns
		"POST b.example/pay",
	} {
		e.mux.Handle(pattern, h)
	}
	return e
}

// testLog sends the middleware's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// order is the default handler: it writes one effect in the transaction and
// answers 201 with a Location, repeated and hop-by-hop headers, a cookie
// and a binary body that names the run, so a replay is told from a rerun.
func (e *env[TTx]) order(w http.ResponseWriter, r *http.Request) {
	tx, ok := idemhttp.Tx[TTx](r.Context())
	if !ok {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "no transaction")
		return
	}
	n := e.runs.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	if err := e.effect(r.Context(), tx, n); err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Location", fmt.Sprintf("/orders/%d", n))
	h.Set("Content-Type", "application/octet-stream")
	h.Add("X-Multi", "first")
	h.Add("X-Multi", "second")
	h.Set("Set-Cookie", fmt.Sprintf("session=s%d", n))
	h.Set("Connection", "X-Hop")
	h.Set("X-Hop", "per-connection")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte{0x00, 0xff, 0xfe, '\r', '\n'})
	fmt.Fprintf(w, "run=%d body=%q", n, body)
}

// afterFirstRun is a handler that on its first run writes its effect and
// answers with first, and on every later run is the default order handler:
// a case's fault happens once, and the retry shows what it left behind.
func afterFirstRun[TTx any](first func(e *env[TTx], w http.ResponseWriter, r *http.Request)) func(*env[TTx], http.ResponseWriter, *http.Request) {
	return func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() > 0 {
			e.order(w, r)
			return
		}
		if e.writeEffect(w, r) {
			first(e, w, r)
		}
	}
}

// writeEffect writes the run's effect in the middleware's transaction. When
// that fails it calls idemhttp.Fail and reports false: return then.
func (e *env[TTx]) writeEffect(w http.ResponseWriter, r *http.Request) bool {
	tx, _ := idemhttp.Tx[TTx](r.Context())
	if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
		idemhttp.Fail(w, r, err)
		return false
	}
	return true
}

// effect is the handler's write, in the middleware's transaction.
func (e *env[TTx]) effect(ctx context.Context, tx TTx, run int64) error {
	q, err := e.Driver.Wrap(tx)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, fmt.Sprintf("INSERT INTO %s (run) VALUES (%d)", e.effects, run))
	return err
}
