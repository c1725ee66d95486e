package frameworks_test

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// echoService is an echo app on SQLite with idemhttp's middleware on
// POST /orders, installed with echo.WrapMiddleware(mw.Wrap). Its handler
// INSERTs an order in the middleware's transaction; on its first run it
// then returns fail's error, which echo renders after the middleware has
// finished; later runs answer 201. Use idemecho instead: it renders the
// error inside the transaction (idemecho_test.go).
type echoService struct {
	db   *sql.DB
	srv  *httptest.Server
	runs atomic.Int64
	log  syncBuffer // the middleware's log
}

// syncBuffer is a bytes.Buffer for a logger that server goroutines share.
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

func newEchoService(t *testing.T, fail error) *echoService {
	t.Helper()
	lite := idemtest.NewSQLite(t, idem.Config{})
	db, store := lite.DB, lite.Store
	if _, err := db.ExecContext(t.Context(), "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	s := &echoService{db: db}
	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		// echo.WrapMiddleware hands idemhttp no route (r.Pattern is ""), so
		// without this every request gets 500 route-missing; named by hand,
		// the pitfall below remains.
		Route:  func(*http.Request) string { return "/orders" },
		Logger: slog.New(slog.NewTextHandler(&s.log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner = true
	e.POST("/orders", func(c echo.Context) error {
		run := s.runs.Add(1)
		tx, ok := idemhttp.Tx[*sql.Tx](c.Request().Context())
		if !ok {
			return errors.New("no transaction in the request context")
		}
		body, err := io.ReadAll(c.Request().Body)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(c.Request().Context(), "INSERT INTO orders (item) VALUES (?)", string(body))
		if err != nil {
			return err
		}
		if run == 1 {
			return fail // after the INSERT: echo renders it, after the middleware
		}
		id, err := res.LastInsertId()
		if err != nil {
			return err
		}
		return c.JSON(http.StatusCreated, map[string]any{"id": id, "run": run})
	}, echo.WrapMiddleware(mw.Wrap))
	s.srv = httptest.NewServer(e)
	t.Cleanup(s.srv.Close)
	return s
}

type echoAnswer struct {
	status int
	header http.Header
	body   string
}

func (s *echoService) post(t *testing.T, key string) echoAnswer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.srv.URL+"/orders", strings.NewReader("book"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", "tenant-1")
	req.Header.Set(idemhttp.HeaderKey, key)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return echoAnswer{status: resp.StatusCode, header: resp.Header, body: string(body)}
}

func (s *echoService) count(t *testing.T, table string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestEchoHandlerError: an echo handler that INSERTs and then returns an
// error, behind echo.WrapMiddleware(mw.Wrap), has written nothing when the
// middleware finishes (echo renders the error later, into the middleware's
// spent writer). The client gets 500 "no-response", not an empty 200;
// nothing is committed, neither the order nor a record; the retry runs the
// handler again, and its answer is the one stored and replayed.
func TestEchoHandlerError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"plain error", errors.New("inventory check failed")},
		{"echo.HTTPError", echo.NewHTTPError(http.StatusConflict, "item reserved")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newEchoService(t, tc.err)
			const key = "echo-order-1"
			first := s.post(t, key)
			var p struct{ Code string }
			_ = json.Unmarshal([]byte(first.body), &p)
			if orders, records := s.count(t, "orders"), s.count(t, "idempotency_keys"); first.status != http.StatusInternalServerError ||
				p.Code != "no-response" || orders != 0 || records != 0 {
				t.Fatalf("first: %d %q, %d orders and %d records committed; want 500 no-response and nothing committed",
					first.status, first.body, orders, records)
			}
			if log := s.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "without writing a response") {
				t.Errorf("the middleware's log %q has no ERROR about the missing response", log)
			}
			again := s.post(t, key)
			if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "" || s.runs.Load() != 2 {
				t.Fatalf("retry: %d %q %v after %d runs, want the handler to run again and answer 201", again.status, again.body, again.header, s.runs.Load())
			}
			replay := s.post(t, key)
			if replay.status != http.StatusCreated || replay.body != again.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" || s.runs.Load() != 2 {
				t.Fatalf("third: %d %q %v after %d runs, want a replay of %q", replay.status, replay.body, replay.header, s.runs.Load(), again.body)
			}
			if orders := s.count(t, "orders"); orders != 1 {
				t.Fatalf("%d orders, want 1", orders)
			}
		})
	}
}
