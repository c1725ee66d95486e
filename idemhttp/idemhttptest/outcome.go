package idemhttptest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

// validating is a handler that writes its effect first (an audit row, say:
// it must not commit for a request that never began), then refuses a body
// that says "invalid" with status, marked with idemhttp.NotAnOutcome when
// mark is set, and otherwise answers as order does.
func validating[TTx any](status int, mark bool) func(*env[TTx], http.ResponseWriter, *http.Request) {
	return func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if string(body) != "invalid" {
			r.Body = io.NopCloser(strings.NewReader(string(body)))
			e.order(w, r)
			return
		}
		if !e.writeEffect(w, r) {
			return
		}
		if mark {
			idemhttp.NotAnOutcome(r)
		}
		http.Error(w, "amount must be positive", status)
	}
}

// testValidationNotStored: the story of a client whose first request
// fails validation. The handler's 400 (or 422) reaches the client, is not
// stored and commits nothing; the corrected request with the same key runs
// and is stored; its retry replays. A status stored by default (404, 409)
// does the same when the handler marks it with NotAnOutcome.
func testValidationNotStored[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	for _, tc := range []struct {
		status int
		mark   bool
	}{
		{http.StatusBadRequest, false},
		{http.StatusUnprocessableEntity, false},
		{http.StatusNotFound, true},
		{http.StatusConflict, true},
	} {
		t.Run(fmt.Sprintf("%d/marked=%v", tc.status, tc.mark), func(t *testing.T) {
			e := setup(t, b, options[TTx]{handler: validating[TTx](tc.status, tc.mark)})
			key := fmt.Sprintf("never-began-%d", tc.status)
			first := e.send(call{key: key, body: "invalid"})
			if first.status != tc.status || !strings.Contains(string(first.body), "amount must be positive") || first.header.Get(idemhttp.HeaderReplayed) != "" {
				e.Fatalf(key, "invalid request: %d %q, want the handler's %d", first.status, first.body, tc.status)
			}
			e.expectRetention(key, first)
			e.expectRows(key, 0, 0, 1) // the audit row rolled back, no record
			corrected := e.send(call{key: key, body: `{"amount":5}`})
			if corrected.status != http.StatusCreated || corrected.header.Get(idemhttp.HeaderReplayed) != "" {
				e.Fatalf(key, "corrected request with the same key: %d %q, want the handler to run and answer 201", corrected.status, corrected.body)
			}
			e.expectRows(key, 1, 1, 2)
			e.expectReplay(key, corrected, e.send(call{key: key, body: `{"amount":5}`}), "Set-Cookie", "Connection", "X-Hop")
			e.expectProblem(key, e.send(call{key: key, body: "invalid"}), http.StatusUnprocessableEntity, "key-mismatch")
			e.expectRows(key, 1, 1, 2)
		})
	}
}

// testLeaseNotAnOutcome: under WrapLease a handler that marks its answer
// before recording a step frees the key (its record is deleted), so the
// corrected request runs; one that marks it after recording a step began
// its work: 500 "handler-failed", the lease released, and the same request
// resumes from the step.
func testLeaseNotAnOutcome[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		switch string(body) {
		case "invalid":
			e.runs.Add(1)
			idemhttp.NotAnOutcome(r)
			http.Error(w, "no such seat", http.StatusNotFound)
		case "charge then refuse":
			l, _ := idemhttp.Lease[TTx](r.Context())
			if step, _ := l.Step(); step != "" { // the retry: resume as usual
				e.leaseOrder(w, r)
				return
			}
			run := e.runs.Add(1)
			if err := l.RecordStep(r.Context(), "charged", []byte("ch_1"), func(ctx context.Context, tx TTx) error {
				return e.effect(ctx, tx, run)
			}); err != nil {
				idemhttp.Fail(w, r, err)
				return
			}
			idemhttp.NotAnOutcome(r)
			http.Error(w, "refused too late", http.StatusBadRequest)
		default:
			e.leaseOrder(w, r)
		}
	}})
	const key = "lease-never-began"
	if r := e.send(call{key: key, path: "/leased/1", body: "invalid"}); r.status != http.StatusNotFound {
		e.Fatalf(key, "invalid request: %d %q, want the handler's 404", r.status, r.body)
	}
	e.expectRows(key, 0, 0, 1)
	corrected := e.send(call{key: key, path: "/leased/1", body: "seat 7"})
	if corrected.status != http.StatusCreated || !strings.Contains(string(corrected.body), "charge by run 2") {
		e.Fatalf(key, "corrected request with the same key: %d %q, want the handler to run and answer 201", corrected.status, corrected.body)
	}
	e.expectReplay(key, corrected, e.send(call{key: key, path: "/leased/1", body: "seat 7"}))
	e.expectRows(key, 1, 1, 2)

	const began = "lease-began"
	e.expectProblem(began, e.send(call{key: began, path: "/leased/2", body: "charge then refuse"}), http.StatusInternalServerError, "handler-failed")
	e.expectRows(began, 2, 2, 3) // the step's row kept, its record pending
	if r := e.send(call{key: began, path: "/leased/2", body: "charge then refuse"}); r.status != http.StatusCreated || !strings.Contains(string(r.body), "ch_1") {
		e.Fatalf(began, "retry: %d %q, want the work resumed from its step", r.status, r.body)
	}
	e.expectRows(began, 2, 2, 4)
}
