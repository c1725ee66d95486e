package transports

import (
	"bytes"
	"compress/gzip"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"pgregory.net/rapid"

	"github.com/idemkit/idem/idemhttp"
)

// The HTTP transports share the wire, the client and the handler's reading
// of a request; each builds its own stack.

const (
	headerUser = "X-User" // the auth layer's credential: the user
	headerStep = "X-Step" // the step the request belongs to

	maxRequestBody = 4096 // idem's limit (Config.MaxRequestBody)
	limitBytes     = 2048 // a limit layer's
	boundary       = "transportsboundary"
)

// The layers an HTTP stack draws from (each framework has its own subset
// and its own implementation of each).
const (
	layerParseForm = "parse-form"     // a middleware reads a form value before idem
	layerReadBody  = "read-body"      // a middleware reads the body and does not put it back
	layerDumpBody  = "dump-body"      // a middleware reads the body and puts it back
	layerGzip      = "gzip"           // decodes a gzip-encoded request body
	layerLimit     = "limit"          // a request body limit
	layerRecoverer = "recoverer"      // the framework's panic recovery
	layerBindWith  = "bind-body-with" // gin: c.ShouldBindBodyWith before idem
	layerNested    = "nested"         // the same store's idem installed twice on the route
)

var httpVocabulary = vocabulary{
	status:   func(a answer) string { return strconv.Itoa(a.httpStatus()) },
	failed:   "500",
	aborted:  "500",
	panicked: []string{"500"},
	mismatch: "key-mismatch",
	tooLarge: "413",
}

// httpFeatures is what an HTTP stack draws.
func httpFeatures(styles []string) func(stack []string) features {
	return func(stack []string) features {
		return features{
			kinds:  []string{kindJSON, kindForm, kindMultipart, kindEmpty},
			users:  []string{"alice", "bob"},
			styles: styles,
			routes: []string{routeOrders, routeRefunds},
			gzip:   slices.Contains(stack, layerGzip),
			large:  true,
			faults: []string{faultNone, faultNone, faultNone, faultFail, faultPanic, faultRetry, faultFailed, faultSlow, faultHangup},
		}
	}
}

// httpServer sends requests to a handler in process, as net/http's server
// would hand them over.
type httpServer struct {
	handler http.Handler
	route   func(string) string
}

func (s *httpServer) scope(principal, route string) string {
	return idemhttp.Scope(principal, "POST", s.route(route))
}

func (s *httpServer) wire(r request) string {
	ct, body, enc := encodeHTTP(r)
	return fmt.Sprintf("POST %s content-type=%q content-encoding=%q body=%q", r.target(), ct, enc, body)
}

func (s *httpServer) send(ctx context.Context, st *step) outcome {
	ctx, hangup := context.WithCancel(ctx)
	defer hangup()
	st.hangup = hangup
	ct, body, enc := encodeHTTP(st.req)
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodPost, st.req.target(), rd)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	if enc != "" {
		req.Header.Set("Content-Encoding", enc)
	}
	req.Header.Set(idemhttp.HeaderKey, st.req.Key)
	req.Header.Set(headerUser, st.req.User)
	req.Header.Set(headerStep, st.id)
	rec := httptest.NewRecorder()
	if p := serveRecovering(s.handler, rec, req); p != nil {
		return outcome{Aborted: true, Err: fmt.Sprintf("the panic reached net/http: %v", p)}
	}
	if ctx.Err() != nil {
		return outcome{Aborted: true, Err: "the client hung up"}
	}
	return httpOutcome(rec)
}

// serveRecovering serves req as net/http's server does: a panic that
// reaches it aborts the connection (the client gets no answer).
func serveRecovering(h http.Handler, w http.ResponseWriter, r *http.Request) (p any) {
	defer func() { p = recover() }()
	h.ServeHTTP(w, r)
	return nil
}

func httpOutcome(rec *httptest.ResponseRecorder) outcome {
	o := outcome{Status: strconv.Itoa(rec.Code), Body: rec.Body.String(),
		Replayed: rec.Header().Get(idemhttp.HeaderReplayed) == "true", Runs: rec.Header().Values(headerRun)}
	if strings.HasPrefix(rec.Header().Get("Content-Type"), "application/problem+json") {
		var p struct{ Code string }
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		o.Code = p.Code
	}
	return o
}

// encodeHTTP puts r's body on the wire: its content type, bytes and
// content encoding. The same request always encodes to the same bytes.
func encodeHTTP(r request) (contentType string, body []byte, encoding string) {
	fields := r.Fields
	if r.Large {
		fields = append(slices.Clone(fields), field{"pad", strings.Repeat("x", 2*maxRequestBody)})
	}
	switch r.Kind {
	case kindJSON:
		var b bytes.Buffer
		b.WriteByte('{')
		for i, f := range fields {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%q:%q", f.Name, f.Value)
		}
		b.WriteByte('}')
		contentType, body = "application/json", b.Bytes()
	case kindForm:
		parts := make([]string, len(fields))
		for i, f := range fields {
			parts[i] = url.QueryEscape(f.Name) + "=" + url.QueryEscape(f.Value)
		}
		contentType, body = "application/x-www-form-urlencoded", []byte(strings.Join(parts, "&"))
	case kindMultipart:
		var b bytes.Buffer
		w := multipart.NewWriter(&b)
		_ = w.SetBoundary(boundary)
		for _, f := range fields {
			_ = w.WriteField(f.Name, f.Value)
		}
		_ = w.Close()
		contentType, body = w.FormDataContentType(), b.Bytes()
	default:
		return "", nil, ""
	}
	if r.Gzip {
		var z bytes.Buffer
		zw := gzip.NewWriter(&z)
		_, _ = zw.Write(body)
		_ = zw.Close()
		body, encoding = z.Bytes(), "gzip"
	}
	return contentType, body, encoding
}

// principalKey is the context key of the principal the auth layer sets.
type principalKey struct{}

// authenticate is the auth layer: the principal is the sequence's
// namespace and the user the request names.
func authenticate(h *harness, r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), principalKey{}, h.principal(r.Header.Get(headerUser))))
}

func principalOf(ctx context.Context) string {
	p, _ := ctx.Value(principalKey{}).(string)
	return p
}

// idemConfig is the middleware's configuration on every HTTP stack.
func idemConfig() idemhttp.Config {
	return idemhttp.Config{
		Principal:      func(r *http.Request) string { return principalOf(r.Context()) },
		MaxRequestBody: maxRequestBody,
		Logger:         slog.New(slog.DiscardHandler),
	}
}

// mediaType is the request's media type, without parameters.
func mediaType(r *http.Request) string {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt
}

// bodyView is how a net/http handler reads the body: a form parsed (as
// r.FormValue does), JSON decoded, anything else read as bytes.
func bodyView(r *http.Request) string {
	switch mediaType(r) {
	case "application/x-www-form-urlencoded", "multipart/form-data":
		if err := r.ParseMultipartForm(1 << 20); err != nil && err != http.ErrNotMultipart {
			return "form-error:" + err.Error()
		}
		return formView(r.PostForm)
	case "application/json":
		b, _ := io.ReadAll(r.Body)
		return jsonView(b)
	default:
		b, _ := io.ReadAll(r.Body)
		return rawView(b)
	}
}

// httpHandler is the handler of a net/http stack (net/http, chi): it reads
// the request, acts, and answers with what act decided.
func httpHandler(h *harness, route string, pathValue func(*http.Request) string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := h.view(principalOf(r.Context()), route, pathValue(r), r.URL.Query(), bodyView(r))
		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
		d := h.act(r.Context(), tx, r.Header.Get(headerStep), v)
		w.Header().Set(headerRun, d.run)
		if d.err != nil {
			idemhttp.Fail(w, r, d.err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(d.answer.httpStatus())
		_, _ = w.Write(d.body)
	})
}

// The net/http layers (net/http and chi stacks).

func authLayer(h *harness) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(w, authenticate(h, r)) })
	}
}

func parseFormLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.FormValue("csrf_token") // parses the form, as FormValue does
		next.ServeHTTP(w, r)
	})
}

func readBodyLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // logs it, say, and forgets to put it back
		next.ServeHTTP(w, r)
	})
}

func dumpBodyLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		next.ServeHTTP(w, r)
	})
}

func gzipLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, "bad gzip", http.StatusBadRequest)
				return
			}
			r.Body = zr
			r.Header.Del("Content-Encoding")
			r.ContentLength = -1
		}
		next.ServeHTTP(w, r)
	})
}

func limitLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, limitBytes)
		next.ServeHTTP(w, r)
	})
}

func recovererLayer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				http.Error(w, "recovered", http.StatusInternalServerError)
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// netHTTPLayer is a net/http stack's layer by name.
func netHTTPLayer(t *rapid.T, name string) func(http.Handler) http.Handler {
	switch name {
	case layerParseForm:
		return parseFormLayer
	case layerReadBody:
		return readBodyLayer
	case layerDumpBody:
		return dumpBodyLayer
	case layerGzip:
		return gzipLayer
	case layerLimit:
		return limitLayer
	case layerRecoverer:
		return recovererLayer
	}
	t.Fatalf("no net/http layer %q", name)
	return nil
}

// routeTemplates names each route's template in a router's syntax.
type routeTemplates map[string]string

func (m routeTemplates) get(route string) string { return m[route] }
