package main

import (
	"context"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// middleware wraps the order endpoint in idemhttp's middleware: the same
// write, reached through ServeHTTP with no network in between.
func middleware[TTx any](store *idem.Store[TTx], insert func(ctx context.Context, tx TTx) error) (http.Handler, error) {
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal: func(*http.Request) string { return "tenant-1" },
		Route:     func(*http.Request) string { return "/orders" },
	})
	if err != nil {
		return nil, err
	}
	return mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := idemhttp.Tx[TTx](r.Context())
		if !ok {
			http.Error(w, "no transaction", http.StatusInternalServerError)
			return
		}
		if err := insert(r.Context(), tx); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		resp := response(0)
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.Status)
		w.Write(resp.Body)
	})), nil
}
