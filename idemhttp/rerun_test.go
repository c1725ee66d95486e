package idemhttp_test

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// TestRerunSeesTheRequestAfresh: what one run of the handler changes in its
// request (here a gzip decoder between idem and the handler, which drops
// Content-Encoding, and a handler that edits a header and the URL) does not
// reach the run that follows a serialization failure: both see the request
// as the client sent it.
func TestRerunSeesTheRequestAfresh(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		seen = append(seen, fmt.Sprintf("%s %s?%s %q", r.Header.Get("X-Order"), r.URL.Path, r.URL.RawQuery, body))
		if len(seen) > 1 {
			w.WriteHeader(http.StatusCreated)
			return
		}
		r.Header.Set("X-Order", "changed")
		r.URL.RawQuery = "changed=1"
		idemhttp.Fail(w, r, fmt.Errorf("simulated: %w", idem.ErrSerialization))
	})
	h := mw.Wrap(gunzip(handler))

	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, `{"item":88}`)
	zw.Close()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders?a=1", &zipped)
	req.Pattern = "POST /orders"
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set("X-Order", "o-1")
	req.Header.Set(idemhttp.HeaderKey, "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	want := `o-1 /orders?a=1 "{\"item\":88}"`
	if rec.Code != http.StatusCreated || len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Fatalf("%d after runs that saw %q, want 201 after 2 runs that saw %s", rec.Code, seen, want)
	}
}

// gunzip decodes a gzip request body the way decoding middleware does: it
// swaps the body and drops Content-Encoding from the request's header.
func gunzip(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			r.Body = zr
			r.Header.Del("Content-Encoding")
		}
		next.ServeHTTP(w, r)
	})
}

// TestRerunKeepsTheFormsFiles: a run that removes the files of a form
// parsed before the middleware (defer r.MultipartForm.RemoveAll(), a
// common habit) does not take them from the run that follows a
// serialization failure.
func TestRerunKeepsTheFormsFiles(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	h := parseMultipartForm(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer r.MultipartForm.RemoveAll()
		seen = append(seen, describe(r))
		if len(seen) == 1 {
			idemhttp.Fail(w, r, fmt.Errorf("simulated: %w", idem.ErrSerialization))
			return
		}
		w.WriteHeader(http.StatusCreated)
	})))
	s := multipartForm(t, map[string]string{"item": "book"}, formFile{"invoice", "invoice.pdf", "application/pdf", "%PDF-1.7 a file on disk"})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader(s.body))
	req.Pattern = "POST /orders"
	req.Header.Set("Content-Type", s.contentType)
	req.Header.Set(idemhttp.HeaderKey, "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	want := `item=["book"] invoice:invoice.pdf(application/pdf)="%PDF-1.7 a file on disk" body=""`
	if rec.Code != http.StatusCreated || len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Fatalf("%d after runs that saw %q, want 201 after 2 runs that saw %s", rec.Code, seen, want)
	}
}

// TestBodyPartlyReadBefore: a middleware that read the start of the body
// and did not restore it leaves the handler the rest; requests that differ
// only in that start must not share an answer, so the request is refused
// as a consumed body, nothing claimed.
func TestBodyPartlyReadBefore(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	sniff := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadFull(r.Body, make([]byte, 8)) // sniffs the start, keeps it
			next.ServeHTTP(w, r)
		})
	}
	h := sniff(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })))
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader(`{"item":88,"qty":1}`))
	req.Pattern = "POST /orders"
	req.Header.Set(idemhttp.HeaderKey, "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), "body-consumed") {
		t.Fatalf("got %d %s, want 500 body-consumed", rec.Code, rec.Body)
	}
	if n, err := store.Counts(t.Context(), ""); err != nil || n.Total() != 0 {
		t.Errorf("Counts: %+v, %v; want nothing claimed", n, err)
	}
}

// TestBodyDecodedBefore: a decoder in front that swaps the body for the
// decoded one and leaves Content-Encoding and Content-Length as sent (as
// echo's Decompress does) is not taken for one that read the body's start.
func TestBodyDecodedBefore(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }})
	if err != nil {
		t.Fatal(err)
	}
	decode := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			r.Body = zr // Content-Encoding and Content-Length stay
			next.ServeHTTP(w, r)
		})
	}
	h := decode(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusCreated)
		w.Write(b)
	})))
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	io.WriteString(zw, "a=1")
	zw.Close()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", bytes.NewReader(zipped.Bytes()))
	req.Pattern = "POST /orders"
	req.Header.Set("Content-Encoding", "gzip")
	req.Header.Set(idemhttp.HeaderKey, "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || rec.Body.String() != "a=1" {
		t.Fatalf("got %d %q, want 201 a=1", rec.Code, rec.Body)
	}
}
