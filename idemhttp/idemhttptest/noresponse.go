package idemhttptest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

// silentWays are the ways a handler can return without answering, named by
// the request body: nothing at all, headers only, an informational status only,
// a Flush only (the middleware's writer cannot flush).
var silentWays = []string{"nothing", "headers", "informational", "flush"}

// silent returns without answering, the way body names.
func silent(w http.ResponseWriter, body string) {
	switch body {
	case "headers":
		w.Header().Set("Location", "/orders/1")
		w.Header().Set("Content-Type", "application/json")
	case "informational":
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
	case "flush":
		_ = http.NewResponseController(w).Flush() // not supported: writes nothing
	}
}

// firstTry reports whether this is the first run for the request's key.
type firstTry struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (f *firstTry) of(r *http.Request) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := r.Header.Get(idemhttp.HeaderKey)
	if f.seen[key] {
		return false
	}
	if f.seen == nil {
		f.seen = make(map[string]bool)
	}
	f.seen[key] = true
	return true
}

// testNoResponse: a handler that writes its effect and returns without
// WriteHeader or Write (in any of silentWays) gets 500 "no-response"; its
// effect is rolled back and nothing is stored, so the retry runs it again
// and that answer is the one stored and replayed.
func testNoResponse[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	var first firstTry
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if !first.of(r) {
			e.order(w, r)
			return
		}
		way, err := io.ReadAll(r.Body)
		if err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		if e.writeEffect(w, r) {
			silent(w, string(way))
		}
	}})
	for _, way := range silentWays {
		key := "silent-" + way
		e.expectProblem(key, e.send(call{key: key, body: way}), http.StatusInternalServerError, "no-response")
	}
	n := int64(len(silentWays))
	e.expectRows("silent", 0, 0, n)
	for i, way := range silentWays {
		key := "silent-" + way
		c := call{key: key, body: way}
		r := e.send(c)
		if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
			e.Fatalf(key, "retry after no response: %d %v %q, want the handler to run again and answer 201", r.status, r.header, r.body)
		}
		e.expectRows(key, int64(i+1), int64(i+1), n+int64(i+1))
		e.expectReplay(key, r, e.send(c), "Set-Cookie", "Connection", "X-Hop")
	}
	e.expectRows("silent", n, n, 2*n)
}

// testEmptyAnswers: an explicit WriteHeader(200) without a body, and a
// Write of no bytes (net/http's implicit 200), are answers: stored with the
// handler's writes and replayed.
func testEmptyAnswers[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if !e.writeEffect(w, r) {
			return
		}
		w.Header().Set("X-Answer", r.URL.Path)
		switch r.URL.Path {
		case "/other":
			_, _ = w.Write(nil)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}})
	for i, c := range []call{{key: "explicit-200", path: "/orders", body: "x"}, {key: "empty-write", path: "/other", body: "x"}} {
		first := e.send(c)
		if first.status != http.StatusOK || len(first.body) != 0 || first.header.Get("X-Answer") != c.path {
			e.Fatalf(c.key, "first: %d %v %q, want an empty 200 with the handler's header", first.status, first.header, first.body)
		}
		e.expectReplay(c.key, first, e.send(c))
		e.expectRows(c.key, int64(i+1), int64(i+1), int64(i+1))
	}
}

// testImplicitOK: with Config.ImplicitOK, a handler that answers nothing
// gets net/http's empty 200, stored with its writes and replayed, under
// Wrap and WrapLease.
func testImplicitOK[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{
		http: idemhttp.Config{ImplicitOK: true},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if _, ok := idemhttp.Lease[TTx](r.Context()); ok {
				e.runs.Add(1)
				return
			}
			e.writeEffect(w, r)
		},
	})
	for i, c := range []call{{key: "implicit-ok", body: "x"}, {key: "implicit-ok-leased", path: "/leased/1", body: "x"}} {
		first := e.send(c)
		if first.status != http.StatusOK || len(first.body) != 0 || first.header.Get(idemhttp.HeaderReplayed) != "" {
			e.Fatalf(c.key, "first: %d %v %q, want an empty 200", first.status, first.header, first.body)
		}
		e.expectReplay(c.key, first, e.send(c))
		e.expectRows(c.key, 1, int64(i+1), int64(i+1))
	}
}

// testLeaseNoResponse: under WrapLease, a handler that records a step and
// returns without answering gets 500 "no-response"; the lease is released,
// not completed: the record stays pending with its step, and the retry
// resumes from the step and answers.
func testLeaseNoResponse[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() > 0 {
			e.leaseOrder(w, r)
			return
		}
		l, _ := idemhttp.Lease[TTx](r.Context())
		e.runs.Add(1)
		if err := l.RecordStep(r.Context(), "charged", []byte("charge by run 1"), func(ctx context.Context, tx TTx) error {
			return e.effect(ctx, tx, 1)
		}); err != nil {
			idemhttp.Fail(w, r, err)
		}
		// returns without an answer
	}})
	const key = "lease-silent"
	e.expectProblem(key, e.send(call{key: key, path: "/leased/1", body: "x"}), http.StatusInternalServerError, "no-response")
	e.expectRows(key, 1, 1, 1) // the step and its write stay; the record stays pending
	r := e.send(call{key: key, path: "/leased/1", body: "x"})
	if r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" || !strings.Contains(string(r.body), "charge by run 1; answered by run 2") {
		e.Fatalf(key, "retry after no response: %d %v %s, want run 2 answering with run 1's charge", r.status, r.header, r.body)
	}
	e.expectReplay(key, r, e.send(call{key: key, path: "/leased/1", body: "x"}))
	e.expectRows(key, 1, 1, 2)
}
