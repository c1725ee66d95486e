package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// TestDoAcrossShutdowns runs Do on keys of its own, each writing one effect
// row, while the server restarts under it (a fast shutdown, then a kill,
// in turns), and then holds every outcome to what the table holds: a
// winner's effect is there, a failure's is not, an unknown outcome may be
// either, and no call answers Replay (nobody else used its key). A server
// shutting down while a COMMIT runs commits it and ends the session behind
// COMMIT's result; a Do that took that for a failure retried and found its
// own record: a Replay, or "gave up" for work that committed.
func TestDoAcrossShutdowns(t *testing.T) {
	const (
		rounds  = 6
		workers = 12
		// perWorker bounds each worker's calls in a round; load bounds
		// the round's time.
		perWorker = 2000
		load      = 3 * time.Second
	)
	srv := containers.RestartablePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(srv.DSN + "&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = workers
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{Table: "idem_shutdown_test", CommitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE shutdown_effects (k text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		key string
		res idem.Result
		err error
	}
	var (
		mu       sync.Mutex
		outcomes []outcome
		seq      atomic.Int64
	)
	call := func(ctx context.Context) {
		key := fmt.Sprintf("k%d", seq.Add(1))
		req := idem.Request{Scope: "shutdown", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/", []byte(key))}
		res, err := store.Do(ctx, req, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
			if _, err := tx.Exec(ctx, "INSERT INTO shutdown_effects (k) VALUES ($1)", key); err != nil {
				return idem.Response{}, err
			}
			return idem.Response{Status: 201, Body: []byte(key)}, nil
		})
		mu.Lock()
		outcomes = append(outcomes, outcome{key, res, err})
		mu.Unlock()
	}
	for round := range rounds {
		roundCtx, stop := context.WithTimeout(ctx, load)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range perWorker {
					if roundCtx.Err() != nil {
						return
					}
					call(roundCtx)
				}
			})
		}
		time.Sleep(load / 6)
		if err := srv.Restart(ctx); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		wg.Wait()
		stop()
		if err := awaitServer(ctx, pool); err != nil {
			t.Fatalf("round %d: the server did not come back: %v", round, err)
		}
	}

	effects := map[string]bool{}
	rows, err := pool.Query(ctx, "SELECT k FROM shutdown_effects")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			t.Fatal(err)
		}
		effects[k] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var won, failed, unknown int
	for _, o := range outcomes {
		switch {
		case errors.Is(o.err, idem.ErrCommitUnknown):
			unknown++
		case o.err != nil:
			failed++
			if effects[o.key] {
				t.Errorf("key %s: Do failed (%v), yet its work committed", o.key, o.err)
			}
		case o.res.Outcome == idem.Won && o.res.Committed:
			won++
			if !effects[o.key] {
				t.Errorf("key %s: Do won and committed, yet its work is not in the table", o.key)
			}
		default:
			t.Errorf("key %s: %v on a key nobody else used (its own COMMIT committed and was taken for a failure)", o.key, o.res.Outcome)
		}
	}
	t.Logf("%d calls over %d restarts: %d won, %d failed, %d unknown", len(outcomes), srv.Restarts(), won, failed, unknown)
	if won == 0 || failed == 0 {
		t.Errorf("the restarts met no call (%d won, %d failed): the test proves nothing", won, failed)
	}
}

// awaitServer waits until the server answers again.
func awaitServer(ctx context.Context, pool *pgxpool.Pool) error {
	ctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	for {
		err := pool.Ping(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
