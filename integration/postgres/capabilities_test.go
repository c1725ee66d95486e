package postgres_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// writeCounter counts the writes (round trips, here) of its connections.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (c writeCounter) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// TestWrappedTxKeepsAbilities: a wrapper made with conformance.WrappedTx
// keeps the pgx transaction's pipelining and deferred completion (one round
// trip for BEGIN and three statements, one for a held statement and
// COMMIT); a wrapper that does not forward them falls back to a round trip
// per statement (BEGIN still rides with the first), with the same result.
func TestWrappedTxKeepsAbilities(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(containers.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	var writes atomic.Int64
	var dialer net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		return writeCounter{c, &writes}, err
	}
	cfg.MaxConns = 1
	// One write per round trip: no statement preparation in between.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	table := "idem_wrapped_" + time.Now().Format("150405000000")
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (n int)"); err != nil {
		t.Fatal(err)
	}
	defer pool.Exec(context.Background(), "DROP TABLE "+table)

	insert := dialect.Statement{SQL: "INSERT INTO " + table + " (n) VALUES (1)"}
	for _, tc := range []struct {
		name                  string
		wrap                  func(dialect.Tx[pgx.Tx]) dialect.Tx[pgx.Tx]
		pipeline, deferCommit int64 // round trips
		deferred              bool
	}{
		{"WrappedTx", func(tx dialect.Tx[pgx.Tx]) dialect.Tx[pgx.Tx] { return &conformance.WrappedTx[pgx.Tx]{Tx: tx} }, 1, 1, true},
		{"plain wrapper", func(tx dialect.Tx[pgx.Tx]) dialect.Tx[pgx.Tx] { return struct{ dialect.Tx[pgx.Tx] }{tx} }, 3, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := d.Begin(ctx, dialect.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			w := tc.wrap(tx)
			defer w.Rollback(ctx)
			before := writes.Load()
			if err := dialect.Pipeline(ctx, w, insert, insert, insert); err != nil {
				t.Fatal(err)
			}
			if got := writes.Load() - before; got != tc.pipeline {
				t.Errorf("BEGIN and three statements took %d round trips, want %d", got, tc.pipeline)
			}
			before = writes.Load()
			deferred := dialect.DeferToCommit(w, insert)
			if !deferred {
				if err := dialect.Run(ctx, w, insert); err != nil {
					t.Fatal(err)
				}
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got := writes.Load() - before; deferred != tc.deferred || got != tc.deferCommit {
				t.Errorf("deferred=%v, a statement and COMMIT took %d round trips; want deferred=%v and %d", deferred, got, tc.deferred, tc.deferCommit)
			}
			var n int64
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n == 0 || n%4 != 0 {
				t.Errorf("rows after the transaction = %d (%v), want a multiple of 4", n, err)
			}
		})
	}
}
