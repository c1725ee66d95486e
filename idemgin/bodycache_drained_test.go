package idemgin_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// TestBoundAfterFormParsed: a middleware parses the form (draining the
// body), then another binds the body with ShouldBindBodyWith, which caches
// the drained body's zero bytes. The form is what the handler sees: two
// forms under one key are not the same request, and a request with no body
// is not the same as a form.
func TestBoundAfterFormParsed(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{})
	mw, err := idemgin.New(lite.Store, idemhttp.Config{
		Principal: func(r *http.Request) string { return "t1" },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.Use(func(c *gin.Context) { _ = c.PostForm("csrf_token"); c.Next() })
	r.Use(func(c *gin.Context) {
		var m map[string]any
		_ = c.ShouldBindBodyWith(&m, binding.JSON)
		c.Next()
	})
	r.POST("/refunds", mw.Wrap(func(c *gin.Context) {
		c.String(http.StatusCreated, "refunded %q", c.PostForm("amount"))
	}))
	send := func(body string) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/refunds", strings.NewReader(body))
		req.Header.Set(idemhttp.HeaderKey, "k1")
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		return w
	}
	if w := send("amount=10"); w.Code != http.StatusCreated || w.Body.String() != `refunded "10"` {
		t.Fatalf("first form: %d %q", w.Code, w.Body)
	}
	for _, body := range []string{"amount=99", ""} {
		w := send(body)
		if w.Header().Get(idemhttp.HeaderReplayed) != "" || w.Code != http.StatusUnprocessableEntity {
			t.Errorf("body %q under the first form's key: %d %q (replayed %q), want 422", body, w.Code, w.Body, w.Header().Get(idemhttp.HeaderReplayed))
		}
	}
	if w := send("amount=10"); w.Header().Get(idemhttp.HeaderReplayed) != "true" || w.Body.String() != `refunded "10"` {
		t.Errorf("the first form again: %d %q, want its replay", w.Code, w.Body)
	}
}
