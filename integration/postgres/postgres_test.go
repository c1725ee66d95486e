package postgres_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp/idemhttptest"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

func TestMain(m *testing.M) { containers.Main(m) }

// levels are the isolation levels the suite runs at.
var levels = []struct {
	name  string
	level sql.IsolationLevel
}{
	{"read-committed", sql.LevelReadCommitted},
	{"repeatable-read", sql.LevelRepeatableRead},
	{"serializable", sql.LevelSerializable},
}

// server is the pool and the *sql.DBs every test in this binary shares.
var server struct {
	once sync.Once
	pool *pgxpool.Pool
	db   *sql.DB
	// held is a *sql.DB on the same pool whose connections hold BEGIN back
	// (postgres.HoldBegin).
	held *sql.DB
	err  error
}

func connect(t *testing.T) (*pgxpool.Pool, *sql.DB) {
	t.Helper()
	dsn := containers.Postgres(t)
	server.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			server.err = err
			return
		}
		cfg.MaxConns = 40
		server.pool, server.err = pgxpool.NewWithConfig(ctx, cfg)
		if server.err != nil {
			return
		}
		server.err = server.pool.Ping(ctx)
		server.db = stdlib.OpenDBFromPool(server.pool)
		server.held = sql.OpenDB(postgres.HoldBegin(stdlib.GetPoolConnector(server.pool)))
	})
	if server.err != nil {
		t.Fatalf("connect to PostgreSQL: %v", server.err)
	}
	return server.pool, server.db
}

func TestConformancePgx(t *testing.T) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			conformance.Run(t, conformance.Backend[pgx.Tx]{
				Name: "postgres/pgx/" + l.name,
				Open: func(t *testing.T) dialect.Driver[pgx.Tx] {
					pool, _ := connect(t)
					d, err := postgres.New(t.Context(), pool, postgres.Options{Isolation: l.level})
					if err != nil {
						t.Fatal(err)
					}
					return d
				},
				InsertLegacy: insertLegacy,
				BeginReadOnly: func(t *testing.T, _ dialect.Driver[pgx.Tx]) pgx.Tx {
					pool, _ := connect(t)
					tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{AccessMode: pgx.ReadOnly})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
					return tx
				},
				BreakCommit: func(t *testing.T) conformance.CommitBreaker[pgx.Tx] {
					return commitBreaker(t, func(pool *pgxpool.Pool) (dialect.Driver[pgx.Tx], error) {
						return postgres.New(t.Context(), pool, postgres.Options{Isolation: l.level})
					})
				},
			})
		})
	}
}

func TestConformanceDatabaseSQL(t *testing.T) {
	conformanceSQL(t, "postgres/database-sql", func(t *testing.T) *sql.DB {
		_, db := connect(t)
		return db
	}, func(pool *pgxpool.Pool) *sql.DB { return stdlib.OpenDBFromPool(pool) })
}

// conformanceSQL runs the suite at every level on database/sql: on the
// *sql.DB that db returns, and for the broken COMMITs on one that fromPool
// opens on a pool of its own.
func conformanceSQL(t *testing.T, name string, db func(*testing.T) *sql.DB, fromPool func(*pgxpool.Pool) *sql.DB) {
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			conformance.Run(t, conformance.Backend[*sql.Tx]{
				Name: name + "/" + l.name,
				Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
					d, err := postgres.NewSQL(t.Context(), db(t), postgres.Options{Isolation: l.level})
					if err != nil {
						t.Fatal(err)
					}
					return d
				},
				InsertLegacy: insertLegacy,
				BeginReadOnly: func(t *testing.T, _ dialect.Driver[*sql.Tx]) *sql.Tx {
					return conformance.BeginReadOnlySQL(t, db(t), "")
				},
				BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] {
					return commitBreaker(t, func(pool *pgxpool.Pool) (dialect.Driver[*sql.Tx], error) {
						db := fromPool(pool)
						t.Cleanup(func() { db.Close() })
						return postgres.NewSQL(t.Context(), db, postgres.Options{Isolation: l.level})
					})
				},
			})
		})
	}
}

// insertLegacy writes rows as the first schema version did: its columns,
// timestamptz times.
var insertLegacy = conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, func(t time.Time) any { return t })

// The HTTP middleware's suite, through pgx (whose handlers get a pgx.Tx) and
// through database/sql.
func TestHTTP(t *testing.T) {
	t.Run("pgx", func(t *testing.T) {
		idemhttptest.Run(t, conformance.Backend[pgx.Tx]{
			Name: "postgres/pgx",
			Open: func(t *testing.T) dialect.Driver[pgx.Tx] {
				pool, _ := connect(t)
				d, err := postgres.New(t.Context(), pool, postgres.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return d
			},
		})
	})
	t.Run("database-sql", func(t *testing.T) {
		idemhttptest.Run(t, conformance.Backend[*sql.Tx]{
			Name: "postgres/database-sql",
			Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
				_, db := connect(t)
				d, err := postgres.NewSQL(t.Context(), db, postgres.Options{})
				if err != nil {
					t.Fatal(err)
				}
				return d
			},
		})
	})
}
