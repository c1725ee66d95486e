package pgbouncer_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
)

// benchClients is how many requests run at once in BenchmarkPooler.
const benchClients = 16

// BenchmarkPooler measures what PgBouncer costs, side by side with the
// server direct: the bare write (BEGIN; INSERT an order; COMMIT) and the
// same write inside Store.Do, through each pooler in the mode it supports,
// with 16 requests at once on a pool of 20 connections. The figures in
// docs/clusters.md come from (without -race, which ./scripts/test adds)
//
//	cd integration && go test -run '^$' -bench Pooler -benchtime 3s -count 3 ./pgbouncer/
func BenchmarkPooler(b *testing.B) {
	set := containers.PgBouncers(b)
	direct := pool(b, set.Server, 4)
	for _, via := range []struct{ name, dsn string }{
		{"direct", set.Server},
		{"pgbouncer-1.26-cache-statement", set.New.DSN},
		{"pgbouncer-1.18-exec", set.Old.DSN + "&default_query_exec_mode=exec"},
	} {
		suffix := time.Now().UnixNano()
		orders, table := fmt.Sprintf("bench_orders_%d", suffix), fmt.Sprintf("idem_bench_%d", suffix)
		if _, err := direct.Exec(b.Context(), "CREATE TABLE "+orders+" (id bigserial PRIMARY KEY, k text NOT NULL, amount int NOT NULL)"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+orders) })
		store, p := newStore(b, set.Server, via.dsn, table, 20, idem.Config{})
		insert := "INSERT INTO " + orders + " (k, amount) VALUES ($1, $2)"
		var seq atomic.Int64
		b.Run("bare/"+via.name, func(b *testing.B) {
			parallel(b, func(ctx context.Context) error {
				return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, insert, fmt.Sprint(seq.Add(1)), 42)
					return err
				})
			})
		})
		b.Run("idem/"+via.name, func(b *testing.B) {
			parallel(b, func(ctx context.Context) error {
				key := fmt.Sprintf("bench-%d", seq.Add(1))
				res, err := store.Do(ctx, req(key), func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
					if _, err := tx.Exec(ctx, insert, key, 42); err != nil {
						return idem.Response{}, err
					}
					return idem.Response{Status: 201, Body: []byte(key)}, nil
				})
				if err == nil && !res.Committed {
					err = fmt.Errorf("%s: %v", key, res.Outcome)
				}
				return err
			})
		})
	}
}

// parallel runs op b.N times with benchClients goroutines, each call
// bounded by 10 s, and reports requests per second.
func parallel(b *testing.B, op func(context.Context) error) {
	procs := runtime.GOMAXPROCS(0)
	b.SetParallelism((benchClients + procs - 1) / procs) // GOMAXPROCS × this ≥ 16
	begin := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := op(ctx)
			cancel()
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(begin).Seconds(), "req/s")
}
