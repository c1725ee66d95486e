package idemgin_test

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/gin-gonic/gin/binding"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemtest"
)

// boundService is a gin engine whose routes bind the body with
// ShouldBindBodyWith in a middleware before the wrapped handler, as a
// validation middleware does: gin drains c.Request.Body and keeps the bytes
// in c.Keys. Its handlers record what each run saw of the body.
type boundService struct {
	engine *gin.Engine
	db     *sql.DB

	mu   sync.Mutex
	runs []string // per run: what ShouldBindBodyWith bound | what c.Request.Body held
}

func (s *boundService) saw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.runs...)
}

func newBoundService(t *testing.T) *boundService {
	t.Helper()
	lite := idemtest.NewSQLite(t, idem.Config{})
	if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE payments (id INTEGER PRIMARY KEY, order_id TEXT NOT NULL, amount INTEGER NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	mw, err := idemgin.New(lite.Store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		t.Fatal(err)
	}
	s := &boundService{db: lite.DB}
	validate := func(c *gin.Context) {
		var p payment
		if err := c.ShouldBindBodyWith(&p, binding.JSON); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		c.Next()
	}
	// pay binds the body again from gin's cache, reads c.Request.Body,
	// INSERTs the bound amount and answers 201 with both. conflict: its
	// first run then fails with a serialization failure, after spoiling
	// the cached bytes, and is run again.
	pay := func(conflict bool) gin.HandlerFunc {
		first := true
		return func(c *gin.Context) {
			var p payment
			if err := c.ShouldBindBodyWith(&p, binding.JSON); err != nil {
				c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
				return
			}
			raw, err := io.ReadAll(c.Request.Body)
			if err != nil {
				idemhttp.Fail(c.Writer, c.Request, err)
				return
			}
			s.mu.Lock()
			s.runs = append(s.runs, fmt.Sprintf("%d|%s", p.Amount, raw))
			s.mu.Unlock()
			tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
			if _, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments (order_id, amount) VALUES (?, ?)", c.Param("id"), p.Amount); err != nil {
				idemhttp.Fail(c.Writer, c.Request, err)
				return
			}
			if conflict && first {
				first = false
				if cached, ok := c.Get(gin.BodyBytesKey); ok {
					clear(cached.([]byte))
				}
				idemhttp.Fail(c.Writer, c.Request, fmt.Errorf("simulated: %w", idem.ErrSerialization))
				return
			}
			c.JSON(http.StatusCreated, gin.H{"order": c.Param("id"), "amount": p.Amount, "raw": string(raw)})
		}
	}
	e := gin.New()
	e.POST("/orders/:id/pay", validate, mw.Wrap(pay(false)))
	e.POST("/orders/:id/retry", validate, mw.Wrap(pay(true)))
	s.engine = e
	return s
}

func (s *boundService) send(t *testing.T, path, key, body string) answer {
	t.Helper()
	req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Tenant", tenant)
	req.Header.Set(idemhttp.HeaderKey, key)
	rec := httptest.NewRecorder()
	s.engine.ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Result().Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: rec.Code, header: rec.Header(), body: string(b)}
}

// TestBoundBodyFingerprinted: a middleware bound the body with
// ShouldBindBodyWith before the wrapped handler, draining c.Request.Body.
// The middleware fingerprints the bytes gin kept, so the same key with
// another body is a mismatch (422), never the first body's answer, and the
// same body is a replay.
func TestBoundBodyFingerprinted(t *testing.T) {
	t.Parallel()
	s := newBoundService(t)
	first := s.send(t, "/orders/A-1/pay", "key-1", `{"amount":100}`)
	if first.status != http.StatusCreated || !strings.Contains(first.body, `"amount":100`) {
		t.Fatalf("first: %d %q, want 201 for 100", first.status, first.body)
	}
	other := s.send(t, "/orders/A-1/pay", "key-1", `{"amount":999}`)
	if other.status != http.StatusUnprocessableEntity {
		t.Fatalf("another body, same key: %d %q, want 422 (not the first body's answer)", other.status, other.body)
	}
	replay := s.send(t, "/orders/A-1/pay", "key-1", `{"amount":100}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("same body: %d %q %v, want a replay of %q", replay.status, replay.body, replay.header, first.body)
	}
	if runs := s.saw(); len(runs) != 1 {
		t.Fatalf("the handler ran %d times (%q), want once", len(runs), runs)
	}
}

// TestBoundBodyReachesHandler: every run of the handler gets the bound
// bytes, through ShouldBindBodyWith's cache and through c.Request.Body,
// even after an earlier run spoiled the cache and drained the body.
func TestBoundBodyReachesHandler(t *testing.T) {
	t.Parallel()
	const body = `{"amount":250}`
	for _, tc := range []struct {
		path string
		runs int
	}{
		{"/orders/B-2/pay", 1},
		{"/orders/B-2/retry", 2},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			s := newBoundService(t)
			got := s.send(t, tc.path, "key-1", body)
			if got.status != http.StatusCreated || !strings.Contains(got.body, `"amount":250`) {
				t.Fatalf("answer %d %q, want 201 for 250", got.status, got.body)
			}
			runs := s.saw()
			if len(runs) != tc.runs {
				t.Fatalf("the handler ran %d times (%q), want %d", len(runs), runs, tc.runs)
			}
			for i, r := range runs {
				if want := "250|" + body; r != want {
					t.Errorf("run %d saw %q (bound amount | c.Request.Body), want %q", i+1, r, want)
				}
			}
			var n, amount int
			if err := s.db.QueryRowContext(t.Context(), "SELECT COUNT(*), COALESCE(SUM(amount), 0) FROM payments").Scan(&n, &amount); err != nil || n != 1 || amount != 250 {
				t.Fatalf("payments: %d summing %d (%v), want one of 250", n, amount, err)
			}
		})
	}
}

// TestUnboundBodyEachRun: with no body bound before the wrapped handler,
// each run starts without ShouldBindBodyWith's cache, as the first did: a
// run that binds with it and then reads c.Request.Body sees what the first
// run saw (gin drained the body into the cache), not a cache an earlier
// run left next to a fresh body.
func TestUnboundBodyEachRun(t *testing.T) {
	t.Parallel()
	lite := idemtest.NewSQLite(t, idem.Config{})
	mw, err := idemgin.New(lite.Store, idemhttp.Config{
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs []string
	e := gin.New()
	e.POST("/orders/:id/pay", mw.Wrap(func(c *gin.Context) {
		var p payment
		if err := c.ShouldBindBodyWith(&p, binding.JSON); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		raw, err := io.ReadAll(c.Request.Body)
		if err != nil {
			idemhttp.Fail(c.Writer, c.Request, err)
			return
		}
		runs = append(runs, fmt.Sprintf("%d|%s", p.Amount, raw))
		if len(runs) == 1 {
			idemhttp.Fail(c.Writer, c.Request, fmt.Errorf("simulated: %w", idem.ErrSerialization))
			return
		}
		c.JSON(http.StatusCreated, gin.H{"amount": p.Amount})
	}))
	s := &boundService{engine: e}
	got := s.send(t, "/orders/C-3/pay", "key-1", `{"amount":7}`)
	if got.status != http.StatusCreated {
		t.Fatalf("answer %d %q, want 201", got.status, got.body)
	}
	if want := []string{"7|", "7|"}; fmt.Sprint(runs) != fmt.Sprint(want) {
		t.Fatalf("the runs saw %q (bound amount | c.Request.Body after the bind), want %q", runs, want)
	}
}
