package idemhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/idemhttp"
)

// checksummed answers with trailers in both of net/http's forms: one
// declared in the Trailer header before WriteHeader and set after the body
// (with an early value, which net/http sends as a header too), one set with
// http.TrailerPrefix.
func checksummed(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Trailer", "X-Checksum")
	w.Header().Set("X-Checksum", "pending")
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, "order 1")
	w.Header().Set("X-Checksum", "sum-1")
	w.Header().Set(http.TrailerPrefix+"X-Late", "late-1")
}

// TestTrailers: on a real server, over HTTP/1.1 and HTTP/2, the first
// answer through the middleware carries the handler's trailers as the
// handler alone sends them; a replay carries none (trailers are not
// stored), and neither the Trailer header nor a trailer as a header.
func TestTrailers(t *testing.T) {
	want := http.Header{"X-Checksum": {"sum-1"}, "X-Late": {"late-1"}}
	for _, tc := range []struct {
		name  string
		start func(*httptest.Server)
		proto int
	}{
		{"HTTP/1.1", (*httptest.Server).Start, 1},
		{"HTTP/2", func(s *httptest.Server) { s.EnableHTTP2 = true; s.StartTLS() }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := idemhttp.New(newStore(t), idemhttp.Config{Principal: func(*http.Request) string { return "p" }, Unrouted: true})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			mux.HandleFunc("POST /direct", checksummed)
			mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(checksummed)))
			srv := httptest.NewUnstartedServer(mux)
			tc.start(srv)
			defer srv.Close()
			client := srv.Client()
			post := func(path string) (*http.Response, string) {
				t.Helper()
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, strings.NewReader("{}"))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set(idemhttp.HeaderKey, "trailers-1")
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				body, err := io.ReadAll(resp.Body) // trailers arrive after the body
				if err != nil {
					t.Fatal(err)
				}
				if resp.ProtoMajor != tc.proto {
					t.Fatalf("%s: answered over %s", path, resp.Proto)
				}
				return resp, string(body)
			}
			direct, _ := post("/direct")
			if !reflect.DeepEqual(direct.Trailer, want) {
				t.Fatalf("the handler alone sends trailers %v, want %v", direct.Trailer, want)
			}
			first, body := post("/orders")
			if first.StatusCode != http.StatusCreated || body != "order 1" || !reflect.DeepEqual(first.Trailer, want) {
				t.Fatalf("first answer: %d %q trailers %v, want 201 %q and trailers %v", first.StatusCode, body, first.Trailer, "order 1", want)
			}
			for _, name := range []string{"Trailer", "X-Checksum"} {
				if got, want := first.Header.Values(name), direct.Header.Values(name); !reflect.DeepEqual(got, want) {
					t.Errorf("first answer's %s header %q, want %q as the handler alone sends it", name, got, want)
				}
			}
			again, body := post("/orders")
			if again.Header.Get(idemhttp.HeaderReplayed) != "true" || again.StatusCode != http.StatusCreated || body != "order 1" {
				t.Fatalf("retry: %d %q %v, want a replay of 201 %q", again.StatusCode, body, again.Header, "order 1")
			}
			if len(again.Trailer) != 0 || again.Header.Get("Trailer") != "" || again.Header.Get("X-Checksum") != "" || again.Header.Get("X-Late") != "" {
				t.Fatalf("replay carries trailers %v, header %v; want none", again.Trailer, again.Header)
			}
			if again.ContentLength != int64(len("order 1")) {
				t.Errorf("replay Content-Length %d, want %d", again.ContentLength, len("order 1"))
			}
		})
	}
}
