package idemhttp_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// bodyApp serves "POST /orders" on a real server: before (the middleware
// in front of idem's: a CSRF check, a method override, a body logger),
// then the middleware, then a handler that answers 201 with what it saw
// of the request: its form, its files and its body.
type bodyApp struct {
	store *idem.Store[*sql.Tx]
	runs  atomic.Int64
	log   syncBuffer
	url   string
	http  *http.Client
}

func newBodyApp(t *testing.T, before func(http.Handler) http.Handler, http2 bool) *bodyApp {
	t.Helper()
	a := &bodyApp{store: idemtest.NewSQLite(t, idem.Config{}).Store}
	mw, err := idemhttp.New(a.store, idemhttp.Config{
		Principal: func(*http.Request) string { return "tenant-1" },
		Logger:    slog.New(slog.NewTextHandler(&a.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", before(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.runs.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, describe(r))
	}))))
	srv := httptest.NewUnstartedServer(mux)
	if http2 {
		srv.EnableHTTP2 = true
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	a.url, a.http = srv.URL+"/orders", srv.Client()
	return a
}

// describe is what a handler sees of r: its form (values, then files
// with their content) and what its body reads.
func describe(r *http.Request) string {
	if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
		return "form error: " + err.Error()
	}
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(r.PostForm)) {
		fmt.Fprintf(&b, "%s=%q ", name, r.PostForm[name])
	}
	if r.MultipartForm != nil {
		for _, name := range slices.Sorted(maps.Keys(r.MultipartForm.File)) {
			for _, fh := range r.MultipartForm.File[name] {
				f, err := fh.Open()
				if err != nil {
					return "open: " + err.Error()
				}
				content, _ := io.ReadAll(f)
				f.Close()
				fmt.Fprintf(&b, "%s:%s(%s)=%q ", name, fh.Filename, fh.Header.Get("Content-Type"), content)
			}
		}
	}
	body, err := io.ReadAll(r.Body)
	fmt.Fprintf(&b, "body=%q", body)
	if err != nil {
		fmt.Fprintf(&b, " (%v)", err)
	}
	return b.String()
}

// sent is a request body and its Content-Type.
type sent struct {
	contentType string
	body        string
	// chunked sends the body with an unknown length: chunked on
	// HTTP/1.1, no Content-Length on HTTP/2.
	chunked bool
}

func form(v url.Values) sent {
	return sent{contentType: "application/x-www-form-urlencoded", body: v.Encode()}
}

// formFile is one file part of a multipart form.
type formFile struct{ field, filename, contentType, content string }

func multipartForm(t *testing.T, values map[string]string, files ...formFile) sent {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	if err := mw.SetBoundary("idem-test-boundary"); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if err := mw.WriteField(name, values[name]); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		h := make(map[string][]string)
		h["Content-Disposition"] = []string{fmt.Sprintf(`form-data; name=%q; filename=%q`, f.field, f.filename)}
		h["Content-Type"] = []string{f.contentType}
		part, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(part, f.content)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return sent{contentType: mw.FormDataContentType(), body: b.String()}
}

type got struct {
	status int
	body   string
	code   string
	replay bool
}

func (a *bodyApp) send(t *testing.T, key string, s sent) got {
	t.Helper()
	var body io.Reader = strings.NewReader(s.body)
	if s.chunked {
		body = struct{ io.Reader }{body} // no length known
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, a.url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", s.contentType)
	req.Header.Set(idemhttp.HeaderKey, key)
	resp, err := a.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	g := got{status: resp.StatusCode, body: string(b), replay: resp.Header.Get(idemhttp.HeaderReplayed) == "true"}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
		g.code = problemCodeOf(b)
	}
	return g
}

func problemCodeOf(b []byte) string {
	var p struct{ Code string }
	_ = json.Unmarshal(b, &p)
	return p.Code
}

// parseForm is a middleware before idem's that parses the form, as a CSRF
// check or a method override does.
func parseForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func parseMultipartForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseMultipartForm(10); err != nil { // files past 10 bytes go to disk
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// formValue reads one field, as a CSRF check does: FormValue parses the
// form, url-encoded or multipart.
func formValue(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.FormValue("csrf") != "token" {
			http.Error(w, "bad CSRF token", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestFormParsedBefore: a form a middleware parsed before idem's (and so
// drained r.Body) is fingerprinted as the handler sees it: the same key
// with another form (another value, file content, filename or file type)
// is a mismatch, never the first form's answer replayed; the same form
// replays; the handler sees the form as it would without idem.
func TestFormParsedBefore(t *testing.T) {
	order := url.Values{"csrf": {"token"}, "item": {"book"}, "qty": {"1"}}
	with := func(name, value string) url.Values {
		v := maps.Clone(order)
		v[name] = []string{value}
		return v
	}
	invoice := formFile{"invoice", "invoice.pdf", "application/pdf", "%PDF-1.7 the first invoice"}
	mp := func(values url.Values, files ...formFile) func(t *testing.T) sent {
		return func(t *testing.T) sent {
			flat := make(map[string]string)
			for k := range values {
				flat[k] = values.Get(k)
			}
			return multipartForm(t, flat, files...)
		}
	}
	urlencoded := func(v url.Values) func(*testing.T) sent { return func(*testing.T) sent { return form(v) } }
	chunked := func(v url.Values) func(*testing.T) sent {
		return func(*testing.T) sent { s := form(v); s.chunked = true; return s }
	}
	for _, tc := range []struct {
		name   string
		before func(http.Handler) http.Handler
		http2  bool
		first  func(*testing.T) sent
		others map[string]func(*testing.T) sent // each: the same key, another request
		seen   string                           // what the handler sees of first
	}{
		{"ParseForm", parseForm, false, urlencoded(order), map[string]func(*testing.T) sent{
			"another value": urlencoded(with("item", "pen")),
			"another field": urlencoded(with("note", "gift")),
		}, `csrf=["token"] item=["book"] qty=["1"] body=""`},
		{"ParseForm, chunked", parseForm, false, chunked(order), map[string]func(*testing.T) sent{
			"another value": chunked(with("item", "pen")),
		}, `csrf=["token"] item=["book"] qty=["1"] body=""`},
		{"ParseForm, HTTP/2 without length", parseForm, true, chunked(order), map[string]func(*testing.T) sent{
			"another value": chunked(with("item", "pen")),
		}, `csrf=["token"] item=["book"] qty=["1"] body=""`},
		{"ParseForm, then closed", parseFormAndClose, false, urlencoded(order), map[string]func(*testing.T) sent{
			"another value": urlencoded(with("item", "pen")),
		}, `csrf=["token"] item=["book"] qty=["1"] body="" (http: invalid Read on closed Body)`},
		{"FormValue", formValue, false, urlencoded(order), map[string]func(*testing.T) sent{
			"another value": urlencoded(with("item", "pen")),
		}, `csrf=["token"] item=["book"] qty=["1"] body=""`},
		{"ParseMultipartForm", parseMultipartForm, false, mp(order, invoice), map[string]func(*testing.T) sent{
			"another value":        mp(with("item", "pen"), invoice),
			"another file content": mp(order, formFile{"invoice", "invoice.pdf", "application/pdf", "%PDF-1.7 another invoice"}),
			"another filename":     mp(order, formFile{"invoice", "other.pdf", "application/pdf", invoice.content}),
			"another file type":    mp(order, formFile{"invoice", "invoice.pdf", "text/plain", invoice.content}),
			"another file field":   mp(order, formFile{"receipt", "invoice.pdf", "application/pdf", invoice.content}),
			"another file":         mp(order, invoice, invoice),
			"no file":              mp(order),
		}, `csrf=["token"] item=["book"] qty=["1"] invoice:invoice.pdf(application/pdf)="%PDF-1.7 the first invoice" body=""`},
		{"FormValue, multipart", formValue, false, mp(order, invoice), map[string]func(*testing.T) sent{
			"another file content": mp(order, formFile{"invoice", "invoice.pdf", "application/pdf", "%PDF-1.7 another invoice"}),
		}, `csrf=["token"] item=["book"] qty=["1"] invoice:invoice.pdf(application/pdf)="%PDF-1.7 the first invoice" body=""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newBodyApp(t, tc.before, tc.http2)
			first := a.send(t, "k", tc.first(t))
			if first.status != http.StatusCreated || first.body != tc.seen {
				t.Fatalf("first: %d %s, want 201 %s", first.status, first.body, tc.seen)
			}
			for name, other := range tc.others {
				if g := a.send(t, "k", other(t)); g.status != http.StatusUnprocessableEntity || g.code != "key-mismatch" {
					t.Errorf("the same key with %s: %d %s, want 422 key-mismatch", name, g.status, g.body)
				}
			}
			replay := a.send(t, "k", tc.first(t))
			if replay.status != http.StatusCreated || replay.body != first.body || !replay.replay {
				t.Fatalf("retry: %d %s (replayed %v), want the 201 replayed", replay.status, replay.body, replay.replay)
			}
			if runs := a.runs.Load(); runs != 1 {
				t.Fatalf("%d runs, want 1", runs)
			}
		})
	}
}

// consume is a middleware before idem's that reads the body, and restores
// it, closes it, or leaves it drained.
func consume(restore, closeIt bool) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if closeIt {
				r.Body.Close()
			}
			if restore {
				r.Body = io.NopCloser(bytes.NewReader(b))
			}
			next.ServeHTTP(w, r)
		})
	}
}

// readParts reads a multipart body part by part (MultipartReader): the
// parts are gone, and r.MultipartForm holds none of them.
func readParts(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for range 100 {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			_, _ = io.Copy(io.Discard, part)
		}
		next.ServeHTTP(w, r)
	})
}

// parseFormAndClose parses the form, then closes the body.
func parseFormAndClose(next http.Handler) http.Handler {
	return parseForm(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body.Close()
		next.ServeHTTP(w, r)
	}))
}

// closeBody closes the body unread: net/http's server body drains it.
func closeBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body.Close()
		next.ServeHTTP(w, r)
	})
}

// TestBodyConsumedBefore: a body a middleware before idem's read (or
// closed) and did not restore is refused with 500 "body-consumed" and an
// ERROR log naming the fix; the handler does not run and nothing is
// claimed, never an empty body fingerprinted for a request that had one.
// A middleware that reads the body and restores it keeps working, and so
// does a request without a body.
func TestBodyConsumedBefore(t *testing.T) {
	passThrough := func(next http.Handler) http.Handler { return next }
	order := sent{contentType: "application/json", body: `{"item":"book"}`}
	other := sent{contentType: "application/json", body: `{"item":"pen"}`}
	chunkedOrder := order
	chunkedOrder.chunked = true
	empty := sent{contentType: "application/json"}
	const consumed = "body-consumed"
	for _, tc := range []struct {
		name    string
		before  func(http.Handler) http.Handler
		http2   bool
		first   sent
		refused string // the problem code, "" when served
	}{
		{"read, not restored", consume(false, false), false, order, consumed},
		{"read and closed", consume(false, true), false, order, consumed},
		{"closed unread", closeBody, false, order, consumed},
		// HTTP/2's server body, closed unread, fails with an error of its
		// own that says nothing typed: refused as unreadable.
		{"closed unread, HTTP/2", closeBody, true, order, "body-unreadable"},
		{"read, not restored, chunked", consume(false, false), false, chunkedOrder, consumed},
		{"read, not restored, HTTP/2", consume(false, false), true, order, consumed},
		{"read, not restored, HTTP/2 without length", consume(false, false), true, chunkedOrder, consumed},
		{"multipart read part by part", readParts, false, multipartForm(t, map[string]string{"item": "book"}), consumed},
		{"read and restored", consume(true, false), false, order, ""},
		{"read, closed and restored", consume(true, true), false, order, ""},
		{"read and restored, chunked", consume(true, false), false, chunkedOrder, ""},
		{"read and restored, HTTP/2 without length", consume(true, false), true, chunkedOrder, ""},
		{"no body", passThrough, false, empty, ""},
		{"no body, read before", consume(false, false), false, empty, ""},
		{"no body, HTTP/2", consume(false, false), true, empty, ""},
		// An empty body of unknown length: net/http's client sends a
		// POST's as an empty chunked body (HTTP/1.1) or a body without
		// Content-Length (HTTP/2), which cannot be told from one a
		// middleware drained, and is refused. idemhttp.Transport sends
		// none instead (TestTransportSendsNoEmptyBodyOfUnknownLength).
		{"empty, unknown length", passThrough, false, sent{contentType: "application/json", chunked: true}, consumed},
		{"empty, unknown length, HTTP/2", passThrough, true, sent{contentType: "application/json", chunked: true}, consumed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newBodyApp(t, tc.before, tc.http2)
			first := a.send(t, "k", tc.first)
			if tc.refused != "" {
				if first.code != tc.refused || first.status != map[string]int{consumed: 500, "body-unreadable": 400}[tc.refused] {
					t.Fatalf("first: %d %s, want %s", first.status, first.body, tc.refused)
				}
				if runs := a.runs.Load(); runs != 0 {
					t.Fatalf("%d runs, want none", runs)
				}
				page, err := a.store.List(t.Context(), idem.ListFilter{})
				if err != nil || len(page.Records) != 0 {
					t.Fatalf("records %+v (%v), want none: nothing claimed", page.Records, err)
				}
				if log := a.log.String(); tc.refused == consumed && (!strings.Contains(log, "level=ERROR") || !strings.Contains(log, "r.Body = io.NopCloser")) {
					t.Fatalf("log %q, want an ERROR naming the fix", log)
				}
				return
			}
			want := fmt.Sprintf("body=%q", tc.first.body)
			if first.status != http.StatusCreated || first.body != want {
				t.Fatalf("first: %d %s, want 201 %s", first.status, first.body, want)
			}
			if tc.first.body != "" {
				o := other
				o.chunked = tc.first.chunked
				if g := a.send(t, "k", o); g.status != http.StatusUnprocessableEntity {
					t.Fatalf("the same key with another body: %d %s, want 422", g.status, g.body)
				}
			}
			if g := a.send(t, "k", tc.first); g.status != http.StatusCreated || g.body != want || !g.replay {
				t.Fatalf("retry: %d %s (replayed %v), want the 201 replayed", g.status, g.body, g.replay)
			}
		})
	}
}

// TestFormSameOnEveryRun: every run of the handler (here, again after a
// serialization failure) sees the form a middleware parsed before idem's
// as it was parsed, whatever an earlier run changed in it.
func TestFormSameOnEveryRun(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	h := parseMultipartForm(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, describe(r))
		if len(seen) > 1 {
			w.WriteHeader(http.StatusCreated)
			return
		}
		// The first run changes the form it got, then fails in a way the
		// store retries.
		r.PostForm.Set("item", "changed")
		r.Form.Set("item", "changed")
		r.MultipartForm.Value["item"][0] = "changed"
		r.MultipartForm.File["invoice"][0].Filename = "changed.pdf"
		r.MultipartForm.File["invoice"][0].Header.Set("Content-Type", "text/changed")
		delete(r.MultipartForm.File, "receipt")
		idemhttp.Fail(w, r, fmt.Errorf("simulated: %w", idem.ErrSerialization))
	})))
	s := multipartForm(t, map[string]string{"item": "book"},
		formFile{"invoice", "invoice.pdf", "application/pdf", "%PDF-1.7 invoice"},
		formFile{"receipt", "receipt.txt", "text/plain", "paid"})
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "/orders", strings.NewReader(s.body))
	req.Pattern = "POST /orders"
	req.Header.Set("Content-Type", s.contentType)
	req.Header.Set(idemhttp.HeaderKey, "k")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusCreated || len(seen) != 2 {
		t.Fatalf("%d after %d runs, want 201 after 2", rec.Code, len(seen))
	}
	want := `item=["book"] invoice:invoice.pdf(application/pdf)="%PDF-1.7 invoice" receipt:receipt.txt(text/plain)="paid" body=""`
	if seen[0] != want || seen[1] != want {
		t.Fatalf("the runs saw\n%s\n%s\nwant both %s", seen[0], seen[1], want)
	}
}

// TestTransportSendsNoEmptyBodyOfUnknownLength: a body of unknown length
// that turns out empty goes out as no body, over HTTP/1.1 and HTTP/2, so
// the middleware does not take it for one a middleware drained.
func TestTransportSendsNoEmptyBodyOfUnknownLength(t *testing.T) {
	for _, http2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("HTTP/2 %v", http2), func(t *testing.T) {
			t.Parallel()
			a := newBodyApp(t, func(next http.Handler) http.Handler { return next }, http2)
			client := &http.Client{Transport: &idemhttp.Transport{Base: a.http.Transport}}
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, a.url, struct{ io.Reader }{strings.NewReader("")})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusCreated || string(b) != `body=""` {
				t.Fatalf("%d %s, want 201 body=\"\"", resp.StatusCode, b)
			}
		})
	}
}

// TestFormParsedBeforeMethodOverride: a method override in front parses
// a POST's form and turns the request into a DELETE, a method net/http
// reads no form for: the parsed form still stands for the body, as for the
// POST it was. A DELETE sent as one, whose form a middleware in front
// asked for (net/http left its body unread), is fingerprinted by its body.
func TestFormParsedBeforeMethodOverride(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal: func(*http.Request) string { return "tenant-1" },
		Methods:   []string{http.MethodPost, http.MethodDelete},
	})
	if err != nil {
		t.Fatal(err)
	}
	override := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if m := r.FormValue("_method"); r.Method == http.MethodPost && m != "" {
				r.Method = m
			}
			next.ServeHTTP(w, r)
		})
	}
	h := override(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, r.Method+" "+describe(r))
	})))
	send := func(method, key string, v url.Values) *httptest.ResponseRecorder {
		req := httptest.NewRequestWithContext(t.Context(), method, "/orders/7", strings.NewReader(v.Encode()))
		req.Pattern = "/orders/{id}"
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set(idemhttp.HeaderKey, key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	cancel := url.Values{"_method": {"DELETE"}, "reason": {"duplicate"}}
	first := send(http.MethodPost, "k", cancel)
	if want := `DELETE _method=["DELETE"] reason=["duplicate"] body=""`; first.Code != http.StatusOK || first.Body.String() != want {
		t.Fatalf("overridden: %d %s, want 200 %s", first.Code, first.Body, want)
	}
	if g := send(http.MethodPost, "k", url.Values{"_method": {"DELETE"}, "reason": {"fraud"}}); g.Code != http.StatusUnprocessableEntity {
		t.Errorf("the same key with another reason: %d %s, want 422", g.Code, g.Body)
	}
	if g := send(http.MethodPost, "k", cancel); g.Code != http.StatusOK || g.Header().Get(idemhttp.HeaderReplayed) != "true" || g.Body.String() != first.Body.String() {
		t.Errorf("retry: %d %v %s, want the answer replayed", g.Code, g.Header(), g.Body)
	}

	asDelete := url.Values{"reason": {"duplicate"}}
	first = send(http.MethodDelete, "d", asDelete)
	if want := `DELETE body="reason=duplicate"`; first.Code != http.StatusOK || first.Body.String() != want {
		t.Fatalf("a DELETE: %d %s, want 200 %s", first.Code, first.Body, want)
	}
	if g := send(http.MethodDelete, "d", url.Values{"reason": {"fraud"}}); g.Code != http.StatusUnprocessableEntity {
		t.Errorf("a DELETE, the same key with another reason: %d %s, want 422", g.Code, g.Body)
	}
}
