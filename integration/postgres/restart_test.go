package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// TestHistoryRestart runs the History case on a PostgreSQL server of its
// own, which it restarts once or twice during the run (a fast shutdown,
// then a kill): every operation that met a restart is modelled by what the
// dialect reported, and the final checks hold once the server is back.
func TestHistoryRestart(t *testing.T) {
	conformance.RunCases(t, restartBackend(t), []conformance.Case[pgx.Tx]{conformance.History[pgx.Tx]()})
}

// TestRestarts runs the Restarts case on a PostgreSQL server of its own:
// Do and lease work while the server restarts six times, every outcome
// held to what the table holds. A fast shutdown that meets a COMMIT in
// flight commits it and ends the session behind its result.
func TestRestarts(t *testing.T) {
	conformance.RunCases(t, restartBackend(t), []conformance.Case[pgx.Tx]{conformance.Restarts[pgx.Tx]()})
}

// TestRestartsSQL runs the Restarts case through database/sql (pgx's
// stdlib, BEGIN and COMMIT each alone) on a server of its own.
func TestRestartsSQL(t *testing.T) {
	srv, pool := restartablePool(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	conformance.RunCases(t, conformance.Backend[*sql.Tx]{
		Name: "postgres/sql/restart",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			d, err := postgres.NewSQL(t.Context(), db, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Restart: srv.Restart,
	}, []conformance.Case[*sql.Tx]{conformance.Restarts[*sql.Tx]()})
}

// restartBackend is a Backend on a restartable PostgreSQL server of t's
// own, on a pool of pgx.
func restartBackend(t *testing.T) conformance.Backend[pgx.Tx] {
	srv, pool := restartablePool(t)
	return conformance.Backend[pgx.Tx]{
		Name: "postgres/pgx/restart",
		Open: func(t *testing.T) dialect.Driver[pgx.Tx] {
			d, err := postgres.New(t.Context(), pool, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Restart: srv.Restart,
	}
}

// restartablePool starts a restartable PostgreSQL server of t's own and
// opens a pgx pool on it; t fails if the server was never restarted.
func restartablePool(t *testing.T) (*containers.Restartable, *pgxpool.Pool) {
	srv := containers.RestartablePostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(srv.DSN + "&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	t.Cleanup(func() {
		if srv.Restarts() == 0 {
			t.Error("the server was never restarted")
		}
	})
	return srv, pool
}
