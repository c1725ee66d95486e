package frameworks_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// ginPostgres is a gin app behind idemgin on PostgreSQL (database/sql over
// pgx, repeatable read), served over HTTP. Its tables (the store's too)
// are its own, dropped after the test.
type ginPostgres struct {
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	srv   *httptest.Server
	table string // the store's table
	runs  atomic.Int64

	// barrier holds the first run of each debit until two have read the
	// balance, so that their updates conflict.
	barrier sync.WaitGroup
}

func newGinPostgres(t *testing.T) *ginPostgres {
	t.Helper()
	gin.SetMode(gin.TestMode)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	db, err := sql.Open("pgx", containers.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := postgres.NewSQL(ctx, db, postgres.Options{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	s := &ginPostgres{db: db, table: "gin_idem_" + suffix}
	s.store, err = idem.New(drv, idem.Config{Table: s.table})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	payments, accounts := "gin_payments_"+suffix, "gin_accounts_"+suffix
	for _, ddl := range []string{
		"CREATE TABLE " + payments + " (id BIGSERIAL PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL)",
		"CREATE TABLE " + accounts + " (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)",
		"INSERT INTO " + accounts + " VALUES ('acct-1', 100)",
	} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, table := range []string{s.table, payments, accounts} {
			if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
				t.Errorf("drop %s: %v", table, err)
			}
		}
	})

	mw, err := idemgin.New(s.store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	var failed atomic.Bool
	r.POST("/orders/:id/pay", mw.Wrap(func(c *gin.Context) {
		run := s.runs.Add(1)
		var body struct {
			Amount int `json:"amount" binding:"required"`
		}
		if err := c.ShouldBindJSON(&body); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		ctx := c.Request.Context()
		tx, _ := idemhttp.Tx[*sql.Tx](ctx)
		var id int64
		if err := tx.QueryRowContext(ctx, "INSERT INTO "+payments+" (order_id, amount) VALUES ($1, $2) RETURNING id", c.Param("id"), body.Amount).Scan(&id); err != nil {
			_ = c.Error(err)
			return
		}
		if c.GetHeader("X-Fail") == "serialization" && failed.CompareAndSwap(false, true) {
			c.String(http.StatusAccepted, "first run's partial answer")
			idemhttp.Fail(c.Writer, c.Request, fmt.Errorf("simulated: %w", idem.ErrSerialization))
			return
		}
		if c.GetHeader("X-Fail") == "error" {
			_ = c.Error(errors.New("fraud check failed"))
			return
		}
		c.JSON(http.StatusCreated, gin.H{"payment": id, "order": c.Param("id"), "amount": body.Amount, "run": run})
	}))
	// debit reads the balance and writes it back lowered: two at once
	// conflict under repeatable read, and the loser's serialization
	// failure, recorded with c.Error, runs it again.
	s.barrier.Add(2)
	var held sync.Map // the keys whose first run was held at the barrier
	r.POST("/accounts/:id/debit", mw.Wrap(func(c *gin.Context) {
		s.runs.Add(1)
		var body struct {
			Amount int `json:"amount" binding:"required"`
		}
		if err := c.ShouldBindJSON(&body); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		ctx := c.Request.Context()
		tx, _ := idemhttp.Tx[*sql.Tx](ctx)
		var balance int
		if err := tx.QueryRowContext(ctx, "SELECT balance FROM "+accounts+" WHERE id = $1", c.Param("id")).Scan(&balance); err != nil {
			_ = c.Error(err)
			return
		}
		if _, again := held.LoadOrStore(c.GetHeader(idemhttp.HeaderKey), true); !again {
			s.barrier.Done()
			if !ginWait(&s.barrier, 20*time.Second) {
				_ = c.Error(errors.New("the other debit never read the balance"))
				return
			}
		}
		if _, err := tx.ExecContext(ctx, "UPDATE "+accounts+" SET balance = $1 WHERE id = $2", balance-body.Amount, c.Param("id")); err != nil {
			_ = c.Error(err)
			return
		}
		c.JSON(http.StatusCreated, gin.H{"balance": balance - body.Amount})
	}))
	s.srv = httptest.NewServer(r)
	t.Cleanup(s.srv.Close)
	return s
}

// ginWait waits for wg, at most d.
func ginWait(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

type ginAnswer struct {
	status int
	header http.Header
	body   string
	code   string
}

func (s *ginPostgres) post(t *testing.T, path, key, body string, header ...string) ginAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", "tenant-1")
	req.Header.Set(idemhttp.HeaderKey, key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := ginAnswer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	var p struct{ Code string }
	if json.Unmarshal(b, &p) == nil {
		a.code = p.Code
	}
	return a
}

// TestGinPostgres runs idemgin's main path on PostgreSQL: an answer stored
// under gin's FullPath and replayed, 422 for another body, a re-run after a
// serialization failure that writes a clean second answer, and c.Error
// without a write rolled back.
func TestGinPostgres(t *testing.T) {
	s := newGinPostgres(t)
	ctx := t.Context()

	first := s.post(t, "/orders/7/pay", "pg-pay-1", `{"amount":30}`, "X-Fail", "serialization")
	if first.status != http.StatusCreated || !strings.HasPrefix(first.body, `{"amount":30,`) || !strings.Contains(first.body, `"run":2`) {
		t.Fatalf("first: %d %q, want the second run's 201 alone", first.status, first.body)
	}
	rec, err := s.store.Lookup(ctx, idemhttp.Scope("tenant-1", http.MethodPost, "/orders/:id/pay"), "pg-pay-1")
	if err != nil || rec.Response.Status != http.StatusCreated || string(rec.Response.Body) != first.body {
		t.Fatalf("record under gin's FullPath: %+v, %v; want the 201 sent", rec.Response, err)
	}
	replay := s.post(t, "/orders/7/pay", "pg-pay-1", `{"amount":30}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q %v, want %q replayed", replay.status, replay.body, replay.header, first.body)
	}
	mismatch := s.post(t, "/orders/7/pay", "pg-pay-1", `{"amount":31}`)
	if mismatch.status != http.StatusUnprocessableEntity || mismatch.code != "key-mismatch" {
		t.Fatalf("another body: %d %q, want 422 key-mismatch", mismatch.status, mismatch.body)
	}

	failed := s.post(t, "/orders/8/pay", "pg-pay-2", `{"amount":5}`, "X-Fail", "error")
	if failed.status != http.StatusInternalServerError || failed.code != "handler-failed" {
		t.Fatalf("c.Error: %d %q, want 500 handler-failed", failed.status, failed.body)
	}
	if _, err := s.store.Lookup(ctx, idemhttp.Scope("tenant-1", http.MethodPost, "/orders/:id/pay"), "pg-pay-2"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("c.Error left a record: %v", err)
	}
	if runs := s.runs.Load(); runs != 3 {
		t.Fatalf("%d runs, want 3 (two for the first key, one for the failed)", runs)
	}
}

// TestGinPostgresConflict: two debits of one account at once conflict
// under repeatable read; the loser's real serialization failure, recorded
// with c.Error, re-runs its handler, which reads the winner's balance.
func TestGinPostgresConflict(t *testing.T) {
	s := newGinPostgres(t)
	var wg sync.WaitGroup
	answers := make([]ginAnswer, 2)
	for i, amount := range []int{10, 20} {
		wg.Go(func() {
			answers[i] = s.post(t, "/accounts/acct-1/debit", fmt.Sprintf("pg-debit-%d", i), fmt.Sprintf(`{"amount":%d}`, amount))
		})
	}
	wg.Wait()
	for i, a := range answers {
		if a.status != http.StatusCreated {
			t.Fatalf("debit %d: %d %q, want 201", i, a.status, a.body)
		}
	}
	var balance int
	if err := s.db.QueryRowContext(t.Context(), "SELECT balance FROM gin_accounts_"+strings.TrimPrefix(s.table, "gin_idem_")+" WHERE id = 'acct-1'").Scan(&balance); err != nil {
		t.Fatal(err)
	}
	if balance != 70 || s.runs.Load() != 3 {
		t.Fatalf("balance %d after %d runs (answers %q, %q), want 70 after 3 (one re-run)", balance, s.runs.Load(), answers[0].body, answers[1].body)
	}
}
