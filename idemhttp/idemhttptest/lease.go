package idemhttptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

// leaseOrder is the default handler under WrapLease: a "charge" step (the
// external call, counted by the run, and the step's effect row), skipped
// when a resumed lease already recorded it, then a 201 that says which run
// charged.
func (e *env[TTx]) leaseOrder(w http.ResponseWriter, r *http.Request) {
	l, ok := idemhttp.Lease[TTx](r.Context())
	if !ok {
		idemhttp.Fail(w, r, errors.New("no lease in the request context"))
		return
	}
	run := e.runs.Add(1)
	body, _ := io.ReadAll(r.Body)
	charged, data := l.Step()
	if charged != "charged" {
		data = fmt.Appendf(nil, "charge by run %d", run)
		if err := l.RecordStep(r.Context(), "charged", data, func(ctx context.Context, tx TTx) error {
			return e.effect(ctx, tx, run)
		}); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
	}
	downstream, err := l.DownstreamKey("charged")
	if err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "%s; answered by run %d; downstream key %s; body %q", data, run, downstream, body)
}

// testLeaseReplay: under WrapLease a retry replays byte for byte and
// another body is a 422, as under Wrap.
func testLeaseReplay[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "lease-replay"
	first := e.send(call{key: key, path: "/leased/1", body: "x"})
	if first.status != http.StatusCreated || !strings.Contains(string(first.body), "charge by run 1") {
		e.Fatalf(key, "first: %d %s", first.status, first.body)
	}
	e.expectReplay(key, first, e.send(call{key: key, path: "/leased/1", body: "x"}))
	e.expectProblem(key, e.send(call{key: key, path: "/leased/1", body: "y"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectProblem(key, e.send(call{key: key, path: "/leased/2", body: "x"}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectRows(key, 1, 1, 1)
}

// testLeaseHeld: while a handler holds the lease, a retry waits up to the
// wait bound and gets 409 with a Retry-After within the lease; then replays.
func testLeaseHeld[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	held, release := make(chan struct{}), make(chan struct{})
	e := setup(t, b, options[TTx]{
		store: idem.Config{WaitBound: 200 * time.Millisecond, Lease: 20 * time.Second},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if e.runs.Load() == 0 {
				close(held)
				<-release
			}
			e.leaseOrder(w, r)
		},
	})
	const key = "lease-held"
	done := make(chan response, 1)
	go func() { done <- e.send(call{key: key, path: "/leased/1", body: "x"}) }()
	select {
	case <-held:
	case <-time.After(time.Minute):
		e.Fatalf(key, "the first handler did not start")
	}
	r := e.send(call{key: key, path: "/leased/1", body: "x"})
	close(release)
	e.expectProblem(key, r, http.StatusConflict, "in-flight")
	if ra := r.header.Get("Retry-After"); ra == "" || ra == "0" || len(ra) > 2 {
		e.Fatalf(key, "Retry-After %q, want the seconds left of the 20 s lease", ra)
	}
	first := <-done
	if first.status != http.StatusCreated {
		e.Fatalf(key, "first: %d %s", first.status, first.body)
	}
	e.expectReplay(key, first, e.send(call{key: key, path: "/leased/1", body: "x"}))
	e.expectRows(key, 1, 1, 1)
}

// testLeaseFailResumes: a handler that fails after a recorded step releases
// the lease; the retry resumes from the step and does not redo it.
func testLeaseFailResumes[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() == 0 {
			l, _ := idemhttp.Lease[TTx](r.Context())
			e.runs.Add(1)
			if err := l.RecordStep(r.Context(), "charged", []byte("charge by run 1"), func(ctx context.Context, tx TTx) error {
				return e.effect(ctx, tx, 1)
			}); err != nil {
				idemhttp.Fail(w, r, err)
				return
			}
			idemhttp.Fail(w, r, errors.New("email provider timed out"))
			return
		}
		e.leaseOrder(w, r)
	}})
	const key = "lease-fail"
	failed := e.send(call{key: key, path: "/leased/1", body: "x"})
	e.expectProblem(key, failed, http.StatusServiceUnavailable, "handler-failed") // worth a retry: it resumes
	e.expectRetryAfter(key, failed)
	e.expectRows(key, 1, 1, 1) // the step and its write stay, the record stays pending
	r := e.send(call{key: key, path: "/leased/1", body: "x"})
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), "charge by run 1; answered by run 2") {
		e.Fatalf(key, "retry after a failure: %d %s, want run 2 answering with run 1's charge", r.status, r.body)
	}
	e.expectRows(key, 1, 1, 2)
}

// testLeaseTransient: a 503 from the handler is served but not stored; the
// lease is released and the retry resumes.
func testLeaseTransient[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() == 0 {
			e.runs.Add(1)
			http.Error(w, "provider busy", http.StatusServiceUnavailable)
			return
		}
		e.leaseOrder(w, r)
	}})
	const key = "lease-503"
	if r := e.send(call{key: key, path: "/leased/1", body: "x"}); r.status != http.StatusServiceUnavailable {
		e.Fatalf(key, "first: %d %s, want the handler's 503", r.status, r.body)
	}
	if r := e.send(call{key: key, path: "/leased/1", body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "retry after a 503: %d %v, want the work resumed", r.status, r.header)
	}
	e.expectRows(key, 1, 1, 2)
}

// testLeaseLost: a handler that outlives its lease, while another attempt
// takes the work over and completes it, gets 503 lease-lost; its answer is
// not stored; a retry replays the taker's.
func testLeaseLost[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	var now atomic.Pointer[time.Time]
	start := time.Date(2031, 3, 14, 15, 9, 26, 0, time.UTC)
	now.Store(&start)
	e := setup(t, b, options[TTx]{
		store: idem.Config{Lease: time.Minute, Clock: func() time.Time { return *now.Load() }},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if e.runs.Load() > 0 {
				e.leaseOrder(w, r)
				return
			}
			e.runs.Add(1)
			later := start.Add(2 * time.Minute) // the lease ended while this handler hung
			now.Store(&later)
			taker := e.send(call{key: "lease-lost", path: "/leased/1", body: "x"})
			if taker.status != http.StatusCreated {
				e.Errorf("lease-lost", "the taker: %d %s", taker.status, taker.body)
			}
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, "the hung handler's answer")
		},
	})
	const key = "lease-lost"
	e.expectProblem(key, e.send(call{key: key, path: "/leased/1", body: "x"}), http.StatusServiceUnavailable, "lease-lost")
	r := e.send(call{key: key, path: "/leased/1", body: "x"})
	if r.header.Get(idemhttp.HeaderReplayed) != "true" || !strings.Contains(string(r.body), "answered by run 2") {
		e.Fatalf(key, "retry: %d %s, want a replay of the taker's answer", r.status, r.body)
	}
	e.expectRows(key, 1, 1, 2)
}
