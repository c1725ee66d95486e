package idemhttptest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"

	"github.com/idemkit/idem/idemhttp"
)

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   []byte
}

// call is one request to the mux.
type call struct {
	method    string // default POST
	path      string // default /orders
	key       string
	noKey     bool
	keys      []string // several Idempotency-Key headers
	principal string   // default "p1"
	anonymous bool     // no principal at all
	host      string   // default example.com
	body      string
	unsized   bool // send the body with unknown length
	// ctx is the request's context; default the case's (an Observer's
	// client number travels in it).
	ctx context.Context
}

func (e *env[TTx]) send(c call) response {
	e.T.Helper()
	if c.method == "" {
		c.method = http.MethodPost
	}
	if c.path == "" {
		c.path = "/orders"
	}
	if c.principal == "" && !c.anonymous {
		c.principal = "p1"
	}
	var body io.Reader = strings.NewReader(c.body)
	if c.unsized {
		body = io.MultiReader(body) // hides the length
	}
	ctx := c.ctx
	if ctx == nil {
		ctx = e.Ctx
	}
	req := httptest.NewRequestWithContext(ctx, c.method, c.path, body)
	if c.unsized {
		req.ContentLength = -1
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.principal != "" {
		req.Header.Set("X-Principal", c.principal)
	}
	switch {
	case c.keys != nil:
		req.Header[idemhttp.HeaderKey] = c.keys
	case !c.noKey:
		req.Header[idemhttp.HeaderKey] = []string{c.key}
	}
	rec := httptest.NewRecorder()
	e.mux.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.T.Fatalf("[%s] read body: %v", e.Backend, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// expectRows checks the committed effects, stored records and handler runs.
func (e *env[TTx]) expectRows(key string, effects, records, runs int64) {
	e.T.Helper()
	gotE, gotR, gotRuns := e.Count("SELECT COUNT(*) FROM "+e.effects), e.Records(), e.runs.Load()
	if gotE != effects || gotR != records || gotRuns != runs {
		e.Fatalf(key, "effects=%d records=%d handler runs=%d, want %d, %d, %d", gotE, gotR, gotRuns, effects, records, runs)
	}
}

// expectProblem checks a problem details answer from the middleware.
func (e *env[TTx]) expectProblem(key string, r response, status int, code string) {
	e.T.Helper()
	if r.status != status {
		e.Fatalf(key, "status %d (%s), want %d", r.status, r.body, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		e.Fatalf(key, "Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		e.Fatalf(key, "problem body %q: %v", r.body, err)
	}
	if p.Type != "about:blank" || p.Status != status || p.Title != http.StatusText(status) || p.Code != code || p.Detail == "" {
		e.Fatalf(key, "problem %+v, want status %d, code %q, a title and a detail", p, status, code)
	}
	e.expectRetention(key, r)
	if r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "a problem answer carries %s", idemhttp.HeaderReplayed)
	}
}

func (e *env[TTx]) expectRetention(key string, r response) {
	e.T.Helper()
	if got := r.header.Get(idemhttp.HeaderRetention); got != "5400" {
		e.Fatalf(key, "%s = %q, want 5400 (90 minutes)", idemhttp.HeaderRetention, got)
	}
}

func (e *env[TTx]) expectRetryAfter(key string, r response) {
	e.T.Helper()
	if got := r.header.Get("Retry-After"); got != "2" {
		e.Fatalf(key, "Retry-After = %q, want 2", got)
	}
}

// expectReplay checks that again is a replay of first: the same status,
// the stored headers, the body byte for byte, and the replay header.
func (e *env[TTx]) expectReplay(key string, first, again response, notStored ...string) {
	e.T.Helper()
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		e.Fatalf(key, "replay %d %q, want %d %q byte for byte", again.status, again.body, first.status, first.body)
	}
	if got := again.header.Get(idemhttp.HeaderReplayed); got != "true" {
		e.Fatalf(key, "replay: %s = %q, want true", idemhttp.HeaderReplayed, got)
	}
	want := first.header.Clone()
	want.Set(idemhttp.HeaderReplayed, "true")
	for _, name := range notStored {
		want.Del(name)
	}
	if !reflect.DeepEqual(again.header, want) {
		e.Fatalf(key, "replay headers\n%v\nwant\n%v", again.header, want)
	}
}
