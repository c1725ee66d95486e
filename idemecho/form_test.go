package idemecho_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/idemhttp"
)

// TestFormParsedBefore: echo's method override, in e.Pre, reads the
// method from the form, and so parses it and drains the body before the
// middleware runs. The form is what is fingerprinted: the same key with
// another form is a mismatch (422), never the first form's answer
// replayed; the handler binds the form as it would without idem.
func TestFormParsedBefore(t *testing.T) {
	a := newApp(t)
	a.e.Pre(middleware.MethodOverrideWithConfig(middleware.MethodOverrideConfig{Getter: middleware.MethodFromForm("_method")}))
	a.e.PATCH("/orders/:id", func(c echo.Context) error {
		a.runs.Add(1)
		var o struct {
			Item string `form:"item"`
		}
		if err := c.Bind(&o); err != nil {
			return err
		}
		return c.String(http.StatusCreated, "patched "+c.Param("id")+" to "+o.Item)
	}, a.mw.Wrap())
	send := func(item string) answer {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders/A-1",
			strings.NewReader(url.Values{"_method": {"PATCH"}, "item": {item}}.Encode()))
		req.Header.Set("X-Tenant", "tenant-1")
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
		req.Header.Set(idemhttp.HeaderKey, "key-1")
		rec := httptest.NewRecorder()
		a.e.ServeHTTP(rec, req)
		return answer{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
	}
	if got := send("book"); got.status != http.StatusCreated || got.body != "patched A-1 to book" {
		t.Fatalf("first: %d %q, want 201 patched A-1 to book", got.status, got.body)
	}
	if got := send("pen"); got.status != http.StatusUnprocessableEntity || got.problem() != "key-mismatch" {
		t.Fatalf("another form with the same key: %d %q, want 422 key-mismatch", got.status, got.body)
	}
	if got := send("book"); got.status != http.StatusCreated || got.body != "patched A-1 to book" || got.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %q, want the 201 replayed", got.status, got.body)
	}
	if runs := a.runs.Load(); runs != 1 {
		t.Fatalf("%d runs, want 1", runs)
	}
}
