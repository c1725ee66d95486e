package transports

import (
	"database/sql"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemhttp"
)

// echoTransport is idemecho on echo routes: the drawn layers with e.Use
// (echo's own middleware where it has one), idem on each route, and,
// nested, also with e.Use.
var echoTransport = transport{
	name:     "echo",
	layers:   []string{layerParseForm, layerReadBody, layerDumpBody, layerGzip, layerLimit, layerRecoverer, layerNested},
	features: httpFeatures([]string{styleWrite, styleError}),
	vocab:    httpVocabulary,
	start: func(t *rapid.T, h *harness, stack []string, protect bool) server {
		wrap := func(next echo.HandlerFunc) echo.HandlerFunc { return next }
		if protect {
			mw, err := idemecho.New(h.b.store, idemConfig())
			if err != nil {
				t.Fatal(err)
			}
			wrap = mw.Wrap()
		}
		e := echo.New()
		e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				c.SetRequest(authenticate(h, c.Request()))
				return next(c)
			}
		})
		for _, l := range stack {
			e.Use(echoLayer(t, l, wrap))
		}
		e.POST("/orders/:id", echoHandler(h, routeOrders), wrap)
		e.POST("/refunds", echoHandler(h, routeRefunds), wrap)
		return &httpServer{handler: e, route: routeTemplates{routeOrders: "/orders/:id", routeRefunds: "/refunds"}.get}
	},
}

func echoLayer(t *rapid.T, name string, wrap echo.MiddlewareFunc) echo.MiddlewareFunc {
	switch name {
	case layerParseForm:
		return func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				_ = c.FormValue("csrf_token")
				return next(c)
			}
		}
	case layerReadBody:
		return func(next echo.HandlerFunc) echo.HandlerFunc {
			return func(c echo.Context) error {
				_, _ = io.ReadAll(c.Request().Body)
				return next(c)
			}
		}
	case layerDumpBody:
		return middleware.BodyDump(func(echo.Context, []byte, []byte) {})
	case layerGzip:
		return middleware.Decompress()
	case layerLimit:
		return middleware.BodyLimit("2K")
	case layerRecoverer:
		return middleware.RecoverWithConfig(middleware.RecoverConfig{
			DisablePrintStack: true,
			LogErrorFunc:      func(_ echo.Context, err error, _ []byte) error { return err },
		})
	case layerNested:
		return wrap
	}
	t.Fatalf("no echo layer %q", name)
	return nil
}

// echoHandler reads the request the echo way (c.Param, c.QueryParams,
// c.FormParams for forms, the body for the rest) and answers with c.Blob,
// or by returning an HTTPError (styleError).
func echoHandler(h *harness, route string) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		var body string
		switch mediaType(r) {
		case "application/x-www-form-urlencoded", "multipart/form-data":
			form, err := c.FormParams()
			if err != nil {
				body = "form-error:" + err.Error()
			} else {
				body = formView(form)
			}
		case "application/json":
			b, _ := io.ReadAll(r.Body)
			body = jsonView(b)
		default:
			b, _ := io.ReadAll(r.Body)
			body = rawView(b)
		}
		v := h.view(principalOf(r.Context()), route, c.Param("id"), c.QueryParams(), body)
		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
		s := h.step(r.Header.Get(headerStep))
		d := h.act(r.Context(), tx, r.Header.Get(headerStep), v)
		c.Response().Header().Set(headerRun, d.run)
		if d.err != nil {
			return d.err
		}
		if s != nil && s.req.Style == styleError {
			return echo.NewHTTPError(d.answer.httpStatus(), "the handler's answer")
		}
		return c.Blob(d.answer.httpStatus(), "application/json", d.body)
	}
}

var _ http.Handler = (*echo.Echo)(nil)
