// Package idemhttptest is the HTTP suite every idem backend runs to prove
// that idemhttp's middleware keeps its contract on a real database: 400 for
// a missing or malformed key, 413 before anything is claimed, 422 for a
// reused key, 409 with Retry-After while a key is held, byte-exact replays
// with Idempotent-Replayed, 5xx and panics and oversized responses rolled
// back, 503 for a commit that failed or whose outcome is unknown, and the
// retention header on every protected response.
//
// It is an ordinary package, so a backend's tests call it with the same
// Backend they give the conformance suite:
//
//	func TestHTTP(t *testing.T) {
//		idemhttptest.Run(t, conformance.Backend[*sql.Tx]{Name: "mydb", Open: open})
//	}
//
// Every case is a parallel subtest with its own tables. The handler writes
// its effect in the transaction from idemhttp.Tx through the driver's Wrap,
// so the suite runs on any transaction type.
package idemhttptest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
)

// caseTimeout bounds every case, so a backend that hangs fails instead.
const caseTimeout = 2 * time.Minute

// retention is the store's retention in every case; the header says 5400.
const retention = 90 * time.Minute

// Run runs every case against b as parallel subtests of t.
func Run[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	t.Helper()
	if b.Open == nil {
		t.Fatalf("idemhttptest: Backend %q has no Open", b.Name)
	}
	for _, c := range cases[TTx]() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, b)
		})
	}
}

type testCase[TTx any] struct {
	name string
	run  func(t *testing.T, b conformance.Backend[TTx])
}

func cases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"MissingKey400", testMissingKey[TTx]},
		{"MalformedKey400", testMalformedKey[TTx]},
		{"SafeMethodPassesThrough", testSafeMethod[TTx]},
		{"ReplayByteForByte", testReplay[TTx]},
		{"ReplayKeepsConfiguredHeaders", testStoreHeader[TTx]},
		{"ReplayImplicitStatusAndSniffedType", testImplicitStatus[TTx]},
		{"ClientErrorIsStored", testClientErrorStored[TTx]},
		{"Mismatch422", testMismatch[TTx]},
		{"ScopeSeparatesPrincipalsRoutesMethods", testScopes[TTx]},
		{"InFlight409", testInFlight[TTx]},
		{"ConcurrentSameKeyOneEffect", testConcurrent[TTx]},
		{"BodyTooLarge413", testBodyTooLarge[TTx]},
		{"ServerErrorNotStored", testServerError[TTx]},
		{"ResponseTooLargeRollsBack", testResponseTooLarge[TTx]},
		{"PanicLeavesNoRecord", testPanic[TTx]},
		{"FailRollsBack", testFail[TTx]},
		{"FailRetryableRunsAgain", testFailRetryable[TTx]},
		{"CommitUnknown503", testCommitUnknown[TTx]},
		{"CommitFailed503NothingStored", testCommitFailed[TTx]},
		{"PathValuesAreTheResource", testPathValues[TTx]},
		{"CatchAllPatternTargets", testCatchAll[TTx]},
		{"HostIsPartOfTheRequest", testHosts[TTx]},
		{"PrincipalMissing403", testPrincipalMissing[TTx]},
		{"AnonymousByOptIn", testAnonymous[TTx]},
		{"QuotedKeyIsTheSameKey", testQuotedKey[TTx]},
		{"TransientStatusNotStored", testTransientStatus[TTx]},
		{"AuthenticationInfoNotReplayed", testAuthInfo[TTx]},
		{"HandlerEndsTransaction", testHandlerEndsTx[TTx]},
		{"RetriesExhausted503", testRetriesExhausted[TTx]},
		{"RetryAfterRoundsUp", testRetryAfterRoundsUp[TTx]},
	}
}

// env is one case's world: a store on fresh tables, an effect table the
// handler writes to, and a ServeMux with the middleware in front of it.
type env[TTx any] struct {
	t       *testing.T
	name    string
	ctx     context.Context
	driver  dialect.Driver[TTx]
	store   *idem.Store[TTx]
	table   string
	effects string
	mux     *http.ServeMux
	runs    atomic.Int64 // handler runs inside a transaction
}

// options change a case's setup.
type options[TTx any] struct {
	store idem.Config
	http  idemhttp.Config
	// driver wraps the backend's driver (to inject faults).
	driver func(dialect.Driver[TTx]) dialect.Driver[TTx]
	// handler is the protected handler; nil means env.order.
	handler func(e *env[TTx], w http.ResponseWriter, r *http.Request)
}

var tableSeq atomic.Int64

// tablePrefix keeps tables of concurrent test binaries on one server apart.
var tablePrefix = func() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "idemh_" + hex.EncodeToString(b)
}()

// setup opens the backend, creates fresh tables, and routes /orders and
// /other (every method) through the middleware to the case's handler.
func setup[TTx any](t *testing.T, b conformance.Backend[TTx], o options[TTx]) *env[TTx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	d := b.Open(t)
	if o.driver != nil {
		d = o.driver(d)
	}
	e := &env[TTx]{t: t, name: b.Name, ctx: ctx, driver: d}
	e.table = fmt.Sprintf("%s_%d", tablePrefix, tableSeq.Add(1))
	e.effects = e.table + "_fx"
	cfg := o.store
	cfg.Table = e.table
	cfg.Retention = retention
	if cfg.WaitBound == 0 {
		cfg.WaitBound = 20 * time.Second // generous: -race on two cores is slow
	}
	store, err := idem.New(d, cfg)
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", b.Name, err)
	}
	e.store = store
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("[%s] Migrate: %v", b.Name, err)
	}
	if _, err := d.Pool().Exec(ctx, "CREATE TABLE "+e.effects+" (run BIGINT NOT NULL)"); err != nil {
		t.Fatalf("[%s] create effects table: %v", b.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{e.effects, e.table} {
			if _, err := d.Pool().Exec(ctx, "DROP TABLE "+name); err != nil {
				t.Errorf("[%s] drop %s: %v", b.Name, name, err)
			}
		}
	})

	hc := o.http
	hc.Principal = func(r *http.Request) string { return r.Header.Get("X-Principal") }

	if hc.Logger == nil {
		hc.Logger = slog.New(slog.NewTextHandler(testLog{t}, nil))
	}
	if hc.RetryAfter == 0 {
		hc.RetryAfter = 2 * time.Second
	}
	mw, err := idemhttp.New(store, hc)
	if err != nil {
		t.Fatalf("[%s] idemhttp.New: %v", b.Name, err)
	}
	handle := o.handler
	if handle == nil {
		handle = (*env[TTx]).order
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(e, w, r) }))
	e.mux = http.NewServeMux()
	for _, pattern := range []string{"/orders", "/other",
		"POST /invoices/{id}/pay", // path values
		"POST /api/",              // a catch-all
		"POST /hosted",            // any host
		"POST a.example/pay",      // host patterns
		"POST b.example/pay",
	} {
		e.mux.Handle(pattern, h)
	}
	return e
}

// testLog sends the middleware's log to the test's.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// order is the default handler: it writes one effect in the transaction and
// answers 201 with a Location, repeated and hop-by-hop headers, a cookie
// and a binary body that names the run, so a replay is told from a rerun.
func (e *env[TTx]) order(w http.ResponseWriter, r *http.Request) {
	tx, ok := idemhttp.Tx[TTx](r.Context())
	if !ok {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, "no transaction")
		return
	}
	n := e.runs.Add(1)
	body, err := io.ReadAll(r.Body)
	if err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	if err := e.effect(r.Context(), tx, n); err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Location", fmt.Sprintf("/orders/%d", n))
	h.Set("Content-Type", "application/octet-stream")
	h.Add("X-Multi", "first")
	h.Add("X-Multi", "second")
	h.Set("Set-Cookie", fmt.Sprintf("session=s%d", n))
	h.Set("Connection", "X-Hop")
	h.Set("X-Hop", "per-connection")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte{0x00, 0xff, 0xfe, '\r', '\n'})
	fmt.Fprintf(w, "run=%d body=%q", n, body)
}

// effect is the handler's write, in the middleware's transaction.
func (e *env[TTx]) effect(ctx context.Context, tx TTx, run int64) error {
	q, err := e.driver.Wrap(tx)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, fmt.Sprintf("INSERT INTO %s (run) VALUES (%d)", e.effects, run))
	return err
}

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
}

func (e *env[TTx]) send(c call) response {
	e.t.Helper()
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
	req := httptest.NewRequestWithContext(e.ctx, c.method, c.path, body)
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
		e.t.Fatalf("[%s] read body: %v", e.name, err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

func (e *env[TTx]) fatalf(key, format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("[%s] key %q: %s", e.name, key, fmt.Sprintf(format, args...))
}

func (e *env[TTx]) errorf(key, format string, args ...any) {
	e.t.Helper()
	e.t.Errorf("[%s] key %q: %s", e.name, key, fmt.Sprintf(format, args...))
}

func (e *env[TTx]) count(table string) int64 {
	e.t.Helper()
	rows, err := e.driver.Pool().Query(e.ctx, "SELECT COUNT(*) FROM "+table)
	if err != nil {
		e.t.Fatalf("[%s] count %s: %v", e.name, table, err)
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		e.t.Fatalf("[%s] count %s: no row (%v)", e.name, table, rows.Err())
	}
	if err := rows.Scan(&n); err != nil {
		e.t.Fatalf("[%s] count %s: %v", e.name, table, err)
	}
	return n
}

// expectRows checks the committed effects, stored records and handler runs.
func (e *env[TTx]) expectRows(key string, effects, records, runs int64) {
	e.t.Helper()
	gotE, gotR, gotRuns := e.count(e.effects), e.count(e.table), e.runs.Load()
	if gotE != effects || gotR != records || gotRuns != runs {
		e.fatalf(key, "effects=%d records=%d handler runs=%d, want %d, %d, %d", gotE, gotR, gotRuns, effects, records, runs)
	}
}

// expectProblem checks a problem details answer from the middleware.
func (e *env[TTx]) expectProblem(key string, r response, status int, code string) {
	e.t.Helper()
	if r.status != status {
		e.fatalf(key, "status %d (%s), want %d", r.status, r.body, status)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		e.fatalf(key, "Content-Type %q, want application/problem+json", ct)
	}
	var p struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
		Code   string `json:"code"`
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		e.fatalf(key, "problem body %q: %v", r.body, err)
	}
	if p.Type != "about:blank" || p.Status != status || p.Title != http.StatusText(status) || p.Code != code || p.Detail == "" {
		e.fatalf(key, "problem %+v, want status %d, code %q, a title and a detail", p, status, code)
	}
	e.expectRetention(key, r)
	if r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.fatalf(key, "a problem answer carries %s", idemhttp.HeaderReplayed)
	}
}

func (e *env[TTx]) expectRetention(key string, r response) {
	e.t.Helper()
	if got := r.header.Get(idemhttp.HeaderRetention); got != "5400" {
		e.fatalf(key, "%s = %q, want 5400 (90 minutes)", idemhttp.HeaderRetention, got)
	}
}

func (e *env[TTx]) expectRetryAfter(key string, r response) {
	e.t.Helper()
	if got := r.header.Get("Retry-After"); got != "2" {
		e.fatalf(key, "Retry-After = %q, want 2", got)
	}
}

// expectReplay checks that again is a replay of first: the same status,
// the stored headers, the body byte for byte, and the replay header.
func (e *env[TTx]) expectReplay(key string, first, again response, notStored ...string) {
	e.t.Helper()
	if again.status != first.status || !bytes.Equal(again.body, first.body) {
		e.fatalf(key, "replay %d %q, want %d %q byte for byte", again.status, again.body, first.status, first.body)
	}
	if got := again.header.Get(idemhttp.HeaderReplayed); got != "true" {
		e.fatalf(key, "replay: %s = %q, want true", idemhttp.HeaderReplayed, got)
	}
	want := first.header.Clone()
	want.Set(idemhttp.HeaderReplayed, "true")
	for _, name := range notStored {
		want.Del(name)
	}
	if !reflect.DeepEqual(again.header, want) {
		e.fatalf(key, "replay headers\n%v\nwant\n%v", again.header, want)
	}
}

func testMissingKey[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	r := e.send(call{noKey: true, body: `{"item":1}`})
	e.expectProblem("", r, http.StatusBadRequest, "key-missing")
	if !strings.Contains(string(r.body), idemhttp.HeaderKey) {
		e.fatalf("", "problem %s does not name the %s header", r.body, idemhttp.HeaderKey)
	}
	e.expectRows("", 0, 0, 0)
}

func testMalformedKey[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"256 bytes", []string{strings.Repeat("k", 256)}},
		{"tab", []string{"abc\tdef"}},
		{"newline", []string{"abc\ndef"}},
		{"DEL", []string{"abc\x7f"}},
		{"not ASCII", []string{"clé-1"}},
		{"not UTF-8", []string{"k\xff"}},
		{"two headers", []string{"k1", "k2"}},
	} {
		r := e.send(call{keys: tc.keys, body: "x"})
		e.expectProblem(fmt.Sprintf("%q (%s)", tc.keys, tc.name), r, http.StatusBadRequest, "key-invalid")
	}
	e.expectRows("", 0, 0, 0)
	// The longest valid key, with every printable ASCII byte, works.
	var printable strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		printable.WriteByte(c)
	}
	long := (printable.String() + strings.Repeat("k", 255))[:255]
	if r := e.send(call{key: long, body: "x"}); r.status != http.StatusCreated {
		e.fatalf(long, "longest valid key: %d %s, want 201", r.status, r.body)
	}
	e.expectRows(long, 1, 1, 1)
}

func testSafeMethod[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	r := e.send(call{method: http.MethodGet, noKey: true})
	if r.status != http.StatusOK || string(r.body) != "no transaction" {
		e.fatalf("", "GET without a key: %d %q, want 200 from the handler without a transaction", r.status, r.body)
	}
	if got := r.header.Get(idemhttp.HeaderRetention); got != "" {
		e.fatalf("", "unprotected GET carries %s %q", idemhttp.HeaderRetention, got)
	}
	e.expectRows("", 0, 0, 0)
}

func testReplay[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "replay-1"
	first := e.send(call{key: key, body: `{"item":88}`})
	if first.status != http.StatusCreated || first.header.Get("Location") != "/orders/1" {
		e.fatalf(key, "first: %d Location %q, want 201 /orders/1", first.status, first.header.Get("Location"))
	}
	if first.header.Get(idemhttp.HeaderReplayed) != "" {
		e.fatalf(key, "first answer carries %s", idemhttp.HeaderReplayed)
	}
	if first.header.Get("Set-Cookie") != "session=s1" || first.header.Get("X-Hop") == "" {
		e.fatalf(key, "first answer lacks the handler's own headers: %v", first.header)
	}
	e.expectRetention(key, first)
	for range 2 {
		again := e.send(call{key: key, body: `{"item":88}`})
		// Never stored: the cookie, and the Connection header with what it lists.
		e.expectReplay(key, first, again, "Set-Cookie", "Connection", "X-Hop")
		if again.header.Get("Location") != "/orders/1" || !reflect.DeepEqual(again.header["X-Multi"], []string{"first", "second"}) {
			e.fatalf(key, "replay headers %v, want Location /orders/1 and X-Multi in order", again.header)
		}
	}
	e.expectRows(key, 1, 1, 1)
}

func testStoreHeader[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{http: idemhttp.Config{
		StoreHeader: func(name string) bool {
			return name == "Set-Cookie" || (name != "X-Multi" && idemhttp.DefaultStoreHeader(name))
		},
	}})
	const key = "store-header-1"
	first := e.send(call{key: key, body: "x"})
	again := e.send(call{key: key, body: "x"})
	e.expectReplay(key, first, again, "X-Multi", "Connection", "X-Hop")
	if again.header.Get("Set-Cookie") != "session=s1" {
		e.fatalf(key, "configured to store Set-Cookie, replay has %v", again.header)
	}
	e.expectRows(key, 1, 1, 1)
}

func testImplicitStatus[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		if r.URL.Path == "/other" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		fmt.Fprint(w, "<html><body>ok</body></html>")
	}})
	const key = "implicit-1"
	first := e.send(call{key: key, body: "x"})
	if first.status != http.StatusOK || first.header.Get("Content-Type") != "text/html; charset=utf-8" {
		e.fatalf(key, "first: %d %v, want 200 with a sniffed text/html type", first.status, first.header)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}))

	const empty = "no-content-1"
	first = e.send(call{key: empty, path: "/other", body: "x"})
	if first.status != http.StatusNoContent || len(first.body) != 0 {
		e.fatalf(empty, "first: %d %q, want 204 without a body", first.status, first.body)
	}
	e.expectReplay(empty, first, e.send(call{key: empty, path: "/other", body: "x"}))
	e.expectRows(key, 2, 2, 2)
}

func testClientErrorStored[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil { // an audit row, say
			idemhttp.Fail(w, r, err)
			return
		}
		http.Error(w, "item 88 is out of stock", http.StatusConflict)
	}})
	const key = "client-error-1"
	first := e.send(call{key: key, body: "x"})
	if first.status != http.StatusConflict {
		e.fatalf(key, "first: %d, want the handler's 409", first.status)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}))
	e.expectRows(key, 1, 1, 1)
}

func testMismatch[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "mismatch-1"
	if r := e.send(call{key: key, body: `{"item":88}`}); r.status != http.StatusCreated {
		e.fatalf(key, "first: %d", r.status)
	}
	e.expectProblem(key, e.send(call{key: key, body: `{"item":89}`}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectProblem(key, e.send(call{key: key, path: "/orders?coupon=1", body: `{"item":88}`}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectRows(key, 1, 1, 1)
}

func testScopes[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "shared-key"
	for i, c := range []call{
		{key: key, body: "x"},
		{key: key, body: "x", principal: "p2"},
		{key: key, body: "x", path: "/other"},
		{key: key, body: "x", method: http.MethodPatch},
	} {
		if r := e.send(c); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
			e.fatalf(key, "request %d (%s %s as %s): %d %v, want a fresh 201", i, c.method, c.path, c.principal, r.status, r.header)
		}
	}
	e.expectRows(key, 4, 4, 4)
}

func testInFlight[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const bound = 300 * time.Millisecond
	started, release := make(chan struct{}), make(chan struct{})
	e := setup(t, b, options[TTx]{
		store: idem.Config{WaitBound: bound},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			if e.runs.Load() == 0 {
				close(started)
				<-release // holds the claim, in its open transaction
			}
			e.order(w, r)
		},
	})
	const key = "in-flight-1"
	firstDone := make(chan response, 1)
	go func() { firstDone <- e.send(call{key: key, body: "x"}) }()
	select {
	case <-started:
	case <-time.After(time.Minute):
		e.fatalf(key, "the first request's handler did not start")
	}
	start := time.Now()
	r := e.send(call{key: key, body: "x"})
	elapsed := time.Since(start)
	close(release)
	e.expectProblem(key, r, http.StatusConflict, "in-flight")
	e.expectRetryAfter(key, r)
	if elapsed < bound/2 {
		e.errorf(key, "409 after %v, want it after waiting about the bound %v", elapsed, bound)
	}
	first := <-firstDone
	if first.status != http.StatusCreated {
		e.fatalf(key, "first: %d %s", first.status, first.body)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}), "Set-Cookie", "Connection", "X-Hop")
	e.expectRows(key, 1, 1, 1)
}

func testConcurrent[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	const n = 8
	e := setup(t, b, options[TTx]{store: idem.Config{MaxAttempts: 20}})
	const key = "concurrent-1"
	start := make(chan struct{})
	results := make([]response, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i] = e.send(call{key: key, body: "x"})
		})
	}
	close(start)
	wg.Wait()
	var original []byte
	for i, r := range results {
		switch {
		case r.status == http.StatusCreated && r.header.Get(idemhttp.HeaderReplayed) == "":
			if original != nil {
				e.fatalf(key, "two original answers: %q and %q", original, r.body)
			}
			original = r.body
		case r.status == http.StatusCreated, r.status == http.StatusConflict:
		default:
			e.fatalf(key, "request %d: %d %s, want 201 or 409", i, r.status, r.body)
		}
	}
	for i, r := range results {
		if r.status == http.StatusCreated && !bytes.Equal(r.body, original) {
			e.fatalf(key, "request %d got %q, want the original %q", i, r.body, original)
		}
	}
	e.expectRows(key, 1, 1, 1)
}

func testBodyTooLarge[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{http: idemhttp.Config{MaxRequestBody: 64}})
	big := strings.Repeat("b", 65)
	e.expectProblem("big-1", e.send(call{key: "big-1", body: big}), http.StatusRequestEntityTooLarge, "body-too-large")
	e.expectProblem("big-2", e.send(call{key: "big-2", body: big, unsized: true}), http.StatusRequestEntityTooLarge, "body-too-large")
	e.expectRows("big", 0, 0, 0)
	if r := e.send(call{key: "big-3", body: big[:64], unsized: true}); r.status != http.StatusCreated {
		e.fatalf("big-3", "body of exactly the limit: %d %s, want 201", r.status, r.body)
	}
	e.expectRows("big-3", 1, 1, 1)
}

func testServerError[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() > 0 {
			e.order(w, r)
			return
		}
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.Header().Set("Retry-After", "7")
		http.Error(w, "inventory service unavailable", http.StatusServiceUnavailable)
	}})
	const key = "5xx-1"
	r := e.send(call{key: key, body: "x"})
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "7" || !strings.Contains(string(r.body), "inventory") {
		e.fatalf(key, "first: %d %v %q, want the handler's own 503", r.status, r.header, r.body)
	}
	e.expectRetention(key, r)
	e.expectRows(key, 0, 0, 1)
	if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.fatalf(key, "retry after a 5xx: %d %v, want the handler to run again and answer 201", r.status, r.header)
	}
	e.expectRows(key, 1, 1, 2)
}

func testResponseTooLarge[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{
		store: idem.Config{MaxBody: 32},
		handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
			tx, _ := idemhttp.Tx[TTx](r.Context())
			if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
				idemhttp.Fail(w, r, err)
				return
			}
			switch r.URL.Path {
			case "/other": // a header over idem.MaxHeaderBytes
				w.Header().Set("X-Big", strings.Repeat("h", idem.MaxHeaderBytes))
				w.WriteHeader(http.StatusCreated)
			default: // a body one byte over the store's MaxBody, in two writes
				w.WriteHeader(http.StatusCreated)
				w.Write([]byte(strings.Repeat("x", 20)))
				w.Write([]byte(strings.Repeat("y", len(r.Header.Get(idemhttp.HeaderKey)))))
			}
		},
	})
	for _, c := range []call{{key: "1234567890123"}, {key: "big-header", path: "/other"}} {
		r := e.send(c)
		e.expectProblem(c.key, r, http.StatusInternalServerError, "response-too-large")
	}
	e.expectRows("too-large", 0, 0, 2)
	if r := e.send(call{key: "123456789012"}); r.status != http.StatusCreated || len(r.body) != 32 {
		e.fatalf("123456789012", "body of exactly the limit: %d %q, want 201 and 32 bytes", r.status, r.body)
	}
	e.expectRows("too-large", 1, 1, 3)
}

func testPanic[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() > 0 {
			e.order(w, r)
			return
		}
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated)
		panic("handler bug")
	}})
	const key = "panic-1"
	func() {
		defer func() {
			if p := recover(); p != "handler bug" {
				e.fatalf(key, "recovered %v, want the handler's panic", p)
			}
		}()
		r := e.send(call{key: key, body: "x"})
		e.fatalf(key, "the panic did not propagate; got %d", r.status)
	}()
	e.expectRows(key, 0, 0, 1)
	if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
		e.fatalf(key, "after the panic: %d %v, want a fresh 201", r.status, r.header)
	}
	e.expectRows(key, 1, 1, 2)
}

func testFail[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() > 0 {
			e.order(w, r)
			return
		}
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusCreated) // discarded by Fail
		idemhttp.Fail(w, r, errors.New("payment provider said no"))
	}})
	const key = "fail-1"
	e.expectProblem(key, e.send(call{key: key, body: "x"}), http.StatusInternalServerError, "handler-failed")
	e.expectRows(key, 0, 0, 1)
	if r := e.send(call{key: key, body: "x"}); r.status != http.StatusCreated {
		e.fatalf(key, "after Fail: %d, want a fresh 201", r.status)
	}
	e.expectRows(key, 1, 1, 2)
}

func testFailRetryable[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if e.runs.Load() > 0 {
			e.order(w, r)
			return
		}
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		idemhttp.Fail(w, r, fmt.Errorf("simulated: %w", idem.ErrSerialization))
	}})
	const key = "fail-retry-1"
	r := e.send(call{key: key, body: "x"})
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), "run=2") {
		e.fatalf(key, "%d %q, want the second run's 201 within the same request", r.status, r.body)
	}
	e.expectRows(key, 1, 1, 2)
}

// faultDriver replaces the commit of every transaction it begins.
type faultDriver[TTx any] struct {
	dialect.Driver[TTx]
	commit func(ctx context.Context, txn dialect.Txn[TTx]) error
}

func (d faultDriver[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Txn[TTx], error) {
	txn, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return faultTxn[TTx]{Txn: txn, commit: d.commit}, nil
}

type faultTxn[TTx any] struct {
	dialect.Txn[TTx]
	commit func(ctx context.Context, txn dialect.Txn[TTx]) error
}

func (t faultTxn[TTx]) Commit(ctx context.Context) error { return t.commit(ctx, t.Txn) }

func testCommitUnknown[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	var faults atomic.Int64
	e := setup(t, b, options[TTx]{driver: func(d dialect.Driver[TTx]) dialect.Driver[TTx] {
		return faultDriver[TTx]{Driver: d, commit: func(ctx context.Context, txn dialect.Txn[TTx]) error {
			err := txn.Commit(ctx)
			if err == nil && faults.Add(1) == 1 {
				// It committed, but the client of the database cannot know.
				return dialect.Classified(dialect.ErrCommitUnknown, errors.New("idemhttptest: connection reset during COMMIT"))
			}
			return err
		}}
	}})
	const key = "commit-unknown-1"
	r := e.send(call{key: key, body: "x"})
	e.expectProblem(key, r, http.StatusServiceUnavailable, "commit-unknown")
	e.expectRetryAfter(key, r)
	e.expectRows(key, 1, 1, 1)
	again := e.send(call{key: key, body: "x"})
	if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "true" || !strings.Contains(string(again.body), "run=1") {
		e.fatalf(key, "retry after an unknown commit that did commit: %d %v %q, want a replay of run 1", again.status, again.header, again.body)
	}
	e.expectRows(key, 1, 1, 1)
}

func testCommitFailed[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	var faults atomic.Int64
	e := setup(t, b, options[TTx]{driver: func(d dialect.Driver[TTx]) dialect.Driver[TTx] {
		return faultDriver[TTx]{Driver: d, commit: func(ctx context.Context, txn dialect.Txn[TTx]) error {
			if faults.Add(1) == 1 {
				if err := txn.Rollback(ctx); err != nil {
					return err
				}
				return errors.New("idemhttptest: COMMIT refused")
			}
			return txn.Commit(ctx)
		}}
	}})
	const key = "commit-failed-1"
	r := e.send(call{key: key, body: "x"})
	e.expectProblem(key, r, http.StatusServiceUnavailable, "store-unavailable")
	e.expectRetryAfter(key, r)
	e.expectRows(key, 0, 0, 1)
	again := e.send(call{key: key, body: "x"})
	if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "" {
		e.fatalf(key, "retry after a failed commit: %d %v, want a fresh 201", again.status, again.header)
	}
	e.expectRows(key, 1, 1, 2)
}
