package transports

import (
	"net/http"

	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemhttp"
)

// netHTTP is idemhttp on a ServeMux: each route's handler is wrapped, the
// drawn layers in front of the wrap, the auth layer first.
var netHTTP = transport{
	name:     "nethttp",
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
		mux := http.NewServeMux()
		for _, rt := range []struct{ name, pattern string }{{routeOrders, "/orders/{id}"}, {routeRefunds, "/refunds"}} {
			handler := wrap(httpHandler(h, rt.name, func(r *http.Request) string { return r.PathValue("id") }))
			for i := len(stack) - 1; i >= 0; i-- {
				if stack[i] == layerNested {
					handler = wrap(handler)
					continue
				}
				handler = netHTTPLayer(t, stack[i])(handler)
			}
			mux.Handle("POST "+rt.pattern, authLayer(h)(handler))
		}
		return &httpServer{handler: mux, route: routeTemplates{routeOrders: "/orders/{id}", routeRefunds: "/refunds"}.get}
	},
}
