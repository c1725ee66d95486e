package pgbouncer_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// retryCounter counts the transactions Do runs again.
type retryCounter struct{ n atomic.Int64 }

func (c *retryCounter) Observe(_ context.Context, e idem.Event) {
	if e.Kind == idem.EventRetry {
		c.n.Add(1)
	}
}

// TestFailedStatementKeepsConnection: a function that answers 409 after a
// statement of its own failed (a unique violation) gets its 409 back
// unstored, and the next requests on the same client connection run once,
// without a retry. Behind PgBouncer 1.26 with max_prepared_statements,
// sending idem's completion into the failed transaction made PgBouncer
// record a statement the server refused, and end the session at the
// client's next Parse of it (FATAL 08P01): Do took that for a lost
// connection and ran its function again. Each API runs on a pool of one
// connection that has prepared nothing yet.
func TestFailedStatementKeepsConnection(t *testing.T) {
	set := containers.PgBouncers(t)
	direct := pool(t, set.Server, 2)
	suffix := time.Now().UnixNano()
	taken := fmt.Sprintf("taken_%d", suffix)
	if _, err := direct.Exec(t.Context(), "CREATE TABLE "+taken+" (k text PRIMARY KEY); INSERT INTO "+taken+" VALUES ('taken')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+taken) })
	for i, api := range []string{"pgx", "database/sql", "hold-begin"} {
		t.Run(api, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			table := fmt.Sprintf("idem_failed_%d_%d", suffix, i)
			retries := &retryCounter{}
			_, p := newStore(t, set.Server, set.New.DSN, table, 1, idem.Config{})
			do := func(key string, failFirst bool) (idem.Result, int, error) {
				calls := 0
				var res idem.Result
				var err error
				work := func(ctx context.Context, exec func(ctx context.Context, q string) error) (idem.Response, error) {
					calls++
					if failFirst {
						if exec(ctx, "INSERT INTO "+taken+" VALUES ('taken')") == nil {
							return idem.Response{}, fmt.Errorf("the duplicate insert did not fail")
						}
						return idem.Response{Status: 409, Body: []byte("taken")}, nil
					}
					return idem.Response{Status: 201, Body: []byte(key)}, exec(ctx, "SELECT 1")
				}
				cfg := idem.Config{Table: table, Observer: retries}
				switch api {
				case "pgx":
					d, derr := postgres.New(ctx, p, postgres.Options{})
					if derr != nil {
						t.Fatal(derr)
					}
					s, serr := idem.New(d, cfg)
					if serr != nil {
						t.Fatal(serr)
					}
					res, err = s.Do(ctx, req(key), func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
						return work(ctx, func(ctx context.Context, q string) error { _, err := tx.Exec(ctx, q); return err })
					})
				default:
					connector := stdlib.GetPoolConnector(p)
					var db *sql.DB
					if api == "hold-begin" {
						db = sql.OpenDB(postgres.HoldBegin(connector))
					} else {
						db = sql.OpenDB(connector)
					}
					defer db.Close()
					d, derr := postgres.NewSQL(ctx, db, postgres.Options{})
					if derr != nil {
						t.Fatal(derr)
					}
					s, serr := idem.New(d, cfg)
					if serr != nil {
						t.Fatal(serr)
					}
					res, err = s.Do(ctx, req(key), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
						return work(ctx, func(ctx context.Context, q string) error { _, err := tx.ExecContext(ctx, q); return err })
					})
				}
				return res, calls, err
			}
			res, calls, err := do("failed", true)
			if err != nil || res.Outcome != idem.Won || res.Committed || res.Response.Status != 409 || !errors.Is(res.NotStored, idem.ErrTxAborted) || calls != 1 {
				t.Fatalf("409 after a failed statement: %+v, %v after %d calls; want the 409 unstored (ErrTxAborted), one call", res, err, calls)
			}
			for i := range 3 {
				key := fmt.Sprintf("next-%d", i)
				res, calls, err := do(key, false)
				if err != nil || !res.Committed || calls != 1 {
					t.Fatalf("request %s on the same connection: %v, %v after %d calls; want done in one", key, res.Outcome, err, calls)
				}
			}
			if n := retries.n.Load(); n != 0 {
				t.Errorf("Do retried %d times: the connection broke after the failed statement", n)
			}
		})
	}
}

// TestFailedStatementInCallersTransaction: the same through Store.Claim on
// the caller's own pgx transaction. After a statement of the caller failed,
// Complete answers ErrTxAborted without sending the completion, so the next
// request on the same client connection completes: sent, its Parse would
// have made PgBouncer 1.26 end the session at that next request.
func TestFailedStatementInCallersTransaction(t *testing.T) {
	set := containers.PgBouncers(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	direct := pool(t, set.Server, 2)
	taken := fmt.Sprintf("taken_caller_%d", time.Now().UnixNano())
	if _, err := direct.Exec(ctx, "CREATE TABLE "+taken+" (k text PRIMARY KEY); INSERT INTO "+taken+" VALUES ('taken')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+taken) })
	store, p := newStore(t, set.Server, set.New.DSN, taken+"_idem", 1, idem.Config{})

	claim := func(key string, fail bool) error {
		tx, err := p.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		c, err := store.Claim(ctx, tx, req(key))
		if err != nil || c.Outcome != idem.Won {
			return fmt.Errorf("claim %s: %v, %v", key, c, err)
		}
		if fail {
			if _, err := tx.Exec(ctx, "INSERT INTO "+taken+" VALUES ('taken')"); err == nil {
				return errors.New("the duplicate insert did not fail")
			}
		}
		if err := c.Complete(ctx, idem.Response{Status: 201, Body: []byte(key)}); err != nil {
			return fmt.Errorf("complete %s: %w", key, err)
		}
		return tx.Commit(ctx)
	}
	if err := claim("failed", true); !errors.Is(err, idem.ErrTxAborted) {
		t.Fatalf("Complete after the caller's statement failed: %v, want ErrTxAborted", err)
	}
	for i := range 3 {
		key := fmt.Sprintf("next-%d", i)
		if err := claim(key, false); err != nil {
			t.Fatalf("request %s on the same connection: %v", key, err)
		}
	}
}
