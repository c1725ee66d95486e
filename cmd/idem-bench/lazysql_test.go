package main

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

func TestMain(m *testing.M) { containers.Main(m) }

// TestDatabaseSQLRoundTrips shows, on a real server, why database/sql on
// PostgreSQL costs 5 round trips per won request with pgx's stdlib driver,
// and that a connector holding BEGIN back brings it to pgx's 3: the stock
// BeginTx sends BEGIN by itself (one round trip before any statement), the
// held one sends nothing. It needs a PostgreSQL server: it skips without
// one, and fails when IDEM_REQUIRE names postgres (as CI sets it).
func TestDatabaseSQLRoundTrips(t *testing.T) {
	dsn := containers.Postgres(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name      string
		lazy      bool
		beginRTs  int64 // round trips of BeginTx alone
		wonRTs    int64 // round trips of a won Store.Do
		replayRTs int64
	}{
		{"stdlib", false, 1, 5, 4},
		{"held BEGIN", true, 0, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := pgx.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			w := &wireStats{}
			cc.DialFunc = countingDialer(w, func() protocol { return &pgProtocol{} }, nil)
			var db *sql.DB
			if tc.lazy {
				db = sql.OpenDB(newLazyConnector(*cc))
			} else {
				db = stdlib.OpenDB(*cc)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			db.SetMaxIdleConns(1)
			if err := db.PingContext(ctx); err != nil {
				t.Fatal(err)
			}
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			before := w.snapshot()
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.snapshot().sub(before).roundTrips; got != tc.beginRTs {
				t.Errorf("BeginTx alone: %d round trips, want %d", got, tc.beginRTs)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			conn.Close()

			table := "rt_" + map[bool]string{false: "stock", true: "lazy"}[tc.lazy]
			var store *idem.Store[*sql.Tx]
			if tc.lazy {
				d, err := newLazyDriver(db)
				if err != nil {
					t.Fatal(err)
				}
				store, err = idem.New[*sql.Tx](d, idem.Config{Table: table})
				if err != nil {
					t.Fatal(err)
				}
			} else {
				d, err := postgres.NewSQL(ctx, db, postgres.Options{})
				if err != nil {
					t.Fatal(err)
				}
				store, err = idem.New[*sql.Tx](d, idem.Config{Table: table})
				if err != nil {
					t.Fatal(err)
				}
			}
			if err := store.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			defer db.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+table+`, `+table+`_schema`)
			do := func(n int64) (idem.Outcome, int64) {
				t.Helper()
				before := w.snapshot()
				res, err := store.Do(ctx, request(newKeySpace("rt", path(table), 1, 0), n, ""), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
					_, err := tx.ExecContext(ctx, `SELECT 1`)
					return response(n), err
				})
				if err != nil {
					t.Fatal(err)
				}
				return res.Outcome, w.snapshot().sub(before).roundTrips
			}
			// The statements' first use on the connection (pgx prepares
			// each in a round trip of its own, once).
			do(0)
			do(0)
			if out, rts := do(1); out != idem.Won || rts != tc.wonRTs {
				t.Errorf("won request: %v in %d round trips, want won in %d", out, rts, tc.wonRTs)
			}
			if out, rts := do(1); out != idem.Replay || rts != tc.replayRTs {
				t.Errorf("replay: %v in %d round trips, want replay in %d", out, rts, tc.replayRTs)
			}
		})
	}
}
