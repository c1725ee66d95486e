package idemecho_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/idemhttp"
)

// TestNotAnOutcome: the story of a client whose first request fails
// validation. The handler inserts its order, then refuses the request
// with an *echo.HTTPError: a 422 (never stored by default), or a 404
// marked with idemhttp.NotAnOutcome. The client gets it; the order does
// not commit and nothing is stored, so the corrected request with the same
// key runs and is stored, and its retry replays.
func TestNotAnOutcome(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		mark   bool
	}{
		{"422", http.StatusUnprocessableEntity, false},
		{"404 marked", http.StatusNotFound, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t)
			a.e.POST("/orders/:id", func(c echo.Context) error {
				run := a.runs.Add(1)
				id, err := a.insert(c)
				if err != nil {
					return err
				}
				if c.Param("id") == "invalid" {
					if tc.mark {
						idemhttp.NotAnOutcome(c.Request())
					}
					return echo.NewHTTPError(tc.status, "no such item")
				}
				return c.JSON(http.StatusCreated, map[string]any{"id": id, "run": run})
			}, a.mw.Wrap())

			first := a.send(t, http.MethodPost, "/orders/invalid", "key-1", `{"item":"book"}`)
			if first.status != tc.status || !strings.Contains(first.body, "no such item") || first.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("invalid request: %d %q, want the handler's %d", first.status, first.body, tc.status)
			}
			if n := a.count(t, "orders"); n != 0 {
				t.Fatalf("%d orders after the invalid request, want 0 (rolled back)", n)
			}
			// The corrected request names another resource: under the
			// same key it runs, since nothing holds the key.
			corrected := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if corrected.status != http.StatusCreated || corrected.header.Get(idemhttp.HeaderReplayed) != "" {
				t.Fatalf("corrected request with the same key: %d %q, want the handler to run and answer 201", corrected.status, corrected.body)
			}
			again := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if again.status != http.StatusCreated || again.body != corrected.body || again.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("retry: %d %q, want a replay of %q", again.status, again.body, corrected.body)
			}
			if mismatch := a.send(t, http.MethodPost, "/orders/invalid", "key-1", `{"item":"book"}`); mismatch.status != http.StatusUnprocessableEntity || mismatch.problem() != "key-mismatch" {
				t.Fatalf("the invalid request again: %d %q, want 422 key-mismatch", mismatch.status, mismatch.body)
			}
			if runs, n := a.runs.Load(), a.count(t, "orders"); runs != 2 || n != 1 {
				t.Fatalf("%d runs, %d orders; want 2 and 1", runs, n)
			}
		})
	}
}
