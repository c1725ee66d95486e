package frameworks_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// TestIdemechoPostgres runs idemecho's main path on PostgreSQL at
// REPEATABLE READ, through a real HTTP server: the handler's first run hits
// a real serialization failure (another connection updates the row it
// read) and runs again on a fresh response; its answer is stored, replayed
// with Idempotent-Replayed, refused with 422 for another body; a returned
// 409 is stored with the handler's write; a plain error rolls back.
func TestIdemechoPostgres(t *testing.T) {
	ctx := t.Context()
	db, err := sql.Open("pgx", containers.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	drv, err := postgres.NewSQL(ctx, db, postgres.Options{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	// Tables of their own: the server is shared with other tests.
	store, err := idem.New(drv, idem.Config{Table: "idem_idemecho_test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DROP TABLE IF EXISTS idem_idemecho_test", "DROP TABLE IF EXISTS idemecho_stock", "DROP TABLE IF EXISTS idemecho_orders",
		"CREATE TABLE idemecho_stock (item TEXT PRIMARY KEY, left_ INT NOT NULL)",
		"CREATE TABLE idemecho_orders (id SERIAL PRIMARY KEY, item TEXT NOT NULL)",
		"INSERT INTO idemecho_stock VALUES ('book', 10)",
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP TABLE idem_idemecho_test", "DROP TABLE idemecho_stock", "DROP TABLE idemecho_orders"} {
			_, _ = db.ExecContext(context.WithoutCancel(ctx), q)
		}
	})
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	mw, err := idemecho.New(store, idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	if err != nil {
		t.Fatal(err)
	}

	var runs atomic.Int64
	e := echo.New()
	e.HideBanner = true
	e.POST("/orders/:item", func(c echo.Context) error {
		run := runs.Add(1)
		ctx := c.Request().Context()
		tx, ok := idemhttp.Tx[*sql.Tx](ctx)
		if !ok {
			return errors.New("no transaction in the request context")
		}
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		var left int
		if err := tx.QueryRowContext(ctx, "SELECT left_ FROM idemecho_stock WHERE item = $1", c.Param("item")).Scan(&left); err != nil {
			return fmt.Errorf("read stock: %w", err)
		}
		c.Response().Header().Set("X-Run", fmt.Sprint(run))
		if run == 1 {
			// Another request sells a book after this snapshot was taken.
			if _, err := db.ExecContext(ctx, "UPDATE idemecho_stock SET left_ = left_ - 1 WHERE item = $1", c.Param("item")); err != nil {
				return err
			}
		}
		if _, err := tx.ExecContext(ctx, "UPDATE idemecho_stock SET left_ = $1 WHERE item = $2", left-1, c.Param("item")); err != nil {
			return fmt.Errorf("sell: %w", err) // run 1: 40001, the store runs the handler again
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO idemecho_orders (item) VALUES ($1)", c.Param("item")); err != nil {
			return err
		}
		switch string(body) {
		case "reserved":
			return echo.NewHTTPError(http.StatusConflict, "item reserved") // stored, with the writes
		case "fail":
			return errors.New("audit failed") // rolled back
		}
		return c.JSON(http.StatusCreated, map[string]any{"left": left - 1})
	}, mw.Wrap())
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)

	post := func(key, body string) echoAnswer {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders/book", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Tenant", "tenant-1")
		req.Header.Set(idemhttp.HeaderKey, key)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return echoAnswer{status: resp.StatusCode, header: resp.Header, body: strings.TrimSpace(string(b))}
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	first := post("k-1", "")
	if first.status != http.StatusCreated || first.body != `{"left":8}` || first.header.Get("X-Run") != "2" || runs.Load() != 2 {
		t.Fatalf("first: %d %q %v after %d runs, want the second run's 201 {\"left\":8}", first.status, first.body, first.header, runs.Load())
	}
	replay := post("k-1", "")
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" || runs.Load() != 2 {
		t.Fatalf("replay: %d %q %v after %d runs, want a replay of %q", replay.status, replay.body, replay.header, runs.Load(), first.body)
	}
	if other := post("k-1", "two"); other.status != http.StatusUnprocessableEntity {
		t.Fatalf("another body: %d %q, want 422", other.status, other.body)
	}
	rec, err := store.Lookup(ctx, idemhttp.Scope("tenant-1", http.MethodPost, "/orders/:item"), "k-1")
	if err != nil || rec.Response.Status != http.StatusCreated {
		t.Fatalf("record under the route template: %+v, %v; want the stored 201", rec, err)
	}

	conflict := post("k-2", "reserved")
	if conflict.status != http.StatusConflict || !strings.Contains(conflict.body, "item reserved") ||
		post("k-2", "reserved").header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("409: %d %q, want a 409 stored and replayed", conflict.status, conflict.body)
	}
	failed := post("k-3", "fail")
	if failed.status != http.StatusInternalServerError {
		t.Fatalf("plain error: %d %q, want 500", failed.status, failed.body)
	}
	// k-1 sold one (and another connection one), k-2's 409 committed its
	// sale, k-3 rolled back.
	if orders, left := count("SELECT COUNT(*) FROM idemecho_orders"), count("SELECT left_ FROM idemecho_stock"); orders != 2 || left != 7 {
		t.Fatalf("%d orders, %d left; want 2 orders (k-1, k-2) and 7 left", orders, left)
	}
	if records := count("SELECT COUNT(*) FROM idem_idemecho_test"); records != 2 {
		t.Fatalf("%d records, want 2 (k-1, k-2)", records)
	}
}
