package idemecho_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/idemhttp"
)

// TestBodyLimit: echo's BodyLimit middleware before the route fails a body
// over its limit while the middleware reads it (a chunked body, whose size
// is not known up front): the client gets 413 body-too-large, as echo
// would answer, not 400; the handler does not run and nothing is stored.
// A body within the limit is served, and a GET passed through still gets
// echo's own 413 from c.Bind.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	a.e.Use(middleware.BodyLimit("16B"))
	a.e.POST("/orders/:id", a.create, a.mw.Wrap())
	a.e.GET("/orders/:id", func(c echo.Context) error {
		var o order
		if err := c.Bind(&o); err != nil {
			return err
		}
		return c.String(http.StatusOK, o.Item)
	}, a.mw.Wrap())

	send := func(method, key, body string) answer {
		req := httptest.NewRequestWithContext(t.Context(), method, "/orders/A-1", strings.NewReader(body))
		req.ContentLength = -1 // sent chunked: only the reader finds the limit
		req.Header.Set("X-Tenant", "tenant-1")
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		rec := httptest.NewRecorder()
		a.e.ServeHTTP(rec, req)
		return answer{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
	}

	big := send(http.MethodPost, "key-1", `{"item":"a long, long book title"}`)
	if big.status != http.StatusRequestEntityTooLarge || big.problem() != "body-too-large" {
		t.Fatalf("over echo's limit: %d %q, want 413 body-too-large", big.status, big.body)
	}
	if runs, records := a.runs.Load(), a.count(t, "idempotency_keys"); runs != 0 || records != 0 {
		t.Fatalf("%d runs and %d records, want none", runs, records)
	}
	small := send(http.MethodPost, "key-2", `{"item":"pen"}`)
	if small.status != http.StatusCreated {
		t.Fatalf("within echo's limit: %d %q, want 201", small.status, small.body)
	}
	// Longer than one read of the JSON decoder, which then meets echo's
	// error; a shorter body comes in one read, and decodes.
	get := send(http.MethodGet, "", `{"item":"`+strings.Repeat("long ", 200)+`"}`)
	if get.status != http.StatusRequestEntityTooLarge || get.problem() != "" {
		t.Fatalf("GET over echo's limit: %d %q, want echo's own 413", get.status, get.body)
	}
}
