package transports

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemhttp"
)

// chiTransport is idemhttp in chi, the chi way: the drawn layers with the
// router's Use, idem on each route with r.With, and, nested, also with a
// group's Use.
var chiTransport = transport{
	name:     "chi",
	layers:   []string{layerParseForm, layerReadBody, layerDumpBody, layerGzip, layerLimit, layerRecoverer, layerNested},
	features: httpFeatures([]string{styleWrite}),
	vocab:    httpVocabulary,
	start: func(t *rapid.T, h *harness, stack []string, protect bool) server {
		wrap := func(next http.Handler) http.Handler { return next }
		if protect {
			mw, err := idemhttp.New(h.b.store, idemConfig())
			if err != nil {
				t.Fatal(err)
			}
			wrap = mw.Wrap
		}
		r := chi.NewRouter()
		r.Use(authLayer(h))
		nested := false
		for _, l := range stack {
			switch l {
			case layerNested:
				nested = true
			case layerRecoverer:
				r.Use(middleware.Recoverer)
			default:
				r.Use(netHTTPLayer(t, l))
			}
		}
		id := func(r *http.Request) string { return chi.URLParam(r, "id") }
		r.Group(func(g chi.Router) {
			if nested {
				g.Use(wrap)
			}
			g.With(wrap).Post("/orders/{id}", httpHandler(h, routeOrders, id).ServeHTTP)
			g.With(wrap).Post("/refunds", httpHandler(h, routeRefunds, id).ServeHTTP)
		})
		return &httpServer{handler: r, route: routeTemplates{routeOrders: "/orders/{id}", routeRefunds: "/refunds"}.get}
	},
}
