package idemhttptest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
)

func testBodyTooLarge[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{http: idemhttp.Config{MaxRequestBody: 64}})
	big := strings.Repeat("b", 65)
	e.expectProblem("big-1", e.send(call{key: "big-1", body: big}), http.StatusRequestEntityTooLarge, "body-too-large")
	e.expectProblem("big-2", e.send(call{key: "big-2", body: big, unsized: true}), http.StatusRequestEntityTooLarge, "body-too-large")
	e.expectRows("big", 0, 0, 0)
	if r := e.send(call{key: "big-3", body: big[:64], unsized: true}); r.status != http.StatusCreated {
		e.Fatalf("big-3", "body of exactly the limit, length unknown: %d %s, want 201", r.status, r.body)
	}
	e.expectRows("big-3", 1, 1, 1)
	if r := e.send(call{key: "big-4", body: big[:64]}); r.status != http.StatusCreated {
		e.Fatalf("big-4", "body of exactly the limit, length given: %d %s, want 201", r.status, r.body)
	}
	e.expectRows("big-4", 2, 2, 2)
}

func testServerError[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: afterFirstRun(func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "7")
		http.Error(w, "inventory service unavailable", http.StatusServiceUnavailable)
	})})
	const key = "5xx-1"
	r := e.send(call{key: key, body: "x"})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "7" || !strings.Contains(string(r.body), "inventory") {
		e.Fatalf(key, "first: %d %v %q, want the handler's own 503", r.status, r.header, r.body)
	}
	e.expectRetention(key, r)
	e.expectRows(key, 0, 0, 1)
	if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "retry after a 5xx: %d %v, want the handler to run again and answer 201", r.status, r.header)
	}
	e.expectRows(key, 1, 1, 2)
}

func testResponseTooLarge[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{
		store: idem.Config{MaxBody: 32},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if !e.writeEffect(w, r) {
				return
			}
			switch r.URL.Path {
			case "/other": // a header over idem.MaxHeaderBytes
				w.Header().Set("X-Big", strings.Repeat("h", idem.MaxHeaderBytes))
				w.WriteHeader(http.StatusCreated)
			default: // a body one byte over the store's MaxBody, in two writes
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(strings.Repeat("x", 20)))
				w.Write([]byte(strings.Repeat("y", len(r.Header.Get(idemhttp.HeaderKey)))))
			}
		},
	})
	for _, c := range []call{{key: "1234567890123"}, {key: "big-header", path: "/other"}} {
		r := e.send(c)
		e.expectProblem(c.key, r, http.StatusInternalServerError, "response-too-large")
	}
	e.expectRows("too-large", 0, 0, 2)
	if r := e.send(call{key: "123456789012"}); r.status != http.StatusCreated || len(r.body) != 32 {
		e.Fatalf("123456789012", "body of exactly the limit: %d %q, want 201 and 32 bytes", r.status, r.body)
	}
	e.expectRows("too-large", 1, 1, 3)
}

func testPanic[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: afterFirstRun(func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		panic("handler bug")
	})})
	const key = "panic-1"
	func() {
		defer func() {
			if p := recover(); p != "handler bug" {
				e.Fatalf(key, "recovered %v, want the handler's panic", p)
			}
		}()
		r := e.send(call{key: key, body: "x"})
		e.Fatalf(key, "the panic did not propagate; got %d", r.status)
	}()
	e.expectRows(key, 0, 0, 1)
	if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "after the panic: %d %v, want a fresh 201", r.status, r.header)
	}
	e.expectRows(key, 1, 1, 2)
}

func testFail[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: afterFirstRun(func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated) // discarded by Fail
		idemhttp.Fail(w, r, errors.New("payment provider said no"))
	})})
	const key = "fail-1"
	e.expectProblem(key, e.send(call{key: key, body: "x"}), http.StatusInternalServerError, "handler-failed")
	e.expectRows(key, 0, 0, 1)
	if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated {
		e.Fatalf(key, "after Fail: %d, want a fresh 201", r.status)
	}
	e.expectRows(key, 1, 1, 2)
}

func testFailRetryable[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: afterFirstRun(func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		idemhttp.Fail(w, r, fmt.Errorf("simulated: %w", idem.ErrSerialization))
	})})
	const key = "fail-retry-1"
	r := e.send(call{key: key, body: "x"})
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), "run=2") {
		e.Fatalf(key, "%d %q, want the second run's 201 within the same request", r.status, r.body)
	}
	e.expectRows(key, 1, 1, 2)
}

// faultDriver replaces the commit of every transaction it begins. Its
// transactions keep the backend's optional abilities (conformance.WrappedTx),
// so the commit it wraps is the production one (on pgx: the completing
// UPDATE and COMMIT in one pipeline).
type faultDriver[TTx any] struct {
	dialect.Driver[TTx]
	commit func(ctx context.Context, tx dialect.Tx[TTx]) error
}

func (d faultDriver[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &conformance.WrappedTx[TTx]{Tx: tx, OnCommit: d.commit}, nil
}

func testCommitUnknown[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	var faults atomic.Int64
	e := setup(t, b, options[TTx]{driver: func(d dialect.Driver[TTx]) dialect.Driver[TTx] {
		return faultDriver[TTx]{Driver: d, commit: func(ctx context.Context, txn dialect.Tx[TTx]) error {
			err := txn.Commit(ctx)
			if err == nil && faults.Add(1) == 1 {
				// It committed, but the client of the database cannot know.
				return dialect.Classified(dialect.ErrCommitUnknown, errors.New("idemhttptest: connection reset during COMMIT"))
			}
			return err
		}}
	}})
	const key = "commit-unknown-1"
	r := e.send(call{key: key, body: "x"})
	e.expectProblem(key, r, http.StatusServiceUnavailable, "commit-unknown")
	e.expectRetryAfter(key, r)
	e.expectRows(key, 1, 1, 1)
	again := e.send(call{key: key, body: "x"})
	if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "true" || !strings.Contains(string(again.body), "run=1") {
		e.Fatalf(key, "retry after an unknown commit that did commit: %d %v %q, want a replay of run 1", again.status, again.header, again.body)
	}
	e.expectRows(key, 1, 1, 1)
}

func testCommitFailed[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	var faults atomic.Int64
	e := setup(t, b, options[TTx]{driver: func(d dialect.Driver[TTx]) dialect.Driver[TTx] {
		return faultDriver[TTx]{Driver: d, commit: func(ctx context.Context, txn dialect.Tx[TTx]) error {
			if faults.Add(1) == 1 {
				if err := txn.Rollback(ctx); err != nil {
					return err
				}
				return errors.New("idemhttptest: COMMIT refused")
			}
			return txn.Commit(ctx)
		}}
	}})
	const key = "commit-failed-1"
	r := e.send(call{key: key, body: "x"})
	e.expectProblem(key, r, http.StatusServiceUnavailable, "store-unavailable")
	e.expectRetryAfter(key, r)
	e.expectRows(key, 0, 0, 1)
	again := e.send(call{key: key, body: "x"})
	if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "retry after a failed commit: %d %v, want a fresh 201", again.status, again.header)
	}
	e.expectRows(key, 1, 1, 2)
}
