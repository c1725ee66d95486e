package idemecho_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// app is an echo app on SQLite with an orders table and idemecho's
// middleware, built fresh for each test.
type app struct {
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	mw    *idemecho.Middleware[*sql.Tx]
	e     *echo.Echo
	runs  atomic.Int64 // handler runs, counted by the handlers that count
	log   syncBuffer   // the middleware's log
}

// syncBuffer is a bytes.Buffer for a logger that goroutines may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newApp(t *testing.T) *app {
	t.Helper()
	lite := idemtest.NewSQLite(t, idem.Config{})
	db, store := lite.DB, lite.Store
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	a := &app{db: db, store: store}
	var err error
	a.mw, err = idemecho.New(store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		Logger:    slog.New(slog.NewTextHandler(&a.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	a.e = echo.New()
	a.e.HideBanner = true
	return a
}

// order is the JSON body the handlers bind.
type order struct {
	Item string `json:"item"`
}

// insert binds the order and INSERTs it in the middleware's transaction.
func (a *app) insert(c echo.Context) (int64, error) {
	var o order
	if err := c.Bind(&o); err != nil {
		return 0, err
	}
	tx, ok := idemhttp.Tx[*sql.Tx](c.Request().Context())
	if !ok {
		return 0, errors.New("no transaction in the request context")
	}
	res, err := tx.ExecContext(c.Request().Context(), "INSERT INTO orders (item) VALUES (?)", o.Item)
	if err != nil {
		return 0, fmt.Errorf("insert order: %w", err)
	}
	return res.LastInsertId()
}

// create is a handler that inserts the order and answers 201 with it.
func (a *app) create(c echo.Context) error {
	run := a.runs.Add(1)
	id, err := a.insert(c)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, map[string]any{"id": id, "item": c.Param("id"), "run": run})
}

type answer struct {
	status int
	header http.Header
	body   string
}

// problem is the code of a problem answer, "" for another body.
func (a answer) problem() string {
	var p struct{ Code string }
	_ = json.Unmarshal([]byte(a.body), &p)
	return p.Code
}

func (a *app) send(t *testing.T, method, path, key, body string) answer {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	req.Header.Set("X-Tenant", "tenant-1")
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	rec := httptest.NewRecorder()
	a.e.ServeHTTP(rec, req)
	return answer{status: rec.Code, header: rec.Header(), body: rec.Body.String()}
}

func (a *app) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := a.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReplay: the first request runs the handler in the transaction and
// answers 201; the same key and body replays that answer (with
// Idempotent-Replayed) without running it; another body gets 422. The
// record's scope names echo's route template, and the middleware around
// idemecho sees the final, committed answer.
func TestReplay(t *testing.T) {
	a := newApp(t)
	var seen []string // status and committed, as the middleware before idemecho saw them
	outer := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			seen = append(seen, fmt.Sprintf("%d %v", c.Response().Status, c.Response().Committed))
			return err
		}
	}
	a.e.POST("/orders/:id", a.create, outer, a.mw.Wrap())

	first := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" {
		t.Fatalf("first: %d %q %v, want 201 not replayed", first.status, first.body, first.header)
	}
	if want := `{"id":1,"item":"A-1","run":1}`; strings.TrimSpace(first.body) != want {
		t.Fatalf("first body %q, want %s", first.body, want)
	}
	replay := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q %v, want a replay of %q", replay.status, replay.body, replay.header, first.body)
	}
	other := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"pen"}`)
	if other.status != http.StatusUnprocessableEntity || other.problem() != "key-mismatch" {
		t.Fatalf("another body: %d %q, want 422 key-mismatch", other.status, other.body)
	}
	if runs, orders := a.runs.Load(), a.count(t, "orders"); runs != 1 || orders != 1 {
		t.Fatalf("%d runs and %d orders, want 1 and 1", runs, orders)
	}
	rec, err := a.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, "/orders/:id"), "key-1")
	if err != nil {
		t.Fatalf("no record under the route template's scope: %v", err)
	}
	if !rec.Completed || rec.Response.Status != http.StatusCreated {
		t.Fatalf("record %+v, want a completed 201", rec)
	}
	if want := []string{"201 true", "201 true", "422 true"}; fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("the middleware around idemecho saw %v, want %v", seen, want)
	}
}

// TestGroup: in a group the route template includes the group's prefix;
// paths the router answers itself (the group's catch-all 404, a path
// registered for GET only) stay echo's 404, key or not, and store nothing.
func TestGroup(t *testing.T) {
	a := newApp(t)
	g := a.e.Group("/v1", a.mw.Wrap())
	g.POST("/orders/:id", a.create)
	g.GET("/orders/:id", func(c echo.Context) error { return c.String(http.StatusOK, c.Param("id")) })

	first := a.send(t, http.MethodPost, "/v1/orders/B-2", "key-1", `{"item":"book"}`)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %q, want 201", first.status, first.body)
	}
	if _, err := a.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, "/v1/orders/:id"), "key-1"); err != nil {
		t.Fatalf("no record under the group route's scope: %v", err)
	}
	for _, tc := range []struct {
		method, path, key string
		want              int
	}{
		{http.MethodPost, "/v1/nothing", "", http.StatusNotFound},
		{http.MethodPost, "/v1/nothing", "key-2", http.StatusNotFound},
		{http.MethodPatch, "/v1/orders/B-2", "key-3", http.StatusNotFound}, // the group's catch-all wins over 405
		{http.MethodGet, "/v1/orders/B-2", "", http.StatusOK},
	} {
		got := a.send(t, tc.method, tc.path, tc.key, `{"item":"book"}`)
		if got.status != tc.want {
			t.Errorf("%s %s with key %q: %d %q, want %d", tc.method, tc.path, tc.key, got.status, got.body, tc.want)
		}
	}
	if records := a.count(t, "idempotency_keys"); records != 1 {
		t.Fatalf("%d records, want 1 (the order's)", records)
	}
}

// TestUse: installed with e.Use, after routing, the middleware protects
// the routes that match, under their templates; a path registered for other
// methods stays echo's 405, and a path no route matches echo's 404, key or
// not, with nothing stored.
func TestUse(t *testing.T) {
	a := newApp(t)
	a.e.Use(a.mw.Wrap())
	a.e.POST("/orders/:id", a.create)
	a.e.GET("/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, c.Param("id")) })

	for _, tc := range []struct {
		method, path string
		want         int
		problem      string
	}{
		{http.MethodPost, "/orders/A-1", http.StatusCreated, ""},
		{http.MethodPatch, "/items/I-1", http.StatusMethodNotAllowed, ""},
		{http.MethodGet, "/items/I-1", http.StatusOK, ""},
		{http.MethodPost, "/nothing", http.StatusNotFound, ""},
		{http.MethodPost, "/nothing/again", http.StatusNotFound, ""},
	} {
		got := a.send(t, tc.method, tc.path, "key-"+tc.path, `{"item":"book"}`)
		if got.status != tc.want || got.problem() != tc.problem {
			t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.path, got.status, got.body, tc.want, tc.problem)
		}
	}
	if _, err := a.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, "/orders/:id"), "key-/orders/A-1"); err != nil {
		t.Fatalf("no record under the route template's scope: %v", err)
	}
	if records := a.count(t, "idempotency_keys"); records != 1 {
		t.Fatalf("%d records, want 1 (the order's)", records)
	}
}

// TestClientError: an *echo.HTTPError below 500 is an answer. echo's error
// handler renders it inside the transaction; it is stored and replayed, and
// what the handler wrote before it commits with it. c.Bind's error on a
// body that is not JSON is one such answer, a 400: served, not stored (the
// request never began), so the retry runs the handler again.
func TestClientError(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		fail       error // returned after the INSERT
		status     int
		message    string
		orders     int
		runs       int64 // after the retry: 1 when stored
	}{
		{"HTTPError after a write", `{"item":"book"}`, echo.NewHTTPError(http.StatusConflict, "item reserved"), http.StatusConflict, "item reserved", 1, 1},
		{"wrapped HTTPError", `{"item":"book"}`, fmt.Errorf("reserve: %w", echo.NewHTTPError(http.StatusConflict, "item reserved")), http.StatusConflict, "item reserved", 1, 1},
		{"bind error", `not json`, nil, http.StatusBadRequest, "Syntax error", 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t)
			// echo's default error handler renders only a bare HTTPError;
			// this one finds a wrapped one too, as apps often do.
			a.e.HTTPErrorHandler = func(err error, c echo.Context) {
				var he *echo.HTTPError
				if errors.As(err, &he) {
					err = he
				}
				a.e.DefaultHTTPErrorHandler(err, c)
			}
			a.e.POST("/orders/:id", func(c echo.Context) error {
				a.runs.Add(1)
				if _, err := a.insert(c); err != nil {
					return err
				}
				return tc.fail
			}, a.mw.Wrap())

			first := a.send(t, http.MethodPost, "/orders/A-1", "key-1", tc.body)
			if first.status != tc.status || !strings.Contains(first.body, tc.message) {
				t.Fatalf("first: %d %q, want %d with %q", first.status, first.body, tc.status, tc.message)
			}
			replay := a.send(t, http.MethodPost, "/orders/A-1", "key-1", tc.body)
			if replayed := tc.runs == 1; replay.status != tc.status || replay.body != first.body || (replay.header.Get(idemhttp.HeaderReplayed) == "true") != replayed {
				t.Fatalf("retry: %d %q %v, want %q, replayed %v", replay.status, replay.body, replay.header, first.body, replayed)
			}
			if runs, orders := a.runs.Load(), a.count(t, "orders"); runs != tc.runs || orders != tc.orders {
				t.Fatalf("%d runs and %d orders, want %d runs and %d orders committed with the answer", runs, orders, tc.runs, tc.orders)
			}
		})
	}
}

// TestErrorRollsBack: a plain error, and any error after the handler wrote
// its answer, roll back the handler's writes and store nothing: the client
// gets 500 handler-failed, the error is logged, and the retry runs the
// handler again. (A 5xx HTTPError keeps its status: TestServerErrorKeepsStatus.)
func TestErrorRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write bool // the handler answers 201 before returning the error
		err   error
	}{
		{"plain error", false, errors.New("inventory check failed")},
		{"HTTPError after an answer", true, echo.NewHTTPError(http.StatusConflict, "item reserved")},
		{"plain error after an answer", true, errors.New("audit failed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t)
			a.e.POST("/orders/:id", func(c echo.Context) error {
				run := a.runs.Add(1)
				if _, err := a.insert(c); err != nil {
					return err
				}
				if run > 1 {
					return c.JSON(http.StatusCreated, map[string]any{"run": run})
				}
				if tc.write {
					if err := c.JSON(http.StatusCreated, map[string]any{"run": run}); err != nil {
						return err
					}
				}
				return tc.err
			}, a.mw.Wrap())

			first := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if orders, records := a.count(t, "orders"), a.count(t, "idempotency_keys"); first.status != http.StatusInternalServerError ||
				first.problem() != "handler-failed" || orders != 0 || records != 0 {
				t.Fatalf("first: %d %q, %d orders and %d records committed; want 500 handler-failed and nothing committed",
					first.status, first.body, orders, records)
			}
			if log := a.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "handler failed") {
				t.Errorf("the middleware's log %q has no ERROR about the failed handler", log)
			}
			again := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "" || a.runs.Load() != 2 {
				t.Fatalf("retry: %d %q after %d runs, want the handler to run again and answer 201", again.status, again.body, a.runs.Load())
			}
			if orders := a.count(t, "orders"); orders != 1 {
				t.Fatalf("%d orders, want 1", orders)
			}
		})
	}
}

// TestSerializationRetry: a retryable database error on the handler's first
// run (reported with idemhttp.Fail, or returned, bare or inside an
// HTTPError, after a partial answer) runs the handler again in a new
// transaction, on a fresh echo.Response and request body; the client gets
// the second run's clean answer, and only its writes commit.
func TestSerializationRetry(t *testing.T) {
	conflict := fmt.Errorf("write skew: %w", idem.ErrSerialization)
	for _, tc := range []struct {
		name  string
		first func(c echo.Context) error // after the INSERT and the junk header
	}{
		{"Fail", func(c echo.Context) error {
			idemhttp.Fail(c.Response(), c.Request(), conflict)
			return nil
		}},
		{"returned", func(echo.Context) error { return conflict }},
		{"inside an HTTPError", func(echo.Context) error {
			return echo.NewHTTPError(http.StatusConflict, "try again").SetInternal(conflict)
		}},
		{"after a partial answer", func(c echo.Context) error {
			if err := c.String(http.StatusAccepted, "half"); err != nil {
				return err
			}
			return conflict
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t)
			var fresh []string // what each run found in c before writing
			a.e.POST("/orders/:id", func(c echo.Context) error {
				run := a.runs.Add(1)
				r := c.Response()
				fresh = append(fresh, fmt.Sprintf("committed=%v status=%d size=%d junk=%q", r.Committed, r.Status, r.Size, r.Header().Get("X-Junk")))
				id, err := a.insert(c)
				if err != nil {
					return err
				}
				if run == 1 {
					r.Header().Set("X-Junk", "first run")
					return tc.first(c)
				}
				return c.JSON(http.StatusCreated, map[string]any{"id": id, "run": run})
			}, a.mw.Wrap())

			got := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if got.status != http.StatusCreated || got.header.Get("X-Junk") != "" || strings.TrimSpace(got.body) != `{"id":1,"run":2}` {
				t.Fatalf("answer: %d %q %v, want the second run's clean 201", got.status, got.body, got.header)
			}
			want := `committed=false status=0 size=0 junk=""`
			if len(fresh) != 2 || fresh[0] != want || fresh[1] != want {
				t.Fatalf("the runs found %q, want two fresh responses (%s)", fresh, want)
			}
			var item string
			if err := a.db.QueryRowContext(t.Context(), "SELECT item FROM orders").Scan(&item); err != nil || a.count(t, "orders") != 1 || item != "book" {
				t.Fatalf("orders: %d, item %q (%v); want one book, bound from the second run's body", a.count(t, "orders"), item, err)
			}
		})
	}
}

// TestPreRefused: installed with e.Pre, before routing, the middleware has
// no route and refuses protected requests with 500 route-missing, without
// running the handler or storing anything.
func TestPreRefused(t *testing.T) {
	a := newApp(t)
	a.e.Pre(a.mw.Wrap())
	a.e.POST("/orders/:id", a.create)

	got := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if got.status != http.StatusInternalServerError || got.problem() != "route-missing" {
		t.Fatalf("got %d %q, want 500 route-missing", got.status, got.body)
	}
	if runs, records := a.runs.Load(), a.count(t, "idempotency_keys"); runs != 0 || records != 0 {
		t.Fatalf("%d runs, %d records; want none", runs, records)
	}
	if log := a.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "no route") {
		t.Errorf("the middleware's log %q has no ERROR about the missing route", log)
	}
}

// TestPassThrough: a method that needs no key reaches the handler without a
// transaction, and echo renders the error it returns as usual.
func TestPassThrough(t *testing.T) {
	a := newApp(t)
	a.e.GET("/orders/:id", func(c echo.Context) error {
		if _, ok := idemhttp.Tx[*sql.Tx](c.Request().Context()); ok {
			return c.String(http.StatusOK, "in a transaction")
		}
		if c.Param("id") == "broken" {
			return errors.New("database down")
		}
		return echo.NewHTTPError(http.StatusNotFound, "no order "+c.Param("id"))
	}, a.mw.Wrap())

	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/orders/A-1", http.StatusNotFound, `{"message":"no order A-1"}`},
		{"/orders/broken", http.StatusInternalServerError, `{"message":"Internal Server Error"}`},
	} {
		got := a.send(t, http.MethodGet, tc.path, "", "")
		if got.status != tc.status || strings.TrimSpace(got.body) != tc.body {
			t.Errorf("GET %s: %d %q, want echo's rendering: %d %s", tc.path, got.status, got.body, tc.status, tc.body)
		}
	}
}

// TestPanic: a panic in the handler rolls back and reaches echo's Recover
// middleware with c restored, so the client gets Recover's 500, not an
// empty answer, and the retry runs the handler again.
func TestPanic(t *testing.T) {
	a := newApp(t)
	a.e.Logger.SetOutput(io.Discard) // Recover logs the stack
	a.e.Use(middleware.Recover())
	a.e.POST("/orders/:id", func(c echo.Context) error {
		if a.runs.Add(1) == 1 {
			if _, err := a.insert(c); err != nil {
				return err
			}
			panic("boom")
		}
		return a.create(c)
	}, a.mw.Wrap())

	first := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if orders, records := a.count(t, "orders"), a.count(t, "idempotency_keys"); first.status != http.StatusInternalServerError ||
		!strings.Contains(first.body, "Internal Server Error") || orders != 0 || records != 0 {
		t.Fatalf("first: %d %q, %d orders and %d records; want Recover's 500 and nothing committed", first.status, first.body, orders, records)
	}
	again := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if again.status != http.StatusCreated || a.count(t, "orders") != 1 {
		t.Fatalf("retry: %d %q, want 201 and one order", again.status, again.body)
	}
}

// TestLease: under WrapLease the handler gets the lease, records a step with
// its own write, and its answer is stored and replayed.
func TestLease(t *testing.T) {
	a := newApp(t)
	a.e.POST("/payments/:id", func(c echo.Context) error {
		run := a.runs.Add(1)
		ctx := c.Request().Context()
		l, ok := idemhttp.Lease[*sql.Tx](ctx)
		if !ok {
			return errors.New("no lease in the request context")
		}
		if _, ok := idemhttp.Tx[*sql.Tx](ctx); ok {
			return errors.New("a transaction is held while the lease handler runs")
		}
		var o order
		if err := c.Bind(&o); err != nil {
			return err
		}
		charge, err := l.DownstreamKey("charged")
		if err != nil {
			return err
		}
		err = l.RecordStep(ctx, "charged", []byte(charge), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, "INSERT INTO orders (item) VALUES (?)", o.Item)
			return err
		})
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]any{"payment": c.Param("id"), "run": run})
	}, a.mw.WrapLease())

	first := a.send(t, http.MethodPost, "/payments/P-1", "key-1", `{"item":"book"}`)
	if first.status != http.StatusCreated || strings.TrimSpace(first.body) != `{"payment":"P-1","run":1}` {
		t.Fatalf("first: %d %q, want 201", first.status, first.body)
	}
	replay := a.send(t, http.MethodPost, "/payments/P-1", "key-1", `{"item":"book"}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q %v, want a replay of %q", replay.status, replay.body, replay.header, first.body)
	}
	rec, err := a.store.Lookup(t.Context(), idemhttp.Scope("tenant-1", http.MethodPost, "/payments/:id"), "key-1")
	if err != nil || rec.Step != "charged" || rec.Token == 0 {
		t.Fatalf("record %+v (%v), want a leased record with step charged", rec, err)
	}
	if runs, orders := a.runs.Load(), a.count(t, "orders"); runs != 1 || orders != 1 {
		t.Fatalf("%d runs and %d orders, want 1 and 1", runs, orders)
	}
}

// TestNew: New refuses what idemhttp.New refuses, with its error.
func TestNew(t *testing.T) {
	a := newApp(t)
	_, err := idemecho.New(a.store, idemhttp.Config{})
	if !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New without a Principal: %v, want idem.ErrInvalidConfig", err)
	}
}

// TestLeaseFailure: under WrapLease a plain error releases the lease (503
// handler-failed), and an HTTPError carrying idem.ErrLeaseLost is not an
// answer but the lost lease (503 lease-lost); neither is stored, and the
// retry runs the handler again.
func TestLeaseFailure(t *testing.T) {
	for _, tc := range []struct {
		name, problem string
		err           error
	}{
		{"plain error", "handler-failed", errors.New("provider timed out")},
		{"lost lease inside an HTTPError", "lease-lost", echo.NewHTTPError(http.StatusConflict, "taken over").SetInternal(idem.ErrLeaseLost)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApp(t)
			a.e.POST("/payments/:id", func(c echo.Context) error {
				if a.runs.Add(1) == 1 {
					return tc.err
				}
				return c.JSON(http.StatusCreated, map[string]any{"payment": c.Param("id")})
			}, a.mw.WrapLease())

			first := a.send(t, http.MethodPost, "/payments/P-1", "key-1", `{}`)
			if first.status != http.StatusServiceUnavailable || first.problem() != tc.problem {
				t.Fatalf("first: %d %q, want 503 %s", first.status, first.body, tc.problem)
			}
			again := a.send(t, http.MethodPost, "/payments/P-1", "key-1", `{}`)
			if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "" || a.runs.Load() != 2 {
				t.Fatalf("retry: %d %q after %d runs, want the handler to run again and answer 201", again.status, again.body, a.runs.Load())
			}
		})
	}
}
