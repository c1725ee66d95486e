package idemgin_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// TestNotAnOutcome: the story of a client whose first request fails
// validation. The handler's 400 (or its 409 marked with
// idemhttp.NotAnOutcome) reaches the client; the payment it inserted does
// not commit and nothing is stored, so the corrected request with the same
// key runs and is stored, and its retry replays.
func TestNotAnOutcome(t *testing.T) {
	for _, tc := range []struct {
		name    string
		invalid string
		status  int
	}{
		{"400", `{"amount":-5}`, http.StatusBadRequest},
		{"409 marked", `{"amount":5000}`, http.StatusConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t, idemhttp.Config{})
			const path = "/orders/7/validate"
			first, g := s.send(t, http.MethodPost, path, "k", tc.invalid)
			if first.status != tc.status || first.code != "" || first.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("invalid request: %d %q, want the handler's %d", first.status, first.body, tc.status)
			}
			checkSeen(t, first, g)
			if n := s.count(t, "payments"); n != 0 {
				t.Fatalf("%d payments after the invalid request, want 0 (rolled back)", n)
			}
			corrected, _ := s.send(t, http.MethodPost, path, "k", `{"amount":30}`)
			if corrected.status != http.StatusCreated || !strings.Contains(corrected.body, `"amount":30`) || corrected.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("corrected request with the same key: %d %q, want the handler to run and answer 201", corrected.status, corrected.body)
			}
			again, _ := s.send(t, http.MethodPost, path, "k", `{"amount":30}`)
			if again.status != http.StatusCreated || again.body != corrected.body || again.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %q, want a replay of %q", again.status, again.body, corrected.body)
			}
			if mismatch, _ := s.send(t, http.MethodPost, path, "k", tc.invalid); mismatch.status != http.StatusUnprocessableEntity || mismatch.code != "key-mismatch" {
				t.Fatalf("the invalid request again: %d %q, want 422 key-mismatch", mismatch.status, mismatch.body)
			}
			if runs, n := s.runs.Load(), s.count(t, "payments"); runs != 2 || n != 1 {
				t.Fatalf("%d runs, %d payments; want 2 and 1", runs, n)
			}
		})
	}
}
