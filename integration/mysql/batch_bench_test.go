package mysql_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"

	"database/sql"
)

// BenchmarkPerKey compares a key done one at a time (Do) with keys done in
// batches of 1, 10 and 100 (DoBatch); compare ns/key. Run with
//
//	go test -run '^$' -bench PerKey ./mysql/
func BenchmarkPerKey(b *testing.B) {
	db, err := sql.Open("mysql", containers.MySQL(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
	defer cancel()
	d, err := mysql.New(ctx, db, mysql.Options{})
	if err != nil {
		b.Fatal(err)
	}
	table := "idem_bench_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS `"+table+"`") })
	store, err := idem.New(d, idem.Config{Table: table})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	conformance.BenchmarkPerKey(b, store)
}
