package postgres_test

import (
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// BenchmarkPerKey compares a key done one at a time (Do) with keys done in
// batches of 1, 10 and 100 (DoBatch), through pgx and through database/sql;
// compare ns/key. Run with
//
//	go test -run '^$' -bench PerKey ./postgres/
func BenchmarkPerKey(b *testing.B) {
	pool, err := pgxpool.New(b.Context(), containers.Postgres(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	table := "idem_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b.Cleanup(func() { _, _ = pool.Exec(b.Context(), `DROP TABLE IF EXISTS "`+table+`" CASCADE`) })
	b.Run("pgx", func(b *testing.B) {
		d, err := postgres.New(b.Context(), pool, postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		conformance.BenchmarkPerKey(b, benchStore[pgx.Tx](b, d, table))
	})
	b.Run("database-sql", func(b *testing.B) {
		db := stdlib.OpenDBFromPool(pool)
		b.Cleanup(func() { db.Close() })
		d, err := postgres.NewSQL(b.Context(), db, postgres.Options{})
		if err != nil {
			b.Fatal(err)
		}
		conformance.BenchmarkPerKey(b, benchStore[*sql.Tx](b, d, table))
	})
}

func benchStore[TTx any](b *testing.B, d dialect.Driver[TTx], table string) *idem.Store[TTx] {
	b.Helper()
	store, err := idem.New(d, idem.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return store
}
