package transports

import (
	"bytes"
	"compress/gzip"
	"database/sql"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"
	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
)

func init() { gin.SetMode(gin.ReleaseMode) }

// ginTransport is idemgin on gin routes: the drawn layers with r.Use, idem
// wrapping each route's handler, and, nested, wrapping it twice.
var ginTransport = transport{
	name:     "gin",
	layers:   []string{layerParseForm, layerReadBody, layerDumpBody, layerGzip, layerBindWith, layerRecoverer, layerNested},
	features: httpFeatures([]string{styleWrite, styleError}),
	vocab:    httpVocabulary,
	start: func(t *rapid.T, h *harness, stack []string, protect bool) server {
		wrap := func(next gin.HandlerFunc) gin.HandlerFunc { return next }
		if protect {
			mw, err := idemgin.New(h.b.store, idemConfig())
			if err != nil {
				t.Fatal(err)
			}
			wrap = mw.Wrap
		}
		r := gin.New()
		r.Use(func(c *gin.Context) { c.Request = authenticate(h, c.Request); c.Next() })
		nested := false
		for _, l := range stack {
			if l == layerNested {
				nested = true
				continue
			}
			r.Use(ginLayer(t, l))
		}
		if !protect && slices.Contains(stack, layerBindWith) {
			r.Use(ginHandOverBound)
		}
		for _, rt := range []struct{ name, path string }{{routeOrders, "/orders/:id"}, {routeRefunds, "/refunds"}} {
			handler := wrap(ginHandler(h, rt.name))
			if nested {
				handler = wrap(handler)
			}
			r.POST(rt.path, handler)
		}
		return &httpServer{handler: r, route: routeTemplates{routeOrders: "/orders/:id", routeRefunds: "/refunds"}.get}
	},
}

func ginLayer(t *rapid.T, name string) gin.HandlerFunc {
	switch name {
	case layerParseForm:
		return func(c *gin.Context) { _ = c.PostForm("csrf_token"); c.Next() }
	case layerReadBody:
		return func(c *gin.Context) { _, _ = io.ReadAll(c.Request.Body); c.Next() }
	case layerDumpBody:
		return func(c *gin.Context) {
			b, _ := io.ReadAll(c.Request.Body)
			c.Request.Body = io.NopCloser(bytes.NewReader(b))
			c.Next()
		}
	case layerGzip:
		return func(c *gin.Context) {
			if c.GetHeader("Content-Encoding") == "gzip" {
				zr, err := gzip.NewReader(c.Request.Body)
				if err != nil {
					c.AbortWithStatus(http.StatusBadRequest)
					return
				}
				c.Request.Body = zr
				c.Request.Header.Del("Content-Encoding")
				c.Request.ContentLength = -1
			}
			c.Next()
		}
	case layerBindWith:
		// Binds the JSON body for, say, a validation middleware: gin caches
		// the bytes in c.Keys[gin.BodyBytesKey] and the body is drained.
		return func(c *gin.Context) {
			var m map[string]any
			_ = c.ShouldBindBodyWith(&m, binding.JSON)
			c.Next()
		}
	case layerRecoverer:
		return gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(http.StatusInternalServerError) })
	}
	t.Fatalf("no gin layer %q", name)
	return nil
}

// ginHandOverBound does, without idem, what idemgin promises the handler
// of a body a middleware bound with ShouldBindBodyWith: the bytes gin
// cached, when there are any, are the handler's c.Request.Body. The layers
// between the binding and the handler saw the drained body either way.
func ginHandOverBound(c *gin.Context) {
	if v, ok := c.Get(gin.BodyBytesKey); ok {
		if b, ok := v.([]byte); ok && len(b) > 0 {
			c.Request.Body = io.NopCloser(bytes.NewReader(b))
		}
	}
	c.Next()
}

// ginHandler reads the request the gin way (c.Param, c.PostForm for forms,
// c.ShouldBindBodyWith for JSON, so it sees a body a middleware bound
// before) and answers with c.Data, or with c.AbortWithStatusJSON
// (styleError).
func ginHandler(h *harness, route string) gin.HandlerFunc {
	return func(c *gin.Context) {
		var body string
		switch mediaType(c.Request) {
		case "application/x-www-form-urlencoded", "multipart/form-data":
			form := url.Values{} // read with gin's form accessors (parsed once, cached in c)
			for _, name := range []string{"amount", "currency", "pad"} {
				if v, ok := c.GetPostFormArray(name); ok {
					form[name] = v
				}
			}
			body = formView(form)
		case "application/json":
			var m map[string]any
			_ = c.ShouldBindBodyWith(&m, binding.JSON)
			b, _ := c.Get(gin.BodyBytesKey)
			raw, _ := b.([]byte)
			body = jsonView(raw)
		default:
			b, _ := io.ReadAll(c.Request.Body)
			body = rawView(b)
		}
		v := h.view(principalOf(c.Request.Context()), route, c.Param("id"), c.Request.URL.Query(), body)
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		id := c.GetHeader(headerStep)
		s := h.step(id)
		d := h.act(c.Request.Context(), tx, id, v)
		c.Header(headerRun, d.run)
		if d.err != nil {
			_ = c.Error(d.err)
			return
		}
		if s != nil && s.req.Style == styleError {
			c.AbortWithStatusJSON(d.answer.httpStatus(), gin.H{"error": "the handler's answer"})
			return
		}
		c.Data(d.answer.httpStatus(), "application/json", d.body)
	}
}
