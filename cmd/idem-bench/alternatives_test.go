package main

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// The alternatives to idem's claim that the benchmark measures run on the
// library's own core, so the conformance suite can judge them: on SQLite
// always, on PostgreSQL and MariaDB (containers) when
// IDEM_BENCH_ALTERNATIVES=1.

func TestMain(m *testing.M) { containers.Main(m) }

// shortfalls are the conformance cases an alternative is known to fail,
// with why.
type shortfalls map[string]string

// lockShortfalls: what deciding the claim of Store.Do without writing
// gives up.
var lockShortfalls = shortfalls{
	"FunctionEndsTransaction/commit=true": "a function that commits Do's transaction itself commits its effect with no record " +
		"(there is no pending record to commit with it), so a retry does the work again instead of answering in flight",
	"CompleteFindsNothingRollsBack": "there is no pending record to vanish: the completion writes the record whatever the " +
		"function deleted, so Do succeeds",
}

// mariadbLockShortfalls: what the MariaDB lock alternative gives up besides
// lockShortfalls, and why the library keeps its claim there.
var mariadbLockShortfalls = shortfalls{
	"ThirtyTwoClaimsOneEffect": mariadbGapLocks,
	"PerCallIsolation":         mariadbGapLocks,
	"ReadFirstOpenKeys":        mariadbGapLocks,
}

const mariadbGapLocks = "racing first claims take gap locks that do not exclude each other, so losers deadlock and retry " +
	"instead of waiting for the winner (one effect still commits, but the race is not the one the suite proves)"

// skip skips t when its case is a known shortfall.
func (s shortfalls) skip(t *testing.T) {
	name := t.Name()
	for c, why := range s {
		if strings.HasSuffix(name, "/"+c) {
			t.Skipf("known shortfall of the alternative: %s", why)
		}
	}
}

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// sqliteLegacy, pgLegacy and mysqlLegacy write rows as the first schema
// version did.
var (
	sqliteLegacy = conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, func(t time.Time) any { return t.UnixMicro() })
	pgLegacy = conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, func(t time.Time) any { return t })
	mysqlLegacy = conformance.LegacyInserter("INSERT INTO `%s` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
		func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") })
)

func TestSQLiteLockConformance(t *testing.T) {
	conformance.RunExamples(t, conformance.Backend[*sql.Tx]{
		Name: "sqlite/lock",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			lockShortfalls.skip(t)
			d, err := sqlite.New(t.Context(), openSQLite(t), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			base, _ := d.Dialect().(*sqlite.Dialect)
			return withDialect[*sql.Tx]{d, newSQLiteLock(base)}
		},
		InsertLegacy: sqliteLegacy,
		BeginReadOnly: func(t *testing.T, d dialect.Driver[*sql.Tx]) *sql.Tx {
			return conformance.BeginReadOnlySQL(t, d.(withDialect[*sql.Tx]).Driver.(*sqlite.Driver).DB(), "PRAGMA query_only = ON")
		},
	})
}

// TestLockDecidesWithoutWriting checks what the lock alternative is for:
// a won claim of Do writes no pending record (the record appears once,
// completed), and a claim in a caller's transaction still does.
func TestLockDecidesWithoutWriting(t *testing.T) {
	ctx := t.Context()
	db := openSQLite(t)
	d, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base, _ := d.Dialect().(*sqlite.Dialect)
	store, err := idem.New[*sql.Tx](withDialect[*sql.Tx]{d, newSQLiteLock(base)}, idem.Config{Table: "lock_t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	req := request(newKeySpace("t", "lock", 1, 0), 1, "")
	var inside int
	res, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM lock_t`).Scan(&inside)
		return response(1), err
	})
	if err != nil || res.Outcome != idem.Won {
		t.Fatalf("Do: %+v, %v", res.Outcome, err)
	}
	if inside != 0 {
		t.Errorf("records inside Do's transaction = %d, want 0: the lock claim wrote a pending record", inside)
	}
	rec, err := store.Lookup(ctx, req.Scope, req.Key)
	if err != nil || !rec.Completed || rec.Response.Status != 201 {
		t.Fatalf("record after Do: %+v, %v, want completed", rec, err)
	}
	// A caller's transaction: the claim writes its pending record.
	other := request(newKeySpace("t", "lock", 1, 0), 2, "")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	cl, err := store.Claim(ctx, tx, other)
	if err != nil || cl.Outcome != idem.Won {
		t.Fatalf("Claim: %+v, %v", cl, err)
	}
	if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM lock_t WHERE status IS NULL`).Scan(&inside); err != nil || inside != 1 {
		t.Fatalf("pending records after Store.Claim = %d (%v), want 1", inside, err)
	}
}

// alternativesWanted skips t unless IDEM_BENCH_ALTERNATIVES=1.
func alternativesWanted(t *testing.T) {
	t.Helper()
	if os.Getenv("IDEM_BENCH_ALTERNATIVES") != "1" {
		t.Skip("the alternatives' conformance on PostgreSQL and MariaDB runs with IDEM_BENCH_ALTERNATIVES=1 (it starts containers)")
	}
}

var pgServer struct {
	once sync.Once
	pool *pgxpool.Pool
	dsn  string
	err  error
}

func pgConnect(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	dsn := containers.Postgres(t)
	pgServer.once.Do(func() {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			pgServer.err = err
			return
		}
		cfg.MaxConns = 40
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		pgServer.pool, pgServer.err = pgxpool.NewWithConfig(ctx, cfg)
		pgServer.dsn = dsn
	})
	if pgServer.err != nil {
		t.Fatalf("connect to PostgreSQL: %v", pgServer.err)
	}
	return pgServer.pool, pgServer.dsn
}

var isolationLevels = []struct {
	name  string
	level sql.IsolationLevel
}{{"read-committed", sql.LevelReadCommitted}, {"repeatable-read", sql.LevelRepeatableRead}}

func TestPostgresAlternativesConformance(t *testing.T) {
	alternativesWanted(t)
	for _, l := range isolationLevels {
		for _, alt := range []struct {
			name    string
			d       func() dialect.Dialect
			missing shortfalls
		}{
			{"peek", func() dialect.Dialect { return newPgPeek() }, nil},
			{"claim-read", func() dialect.Dialect { return newPgClaimRead() }, nil},
			{"lock", func() dialect.Dialect { return newPgLock() }, lockShortfalls},
		} {
			t.Run("pgx/"+alt.name+"/"+l.name, func(t *testing.T) {
				conformance.RunExamples(t, conformance.Backend[pgx.Tx]{
					Name: "postgres/pgx/" + alt.name + "/" + l.name,
					Open: func(t *testing.T) dialect.Driver[pgx.Tx] {
						alt.missing.skip(t)
						pool, _ := pgConnect(t)
						d, err := postgres.New(t.Context(), pool, postgres.Options{Isolation: l.level})
						if err != nil {
							t.Fatal(err)
						}
						return withDialect[pgx.Tx]{d, alt.d()}
					},
					InsertLegacy: pgLegacy,
					BeginReadOnly: func(t *testing.T, _ dialect.Driver[pgx.Tx]) pgx.Tx {
						pool, _ := pgConnect(t)
						tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{AccessMode: pgx.ReadOnly})
						if err != nil {
							t.Fatal(err)
						}
						t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
						return tx
					},
				})
			})
			t.Run("sql/"+alt.name+"/"+l.name, func(t *testing.T) {
				conformance.RunExamples(t, conformance.Backend[*sql.Tx]{
					Name: "postgres/sql/" + alt.name + "/" + l.name,
					Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
						alt.missing.skip(t)
						pool, _ := pgConnect(t)
						d, err := postgres.NewSQL(t.Context(), stdlib.OpenDBFromPool(pool), postgres.Options{Isolation: l.level})
						if err != nil {
							t.Fatal(err)
						}
						return withDialect[*sql.Tx]{d, alt.d()}
					},
					InsertLegacy:  pgLegacy,
					BeginReadOnly: pgSQLReadOnly,
				})
			})
		}
		t.Run("sql-lazy/"+l.name, func(t *testing.T) {
			conformance.RunExamples(t, conformance.Backend[*sql.Tx]{
				Name: "postgres/sql-lazy/" + l.name,
				Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
					_, dsn := pgConnect(t)
					cc, err := pgx.ParseConfig(dsn)
					if err != nil {
						t.Fatal(err)
					}
					db := sql.OpenDB(newLazyConnector(*cc))
					db.SetMaxOpenConns(20)
					t.Cleanup(func() { db.Close() })
					d, err := newLazyDriver(db)
					if err != nil {
						t.Fatal(err)
					}
					return isolated[*sql.Tx]{d, l.level}
				},
				InsertLegacy:  pgLegacy,
				BeginReadOnly: pgSQLReadOnly,
			})
		})
	}
}

// pgSQLReadOnly begins a read-only transaction through database/sql on the
// test server.
func pgSQLReadOnly(t *testing.T, _ dialect.Driver[*sql.Tx]) *sql.Tx {
	pool, _ := pgConnect(t)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	return conformance.BeginReadOnlySQL(t, db, "")
}

// isolated begins at level when the call asks for no level.
type isolated[TTx any] struct {
	dialect.Driver[TTx]
	level sql.IsolationLevel
}

func (d isolated[TTx]) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[TTx], error) {
	opts.Isolation = opts.IsolationOr(d.level)
	return d.Driver.Begin(ctx, opts)
}

func TestMariaDBLockConformance(t *testing.T) {
	alternativesWanted(t)
	for _, l := range isolationLevels {
		t.Run(l.name, func(t *testing.T) {
			conformance.RunExamples(t, conformance.Backend[*sql.Tx]{
				Name: "mariadb/lock/" + l.name,
				Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
					lockShortfalls.skip(t)
					mariadbLockShortfalls.skip(t)
					db, err := sql.Open("mysql", containers.MySQL(t))
					if err != nil {
						t.Fatal(err)
					}
					db.SetMaxOpenConns(20)
					t.Cleanup(func() { db.Close() })
					d, err := mysql.New(t.Context(), db, mysql.Options{Isolation: l.level})
					if err != nil {
						t.Fatal(err)
					}
					base, _ := d.Dialect().(*mysql.Dialect)
					var v string
					if err := db.QueryRowContext(t.Context(), "SELECT VERSION()").Scan(&v); err != nil || !strings.Contains(strings.ToLower(v), "mariadb") {
						t.Skipf("the lock alternative needs MariaDB (server %q, %v)", v, err)
					}
					return withDialect[*sql.Tx]{d, newMariadbLock(base)}
				},
				InsertLegacy: mysqlLegacy,
				BeginReadOnly: func(t *testing.T, d dialect.Driver[*sql.Tx]) *sql.Tx {
					db, err := sql.Open("mysql", containers.MySQL(t))
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { db.Close() })
					return conformance.BeginReadOnlySQL(t, db, "")
				},
			})
		})
	}
}
