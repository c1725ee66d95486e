package idemhttptest

import (
	"bytes"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

func testInFlight[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const bound = 300 * time.Millisecond
	started, release := make(chan struct{}), make(chan struct{})
	e := setup(t, b, options[TTx]{
		store: idem.Config{WaitBound: bound},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if e.runs.Load() == 0 {
				close(started)
				<-release // holds the claim, in its open transaction
			}
			e.order(w, r)
		},
	})
	const key = "in-flight-1"
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.send(call{key: key, body: "x"}) }()
	select {
	case <-started:
	case <-time.After(time.Minute):
		e.Fatalf(key, "the first request's handler did not start")
	}
	start := time.Now()
	r := e.send(call{key: key, body: "x"})
	elapsed := time.Since(start)
	close(release)
	e.expectProblem(key, r, http.StatusConflict, "in-flight")
	e.expectRetryAfter(key, r)
	if elapsed < bound/2 {
		e.Errorf(key, "409 after %v, want it after waiting about the bound %v", elapsed, bound)
	}
	first := <-firstDone
	if first.status != http.StatusCreated {
		e.Fatalf(key, "first: %d %s", first.status, first.body)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}), "Set-Cookie", "Connection", "X-Hop")
	e.expectRows(key, 1, 1, 1)
}

func testConcurrent[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const n = 8
	e := setup(t, b, options[TTx]{store: idem.Config{MaxAttempts: 20}})
	const key = "concurrent-1"
	start := make(chan struct{})
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = e.send(call{key: key, body: "x"})
		})
	}
	close(start)
	wg.Wait()
	var original []byte
	for i, r := range results {
		switch {
		case r.status == http.StatusCreated && r.header.Get(idemhttp.HeaderReplayed) == "":
			if original != nil {
				e.Fatalf(key, "two original answers: %q and %q", original, r.body)
			}
			original = r.body
		case r.status == http.StatusCreated, r.status == http.StatusConflict:
		default:
			e.Fatalf(key, "request %d: %d %s, want 201 or 409", i, r.status, r.body)
		}
	}
	for i, r := range results {
		if r.status == http.StatusCreated && !bytes.Equal(r.body, original) {
			e.Fatalf(key, "request %d got %q, want the original %q", i, r.body, original)
		}
	}
	e.expectRows(key, 1, 1, 1)
}
