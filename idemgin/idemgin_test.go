package idemgin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.TestMode)
	os.Exit(m.Run())
}

const tenant = "tenant-1"

// service is a gin engine on SQLite whose routes are wrapped by idemgin.
// Its handlers INSERT a payment in the middleware's transaction; an outer
// gin middleware (where gin's logger would be) records what gin sees
// after the chain: c.Writer.Status(), Size() and c.Errors.
type service struct {
	db     *sql.DB
	store  *idem.Store[*sql.Tx]
	engine *gin.Engine
	mux    *http.ServeMux // the engine mounted under "/api/"
	log    syncBuffer
	runs   atomic.Int64 // runs of every handler
	calls  atomic.Int64 // calls to the fake carrier (lease mode)

	mu   sync.Mutex
	seen seen // what the outer middleware saw last
}

type seen struct {
	status, size int
	errors       int
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

type payment struct {
	Amount int `json:"amount" binding:"required"`
}

func newService(t *testing.T, cfg idemhttp.Config) *service {
	t.Helper()
	ctx := t.Context()
	lite := idemtest.NewSQLite(t, idem.Config{})
	db, store := lite.DB, lite.Store
	for _, ddl := range []string{
		"CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL)",
		"CREATE TABLE shipments (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, label TEXT NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	s := &service{db: db, store: store}
	cfg.Principal = func(r *http.Request) string { return r.Header.Get("X-Tenant") }
	cfg.Logger = slog.New(slog.NewTextHandler(&s.log, nil))
	mw, err := idemgin.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}

	e := gin.New()
	e.Use(func(c *gin.Context) {
		c.Next()
		s.mu.Lock()
		defer s.mu.Unlock()
		s.seen = seen{status: c.Writer.Status(), size: c.Writer.Size(), errors: len(c.Errors)}
	})
	// pay inserts a payment and answers 201; what it does on its first
	// run comes from the route's path.
	pay := func(first func(c *gin.Context) bool) gin.HandlerFunc {
		var once atomic.Bool
		return func(c *gin.Context) {
			run := s.runs.Add(1)
			var body payment
			if err := c.ShouldBindJSON(&body); err != nil {
				c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
				return
			}
			tx, ok := idemhttp.Tx[*sql.Tx](c.Request.Context())
			if !ok {
				idemhttp.Fail(c.Writer, c.Request, errors.New("no transaction in the request context"))
				return
			}
			res, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, ?)", c.Param("id"), body.Amount)
			if err != nil {
				idemhttp.Fail(c.Writer, c.Request, err)
				return
			}
			if first != nil && once.CompareAndSwap(false, true) && first(c) {
				return
			}
			id, err := res.LastInsertId()
			if err != nil {
				idemhttp.Fail(c.Writer, c.Request, err)
				return
			}
			c.Header("X-Run", fmt.Sprint(run))
			c.JSON(http.StatusCreated, gin.H{"payment": id, "order": c.Param("id"), "amount": body.Amount})
		}
	}
	e.POST("/orders/:id/pay", mw.Wrap(pay(nil)))
	// retry fails its first run with a serialization failure, after
	// writing a status, a header and a body of its own.
	e.POST("/orders/:id/retry", mw.Wrap(pay(func(c *gin.Context) bool {
		c.Header("X-First-Run", "yes")
		c.String(http.StatusAccepted, "first run's partial answer")
		idemhttp.Fail(c.Writer, c.Request, fmt.Errorf("simulated: %w", idem.ErrSerialization))
		return true
	})))
	// error-retry records a serialization failure with c.Error on its
	// first run and writes nothing.
	e.POST("/orders/:id/error-retry", mw.Wrap(pay(func(c *gin.Context) bool {
		_ = c.Error(fmt.Errorf("simulated: %w", idem.ErrSerialization))
		return true
	})))
	// written-retry answers on its first run, then records a serialization
	// failure with c.Error: the answer is void, the run is re-run.
	e.POST("/orders/:id/written-retry", mw.Wrap(pay(func(c *gin.Context) bool {
		c.Header("X-First-Run", "yes")
		c.String(http.StatusAccepted, "first run's answer, voided")
		_ = c.Error(fmt.Errorf("simulated: %w", idem.ErrSerialization))
		return true
	})))
	// error records an error with c.Error on every run and writes nothing.
	e.POST("/orders/:id/error", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		if _, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, 1)", c.Param("id")); err != nil {
			idemhttp.Fail(c.Writer, c.Request, err)
			return
		}
		_ = c.Error(errors.New("card declined by the fraud check"))
	}))
	// refuse answers 402 with AbortWithStatusJSON, after its INSERT.
	e.POST("/orders/:id/refuse", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		if _, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, 0)", c.Param("id")); err != nil {
			idemhttp.Fail(c.Writer, c.Request, err)
			return
		}
		c.AbortWithStatusJSON(http.StatusPaymentRequired, gin.H{"error": "insufficient funds"})
	}))
	// render fails to render its answer: gin records the error.
	e.POST("/orders/:id/render", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		if _, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, 1)", c.Param("id")); err != nil {
			idemhttp.Fail(c.Writer, c.Request, err)
			return
		}
		c.JSON(http.StatusCreated, gin.H{"unencodable": make(chan int)})
	}))
	// invalid answers 400 with AbortWithError, behind a middleware that
	// renders c.Errors as a 500 after c.Next.
	e.POST("/orders/:id/invalid", func(c *gin.Context) {
		c.Next()
		if len(c.Errors) > 0 {
			c.JSON(http.StatusInternalServerError, gin.H{"errors": c.Errors.String()})
		}
	}, mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		_ = c.AbortWithError(http.StatusBadRequest, errors.New("amount must be positive"))
	}))
	// panic panics after its INSERT, behind gin's Recovery.
	e.POST("/orders/:id/panic", gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "recovered"})
	}), mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		if _, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, 1)", c.Param("id")); err != nil {
			idemhttp.Fail(c.Writer, c.Request, err)
			return
		}
		panic("handler bug")
	}))
	// validate inserts its payment, then refuses an amount that is not
	// positive with 400 and one over 1000 with 409 marked NotAnOutcome.
	e.POST("/orders/:id/validate", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		var body struct{ Amount int }
		if err := c.ShouldBindJSON(&body); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		res, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, ?)", c.Param("id"), body.Amount)
		if err != nil {
			idemhttp.Fail(c.Writer, c.Request, err)
			return
		}
		switch {
		case body.Amount <= 0:
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": "amount must be positive"})
			return
		case body.Amount > 1000:
			idemhttp.NotAnOutcome(c.Request)
			c.AbortWithStatusJSON(http.StatusConflict, gin.H{"error": "over the order's limit"})
			return
		}
		id, _ := res.LastInsertId()
		c.JSON(http.StatusCreated, gin.H{"payment": id, "amount": body.Amount})
	}))
	// status answers with a status and no body.
	e.POST("/orders/:id/status", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		c.Status(http.StatusNoContent)
	}))
	// nothing writes nothing.
	e.POST("/orders/:id/nothing", mw.Wrap(func(*gin.Context) { s.runs.Add(1) }))
	// GET is not protected: the handler runs on gin's own writer.
	e.GET("/orders/:id", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		_, inTx := idemhttp.Tx[*sql.Tx](c.Request.Context())
		c.JSON(http.StatusOK, gin.H{"order": c.Param("id"), "tx": inTx})
	}))
	// ship calls a carrier outside the database (lease mode), records the
	// step, and fails its first run after that (the label printer).
	var shipped atomic.Bool
	e.POST("/orders/:id/ship", mw.WrapLease(func(c *gin.Context) {
		s.runs.Add(1)
		ctx := c.Request.Context()
		l, ok := idemhttp.Lease[*sql.Tx](ctx)
		if !ok {
			idemhttp.Fail(c.Writer, c.Request, errors.New("no lease in the request context"))
			return
		}
		step, label := l.Step()
		if step != "booked" {
			label = fmt.Appendf(nil, "label-%d", s.calls.Add(1))
			if err := l.RecordStep(ctx, "booked", label, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, "INSERT INTO shipments (order_id, label) VALUES (?, ?)", c.Param("id"), string(label))
				return err
			}); err != nil {
				idemhttp.Fail(c.Writer, c.Request, err)
				return
			}
		}
		if shipped.CompareAndSwap(false, true) {
			_ = c.Error(errors.New("label printer offline"))
			return
		}
		c.JSON(http.StatusCreated, gin.H{"label": string(label)})
	}))
	e.NoRoute(mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		c.JSON(http.StatusNotFound, gin.H{"error": "no such endpoint"})
	}))
	s.engine = e
	s.mux = http.NewServeMux()
	s.mux.Handle("/api/", e)
	return s
}

type answer struct {
	status int
	header http.Header
	body   string
	code   string // the problem's code, if any
}

// send sends a request to h (the engine unless given) and returns the
// answer, and what the outer gin middleware saw.
func (s *service) send(t *testing.T, method, path, key, body string, h ...http.Handler) (answer, seen) {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", tenant)
	if key != "" {
		req.Header.Set(idemhttp.HeaderKey, key)
	}
	rec := httptest.NewRecorder()
	var target http.Handler = s.engine
	if len(h) > 0 {
		target = h[0]
	}
	s.mu.Lock()
	s.seen = seen{}
	s.mu.Unlock()
	target.ServeHTTP(rec, req)
	res := rec.Result()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: res.StatusCode, header: res.Header, body: string(b)}
	var p struct{ Code string }
	if json.Unmarshal(b, &p) == nil {
		a.code = p.Code
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return a, s.seen
}

func (s *service) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// checkSeen fails unless gin saw the answer a was sent with.
func checkSeen(t *testing.T, a answer, g seen) {
	t.Helper()
	if g.status != a.status || g.size != len(a.body) {
		t.Errorf("gin saw status %d, size %d; the client got %d with %d bytes", g.status, g.size, a.status, len(a.body))
	}
}

// TestReplay: the first request runs the handler and is stored under the
// route gin matched; the retry replays it (Idempotent-Replayed), the same
// key with another body or on another order gets 422, and gin sees each
// answer's status.
func TestReplay(t *testing.T) {
	s := newService(t, idemhttp.Config{})
	const key = "pay-1"
	first, g := s.send(t, http.MethodPost, "/orders/7/pay", key, `{"amount":30}`)
	if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" || !strings.Contains(first.body, `"order":"7"`) {
		t.Fatalf("first: %d %q %v, want 201 for order 7", first.status, first.body, first.header)
	}
	checkSeen(t, first, g)

	rec, err := s.store.Lookup(t.Context(), idemhttp.Scope(tenant, http.MethodPost, "/orders/:id/pay"), key)
	if err != nil {
		t.Fatalf("no record under the scope of gin's FullPath: %v", err)
	}
	if !rec.Completed || rec.Response.Status != http.StatusCreated || string(rec.Response.Body) != first.body {
		t.Fatalf("stored %+v, want the 201 sent", rec.Response)
	}

	replay, g := s.send(t, http.MethodPost, "/orders/7/pay", key, `{"amount":30}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" ||
		replay.header.Get("X-Run") != "1" {
		t.Fatalf("replay: %d %q %v, want the first answer replayed", replay.status, replay.body, replay.header)
	}
	checkSeen(t, replay, g)

	for _, tc := range []struct{ name, path, body string }{
		{"another body", "/orders/7/pay", `{"amount":31}`},
		{"another order", "/orders/8/pay", `{"amount":30}`},
	} {
		mismatch, g := s.send(t, http.MethodPost, tc.path, key, tc.body)
		if mismatch.status != http.StatusUnprocessableEntity || mismatch.code != "key-mismatch" {
			t.Errorf("%s: %d %q, want 422 key-mismatch", tc.name, mismatch.status, mismatch.body)
		}
		checkSeen(t, mismatch, g)
	}
	if runs, payments := s.runs.Load(), s.count(t, "payments"); runs != 1 || payments != 1 {
		t.Fatalf("%d runs, %d payments; want 1 and 1", runs, payments)
	}
}

// TestRerunAfterSerializationFailure: a run that fails with a retryable
// error is run again, with a fresh writer and request: the second run's
// answer is whole (its status, its body, none of the first run's header)
// and it is the one stored.
func TestRerunAfterSerializationFailure(t *testing.T) {
	for _, route := range []string{"retry", "error-retry", "written-retry"} {
		t.Run(route, func(t *testing.T) {
			s := newService(t, idemhttp.Config{})
			first, g := s.send(t, http.MethodPost, "/orders/7/"+route, "k", `{"amount":30}`)
			if first.status != http.StatusCreated || !strings.HasPrefix(first.body, `{"amount":30,`) ||
				first.header.Get("X-First-Run") != "" || first.header.Get("X-Run") != "2" {
				t.Fatalf("after the re-run: %d %q %v, want the second run's 201 alone", first.status, first.body, first.header)
			}
			checkSeen(t, first, g)
			if g.errors != 0 {
				t.Errorf("gin saw %d errors, want the discarded run's error dropped", g.errors)
			}
			replay, _ := s.send(t, http.MethodPost, "/orders/7/"+route, "k", `{"amount":30}`)
			if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
				t.Fatalf("replay: %d %q, want %q", replay.status, replay.body, first.body)
			}
			if runs, payments := s.runs.Load(), s.count(t, "payments"); runs != 2 || payments != 1 {
				t.Fatalf("%d runs, %d payments; want 2 runs and 1 payment (the first rolled back)", runs, payments)
			}
		})
	}
}

// TestAnswers: how a run's end becomes the answer: c.Error without a
// write rolls back; AbortWithStatusJSON and a bare status are answers,
// stored and replayed (a 400 is served, not stored); writing nothing is no
// answer.
func TestAnswers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		route    string
		cfg      idemhttp.Config
		status   int
		code     string
		stored   bool
		payments int
		errors   int // in c.Errors after the chain
	}{
		{name: "c.Error without a write", route: "error", status: http.StatusInternalServerError, code: "handler-failed", errors: 1},
		{name: "AbortWithStatusJSON 402", route: "refuse", status: http.StatusPaymentRequired, stored: true, payments: 1},
		{name: "c.JSON fails to render", route: "render", status: http.StatusInternalServerError, code: "handler-failed", errors: 1},
		{name: "AbortWithError 400", route: "invalid", status: http.StatusBadRequest, errors: 2}, // the handler's, and the middleware's refused c.JSON; a 400 is not stored
		{name: "panic, gin's Recovery answers", route: "panic", status: http.StatusInternalServerError},
		{name: "c.Status(204)", route: "status", status: http.StatusNoContent, stored: true},
		{name: "nothing written", route: "nothing", status: http.StatusInternalServerError, code: "no-response"},
		{name: "nothing written, ImplicitOK", route: "nothing", cfg: idemhttp.Config{ImplicitOK: true}, status: http.StatusOK, stored: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t, tc.cfg)
			path := "/orders/7/" + tc.route
			first, g := s.send(t, http.MethodPost, path, "k", `{}`)
			if first.status != tc.status || first.code != tc.code {
				t.Fatalf("first: %d %q, want %d %q", first.status, first.body, tc.status, tc.code)
			}
			checkSeen(t, first, g)
			if g.errors != tc.errors {
				t.Errorf("gin saw %d errors, want %d", g.errors, tc.errors)
			}
			_, err := s.store.Lookup(t.Context(), idemhttp.Scope(tenant, http.MethodPost, "/orders/:id/"+tc.route), "k")
			if stored := err == nil; stored != tc.stored {
				t.Fatalf("stored: %v (%v), want %v", stored, err, tc.stored)
			}
			if n := s.count(t, "payments"); n != tc.payments {
				t.Fatalf("%d payments committed, want %d", n, tc.payments)
			}
			again, _ := s.send(t, http.MethodPost, path, "k", `{}`)
			wantRuns := int64(2)
			if tc.stored {
				wantRuns = 1
				if again.status != first.status || again.body != first.body || again.header.Get(idemhttp.HeaderReplayed) != "true" {
					t.Fatalf("retry: %d %q %v, want a replay of %d %q", again.status, again.body, again.header, first.status, first.body)
				}
			}
			if runs := s.runs.Load(); runs != wantRuns {
				t.Fatalf("%d runs after the retry, want %d", runs, wantRuns)
			}
		})
	}
}

// TestRouteMissing: a wrapped handler with no gin route (NoRoute) is
// refused with 500 "route-missing" and does not run, also when gin is
// mounted under a ServeMux pattern that could stand in for the route.
func TestRouteMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
		via  func(*service) http.Handler
	}{
		{"engine", "/nowhere", func(s *service) http.Handler { return s.engine }},
		{"mounted under a ServeMux", "/api/nowhere", func(s *service) http.Handler { return s.mux }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newService(t, idemhttp.Config{})
			a, g := s.send(t, http.MethodPost, tc.path, "k", `{}`, tc.via(s))
			if a.status != http.StatusInternalServerError || a.code != "route-missing" || s.runs.Load() != 0 {
				t.Fatalf("%d %q after %d runs, want 500 route-missing and no run", a.status, a.body, s.runs.Load())
			}
			checkSeen(t, a, g)
			if !strings.Contains(s.log.String(), "level=ERROR") {
				t.Errorf("log %q has no ERROR", s.log.String())
			}
		})
	}
}

// TestPassThrough: a method the middleware does not protect runs the
// handler on gin's writer, without a transaction and without a key.
func TestPassThrough(t *testing.T) {
	s := newService(t, idemhttp.Config{})
	a, g := s.send(t, http.MethodGet, "/orders/7", "", "")
	if a.status != http.StatusOK || a.body != `{"order":"7","tx":false}` {
		t.Fatalf("GET: %d %q, want 200 without a transaction", a.status, a.body)
	}
	checkSeen(t, a, g)
}

// TestLease: under WrapLease, a run that fails after recording a step
// releases the lease and keeps the step; the retry resumes without
// calling the carrier again, and its answer is stored.
func TestLease(t *testing.T) {
	s := newService(t, idemhttp.Config{})
	first, g := s.send(t, http.MethodPost, "/orders/7/ship", "k", `{}`)
	if first.status != http.StatusServiceUnavailable || first.code != "handler-failed" {
		t.Fatalf("first: %d %q, want 503 handler-failed (lease released)", first.status, first.body)
	}
	checkSeen(t, first, g)
	second, g := s.send(t, http.MethodPost, "/orders/7/ship", "k", `{}`)
	if second.status != http.StatusCreated || second.body != `{"label":"label-1"}` {
		t.Fatalf("retry: %d %q, want 201 with the first booking's label", second.status, second.body)
	}
	checkSeen(t, second, g)
	replay, _ := s.send(t, http.MethodPost, "/orders/7/ship", "k", `{}`)
	if replay.status != http.StatusCreated || replay.body != second.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q", replay.status, replay.body)
	}
	if calls, runs, shipments := s.calls.Load(), s.runs.Load(), s.count(t, "shipments"); calls != 1 || runs != 2 || shipments != 1 {
		t.Fatalf("%d carrier calls, %d runs, %d shipments; want 1, 2, 1", calls, runs, shipments)
	}
}

// TestNew refuses what idemhttp.New refuses.
func TestNew(t *testing.T) {
	if _, err := idemgin.New[*sql.Tx](nil, idemhttp.Config{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New(nil store) = %v, want ErrInvalidConfig", err)
	}
}
