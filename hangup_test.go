package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// endingContext is a caller's context caught while it ends: Done is closed
// and Err set, but what was registered with context.AfterFunc has not run
// yet. Go's own contexts pass through this state while they cancel their
// children, and a goroutine woken by Done (a handler waiting on the
// request's context) can act inside it; here the state lasts until the
// test is over, so what idem does in it is seen every time.
type endingContext struct {
	context.Context
	done chan struct{}

	mu  sync.Mutex
	err error
}

func newEndingContext(parent context.Context) *endingContext {
	return &endingContext{Context: parent, done: make(chan struct{})}
}

func (c *endingContext) Done() <-chan struct{} { return c.done }

func (c *endingContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// end ends the context without running its AfterFunc functions.
func (c *endingContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = context.Canceled
	close(c.done)
}

// AfterFunc makes context.AfterFunc register f here, where end does not
// run it: the instant before a context tells those that follow it.
func (c *endingContext) AfterFunc(func()) (stop func() bool) {
	return func() bool { return true }
}

// TestCallerGoneBeforeCommit: a caller whose context ended after the work
// but before the commit was decided gets an error, and nothing commits:
// not the effect, not the record. A client that hung up is told nothing,
// and a retry of its key runs the work again; committing would be as
// good only if the caller's end came after the commit began, and here
// it came first. Before the fix, Do and DoBatch committed when their
// goroutine reached the commit inside the instant Go's context takes to
// tell its AfterFunc functions.
func TestCallerGoneBeforeCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(ctx context.Context, store *idem.Store[*sql.Tx], req idem.Request, work func(context.Context, *sql.Tx) error) error
	}{
		{"Do", func(ctx context.Context, store *idem.Store[*sql.Tx], req idem.Request, work func(context.Context, *sql.Tx) error) error {
			_, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
				return idem.Response{Status: http.StatusCreated, Body: []byte(`{"id":1}`)}, work(ctx, tx)
			})
			return err
		}},
		{"DoBatch", func(ctx context.Context, store *idem.Store[*sql.Tx], req idem.Request, work func(context.Context, *sql.Tx) error) error {
			_, err := store.DoBatch(ctx, []idem.Request{req}, func(ctx context.Context, tx *sql.Tx, won []idem.Request) ([]idem.Response, error) {
				return []idem.Response{{Status: http.StatusCreated, Body: []byte(`{"id":1}`)}}, work(ctx, tx)
			})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lite := idemtest.NewSQLite(t, idem.Config{})
			if _, err := lite.DB.ExecContext(t.Context(), `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			req := idem.Request{Scope: "tenant-1 POST /orders", Key: "gone", Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(`{}`))}
			ctx := newEndingContext(t.Context())
			err := tc.do(ctx, lite.Store, req, func(fctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(fctx, `INSERT INTO orders (id) VALUES (1)`); err != nil {
					return err
				}
				ctx.end() // the client hangs up as the work ends
				return nil
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s whose caller went away before the commit: %v, want context.Canceled", tc.name, err)
			}
			var orders int
			if err := lite.DB.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM orders`).Scan(&orders); err != nil {
				t.Fatal(err)
			}
			if orders != 0 {
				t.Errorf("orders committed: %d, want 0", orders)
			}
			if rec, err := lite.Store.Lookup(t.Context(), req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
				t.Errorf("Lookup after the caller went away: %+v, %v; want ErrNotFound", rec, err)
			}
		})
	}
}
