// Package pgbouncer_test runs idem through PgBouncer in transaction pooling
// mode, in front of one PostgreSQL server (containers.PgBouncers): the
// conformance suite, the model and History in each supported combination
// of PgBouncer version and pgx mode; a misconfigured one, whose error says
// what to set; claims that fail inside a pipeline; and a load with retrying
// clients while the pooler drops every connection.
package pgbouncer_test

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
	"github.com/idemkit/idem/integration/commitcut"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

func TestMain(m *testing.M) { containers.Main(m) }

// A combination is a way to run idem through PgBouncer that works: which
// PgBouncer, the DSN's settings, the API and the isolation level. Each
// runs the whole conformance suite; together they cover every API and
// level once.
type combination struct {
	name     string
	bouncer  func(*containers.PgBouncerSetup) *containers.PgBouncer
	settings string // added to the DSN
	api      string // "pgx", "database/sql" or "hold-begin"
	level    sql.IsolationLevel
}

func newer(s *containers.PgBouncerSetup) *containers.PgBouncer { return s.New }
func older(s *containers.PgBouncerSetup) *containers.PgBouncer { return s.Old }

// combinations: PgBouncer 1.26 with max_prepared_statements keeps pgx's
// default statement cache working on every API; PgBouncer 1.18, which
// knows nothing of prepared statements, needs pgx to prepare nothing
// across transactions: exec mode (unnamed statements) or the simple
// protocol.
var combinations = []combination{
	{"1.26/pgx/cache-statement/read-committed", newer, "", "pgx", sql.LevelReadCommitted},
	{"1.26/database-sql/cache-statement/repeatable-read", newer, "", "database/sql", sql.LevelRepeatableRead},
	{"1.26/hold-begin/cache-statement/serializable", newer, "", "hold-begin", sql.LevelSerializable},
	{"1.18/pgx/exec/serializable", older, "&default_query_exec_mode=exec", "pgx", sql.LevelSerializable},
	{"1.18/database-sql/simple-protocol/read-committed", older, "&default_query_exec_mode=simple_protocol", "database/sql", sql.LevelReadCommitted},
	{"1.18/hold-begin/exec/repeatable-read", older, "&default_query_exec_mode=exec", "hold-begin", sql.LevelRepeatableRead},
}

// pool opens a pgx pool on dsn, closed when t ends.
func pool(t testing.TB, dsn string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("ping %s: %v", dsn, err)
	}
	return p
}

// TestConformance runs the suite, the model-based tests and History
// included, in every combination; a lost COMMIT is cut on the client's
// side of the pooler (commitcut, in exec mode).
func TestConformance(t *testing.T) {
	set := containers.PgBouncers(t)
	for _, c := range combinations {
		t.Run(c.name, func(t *testing.T) {
			b := c.bouncer(set)
			p := pool(t, b.DSN+c.settings, 40)
			switch c.api {
			case "pgx":
				conformance.Run(t, conformance.Backend[pgx.Tx]{
					Name: "pgbouncer-" + c.name,
					Open: func(t *testing.T) dialect.Driver[pgx.Tx] {
						d, err := postgres.New(t.Context(), p, postgres.Options{Isolation: c.level})
						if err != nil {
							t.Fatal(err)
						}
						return d
					},
					InsertLegacy: insertLegacy,
					BeginReadOnly: func(t *testing.T, _ dialect.Driver[pgx.Tx]) pgx.Tx {
						tx, err := p.BeginTx(t.Context(), pgx.TxOptions{AccessMode: pgx.ReadOnly})
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
						return tx
					},
					BreakCommit: func(t *testing.T) conformance.CommitBreaker[pgx.Tx] {
						return commitcut.Breaker(t, b.DSN+c.settings, func(pool *pgxpool.Pool) (dialect.Driver[pgx.Tx], error) {
							return postgres.New(t.Context(), pool, postgres.Options{Isolation: c.level})
						})
					},
				})
			default:
				var db *sql.DB
				if c.api == "hold-begin" {
					db = sql.OpenDB(postgres.HoldBegin(stdlib.GetPoolConnector(p)))
				} else {
					db = stdlib.OpenDBFromPool(p)
				}
				t.Cleanup(func() { db.Close() })
				conformance.Run(t, conformance.Backend[*sql.Tx]{
					Name: "pgbouncer-" + c.name,
					Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
						d, err := postgres.NewSQL(t.Context(), db, postgres.Options{Isolation: c.level})
						if err != nil {
							t.Fatal(err)
						}
						return d
					},
					InsertLegacy: insertLegacy,
					BeginReadOnly: func(t *testing.T, _ dialect.Driver[*sql.Tx]) *sql.Tx {
						return conformance.BeginReadOnlySQL(t, db, "")
					},
					BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] {
						return commitcut.Breaker(t, b.DSN+c.settings, func(pool *pgxpool.Pool) (dialect.Driver[*sql.Tx], error) {
							db := stdlib.OpenDBFromPool(pool)
							if c.api == "hold-begin" {
								db = sql.OpenDB(postgres.HoldBegin(stdlib.GetPoolConnector(pool)))
							}
							t.Cleanup(func() { db.Close() })
							return postgres.NewSQL(t.Context(), db, postgres.Options{Isolation: c.level})
						})
					},
				})
			}
		})
	}
}

// insertLegacy writes rows as the first schema version did.
var insertLegacy = conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, func(t time.Time) any { return t })
