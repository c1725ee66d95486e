package migrationtools_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database"
	migratemysql "github.com/golang-migrate/migrate/v4/database/mysql"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	migratesqlite "github.com/golang-migrate/migrate/v4/database/sqlite"
	"github.com/golang-migrate/migrate/v4/source/iofs"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
	"github.com/pressly/goose/v3"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/migrationfiles"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

func TestMain(m *testing.M) { containers.Main(m) }

// backend is one database: how to get a driver, and the handles each tool
// needs for a table of it.
type backend struct {
	name string
	// open returns a driver for one test.
	open func(t *testing.T) *sqlDriver
	// gooseDialect is goose's name for the database.
	gooseDialect goose.Dialect
	// migrateDriver returns golang-migrate's database driver on the
	// driver's database, keeping its own bookkeeping in migrationsTable,
	// and a function that releases it.
	migrateDriver func(t *testing.T, d *sqlDriver, migrationsTable string) (name string, drv database.Driver, release func())
	// insertLegacy writes rows as the first schema version did, for the
	// suite's upgrade case.
	insertLegacy func(ctx context.Context, q dialect.Queryer, table string, rows []conformance.LegacyRecord) error
}

// sqlDriver is an idem driver on database/sql with the *sql.DB it runs on.
type sqlDriver struct {
	dialect.Driver[*sql.Tx]
	db *sql.DB
	// path is the SQLite file.
	path string
}

// beginReadOnly begins a transaction on d's database that refuses writes:
// READ ONLY on a server, the query_only pragma on SQLite.
func beginReadOnly(t *testing.T, d *sqlDriver) *sql.Tx {
	pragma := ""
	if d.path != "" {
		pragma = "PRAGMA query_only = ON"
	}
	return conformance.BeginReadOnlySQL(t, d.db, pragma)
}

var shared sync.Map // DSN -> *sql.DB, one pool per server for the whole binary

func sharedDB(t *testing.T, driverName, dsn string) *sql.DB {
	t.Helper()
	if db, ok := shared.Load(dsn); ok {
		return db.(*sql.DB)
	}
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(30)
	actual, loaded := shared.LoadOrStore(dsn, db)
	if loaded {
		db.Close()
	}
	return actual.(*sql.DB)
}

var backends = []backend{
	{
		name: "sqlite",
		open: func(t *testing.T) *sqlDriver {
			path := filepath.Join(t.TempDir(), "idem.db")
			db, err := sqlite.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			d, err := sqlite.New(t.Context(), db, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return &sqlDriver{Driver: d, db: db, path: path}
		},
		gooseDialect: goose.DialectSQLite3,
		insertLegacy: conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, func(t time.Time) any { return t.UnixMicro() }),
		migrateDriver: func(t *testing.T, d *sqlDriver, table string) (string, database.Driver, func()) {
			// golang-migrate's SQLite driver closes the *sql.DB it is given:
			// give it one of its own on the same file.
			db, err := sqlite.Open(d.path)
			if err != nil {
				t.Fatal(err)
			}
			drv, err := migratesqlite.WithInstance(db, &migratesqlite.Config{MigrationsTable: table})
			if err != nil {
				db.Close()
				t.Fatalf("golang-migrate sqlite driver: %v", err)
			}
			return "sqlite", drv, func() { drv.Close() }
		},
	},
	{
		name: "postgres",
		open: func(t *testing.T) *sqlDriver {
			db := sharedDB(t, "pgx", containers.Postgres(t))
			d, err := postgres.NewSQL(t.Context(), db, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return &sqlDriver{Driver: d, db: db}
		},
		gooseDialect: goose.DialectPostgres,
		insertLegacy: conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, func(t time.Time) any { return t }),
		migrateDriver: func(t *testing.T, d *sqlDriver, table string) (string, database.Driver, func()) {
			// Its Close closes the *sql.DB too: give it one of its own.
			db, err := sql.Open("pgx", containers.Postgres(t))
			if err != nil {
				t.Fatal(err)
			}
			drv, err := migratepgx.WithInstance(db, &migratepgx.Config{MigrationsTable: table})
			if err != nil {
				db.Close()
				t.Fatalf("golang-migrate pgx driver: %v", err)
			}
			return "pgx", drv, func() { drv.Close() }
		},
	},
	{
		name: "mysql",
		open: func(t *testing.T) *sqlDriver {
			db := sharedDB(t, "mysql", containers.MySQL(t))
			d, err := mysql.New(t.Context(), db, mysql.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return &sqlDriver{Driver: d, db: db}
		},
		gooseDialect: goose.DialectMySQL,
		insertLegacy: conformance.LegacyInserter("INSERT INTO `%s` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
			func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") }),
		migrateDriver: func(t *testing.T, d *sqlDriver, table string) (string, database.Driver, func()) {
			// golang-migrate runs each file as one multi-statement query.
			cfg, err := mysqldriver.ParseDSN(containers.MySQL(t))
			if err != nil {
				t.Fatal(err)
			}
			cfg.MultiStatements = true
			connector, err := mysqldriver.NewConnector(cfg)
			if err != nil {
				t.Fatal(err)
			}
			db := sql.OpenDB(connector)
			drv, err := migratemysql.WithInstance(db, &migratemysql.Config{MigrationsTable: table})
			if err != nil {
				db.Close()
				t.Fatalf("golang-migrate mysql driver: %v", err)
			}
			return "mysql", drv, func() { drv.Close(); db.Close() }
		},
	},
}

// files renders the files of format f for table on d as a file system.
func files(t *testing.T, d dialect.Dialect, table string, f migrationfiles.Format) fs.FS {
	t.Helper()
	rendered, err := migrationfiles.Render(d, table, f)
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{}
	for _, file := range rendered {
		fsys[file.Name] = &fstest.MapFile{Data: file.Data}
	}
	return fsys
}

// tool applies and reverts idem's files for one table with one migration
// tool.
type tool struct {
	format migrationfiles.Format
	// up migrates table to the latest version, down to none.
	up, down func(t *testing.T, b backend, d *sqlDriver, table string)
	// adopt records in the tool's own bookkeeping that versions 1 to
	// latest are applied, for a table Store.Migrate made: the handover the
	// README describes. (Up could not take such a table as it is: an ADD
	// COLUMN has no IF NOT EXISTS on SQLite and MySQL.)
	adopt func(t *testing.T, b backend, d *sqlDriver, table string, latest int)
}

var tools = []tool{
	{
		format: migrationfiles.Goose,
		up: func(t *testing.T, b backend, d *sqlDriver, table string) {
			p := gooseProvider(t, b, d, table)
			if _, err := p.Up(t.Context()); err != nil {
				t.Fatalf("goose up %s on %s: %v", table, b.name, err)
			}
		},
		down: func(t *testing.T, b backend, d *sqlDriver, table string) {
			p := gooseProvider(t, b, d, table)
			if _, err := p.DownTo(t.Context(), 0); err != nil {
				t.Fatalf("goose down %s on %s: %v", table, b.name, err)
			}
		},
		adopt: func(t *testing.T, b backend, d *sqlDriver, table string, latest int) {
			p := gooseProvider(t, b, d, table)
			if _, err := p.GetDBVersion(t.Context()); err != nil { // creates goose's table
				t.Fatalf("goose version %s on %s: %v", table, b.name, err)
			}
			for v := 1; v <= latest; v++ {
				if _, err := d.db.ExecContext(t.Context(), fmt.Sprintf("INSERT INTO %s_goose (version_id, is_applied) VALUES (%d, TRUE)", table, v)); err != nil {
					t.Fatalf("record version %d in goose's table: %v", v, err)
				}
			}
		},
	},
	{
		format: migrationfiles.GolangMigrate,
		up: func(t *testing.T, b backend, d *sqlDriver, table string) {
			m, release := golangMigrate(t, b, d, table)
			defer release()
			if err := m.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
				t.Fatalf("golang-migrate up %s on %s: %v", table, b.name, err)
			}
		},
		down: func(t *testing.T, b backend, d *sqlDriver, table string) {
			m, release := golangMigrate(t, b, d, table)
			defer release()
			if err := m.Down(); err != nil {
				t.Fatalf("golang-migrate down %s on %s: %v", table, b.name, err)
			}
		},
		adopt: func(t *testing.T, b backend, d *sqlDriver, table string, latest int) {
			m, release := golangMigrate(t, b, d, table)
			defer release()
			if err := m.Force(latest); err != nil {
				t.Fatalf("golang-migrate force %d %s on %s: %v", latest, table, b.name, err)
			}
		},
	},
}

func gooseProvider(t *testing.T, b backend, d *sqlDriver, table string) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(b.gooseDialect, d.db, files(t, d.Dialect(), table, migrationfiles.Goose),
		goose.WithTableName(table+"_goose"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatalf("goose provider: %v", err)
	}
	dropAtCleanup(t, d, table+"_goose")
	return p
}

func golangMigrate(t *testing.T, b backend, d *sqlDriver, table string) (*migrate.Migrate, func()) {
	t.Helper()
	src, err := iofs.New(files(t, d.Dialect(), table, migrationfiles.GolangMigrate), ".")
	if err != nil {
		t.Fatal(err)
	}
	name, drv, release := b.migrateDriver(t, d, table+"_migrate")
	dropAtCleanup(t, d, table+"_migrate")
	m, err := migrate.NewWithInstance("iofs", src, name, drv)
	if err != nil {
		release()
		t.Fatalf("golang-migrate: %v", err)
	}
	return m, func() { src.Close(); release() }
}

func dropAtCleanup(t *testing.T, d *sqlDriver, table string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := d.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
}

// TestConformanceOnToolMigratedTables: every case of the suite runs on a
// table that goose, or golang-migrate, made from idem's files; the fixture
// checks that Store.Version finds it at the latest version and that
// Store.Migrate then changes nothing.
func TestConformanceOnToolMigratedTables(t *testing.T) {
	for _, b := range backends {
		for _, tl := range tools {
			t.Run(b.name+"/"+string(tl.format), func(t *testing.T) {
				t.Parallel()
				conformance.RunExamples(t, conformance.Backend[*sql.Tx]{
					Name:         b.name + "/" + string(tl.format),
					Open:         func(t *testing.T) dialect.Driver[*sql.Tx] { return b.open(t) },
					InsertLegacy: b.insertLegacy,
					BeginReadOnly: func(t *testing.T, d dialect.Driver[*sql.Tx]) *sql.Tx {
						return beginReadOnly(t, d.(*sqlDriver))
					},
					Migrate: func(t *testing.T, d dialect.Driver[*sql.Tx], table string) {
						tl.up(t, b, d.(*sqlDriver), table)
					},
				})
			})
		}
	}
}

// TestUpDownUp: the tool's up records idem's version, its down removes the
// table and idem's version table, and up again starts afresh; a table
// Store.Migrate made first is adopted by the tool once its bookkeeping is
// told which versions are applied.
func TestUpDownUp(t *testing.T) {
	for _, b := range backends {
		for _, tl := range tools {
			t.Run(b.name+"/"+string(tl.format), func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				d := b.open(t)
				table := fmt.Sprintf("idem_tools_%s_%d", b.name, time.Now().UnixNano()%1_000_000)
				if tl.format == migrationfiles.GolangMigrate {
					table += "_gm"
				}
				dropAtCleanup(t, d, table)
				dropAtCleanup(t, d, table+"_schema")
				dropAtCleanup(t, d, table+"_fence")
				store, err := idem.New[*sql.Tx](d, idem.Config{Table: table})
				if err != nil {
					t.Fatal(err)
				}
				latest := len(store.Migrations())

				tl.up(t, b, d, table)
				if v, err := store.Version(ctx); err != nil || v.Current != latest {
					t.Fatalf("Version after the tool's up: %+v, %v, want %d", v, err, latest)
				}
				req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
				if res, err := store.Do(ctx, req, ok201); err != nil || res.Outcome != idem.Won {
					t.Fatalf("Do on the tool's table: %v, %v", res.Outcome, err)
				}

				tl.down(t, b, d, table)
				for _, gone := range []string{table, table + "_schema", table + "_fence"} {
					if _, err := d.db.ExecContext(ctx, "SELECT 1 FROM "+gone); err == nil {
						t.Errorf("%s still exists after the tool's down", gone)
					}
				}

				// Store.Migrate first, then the tool adopts the table (its
				// bookkeeping told what is applied) and its up does nothing.
				if err := store.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				tl.adopt(t, b, d, table, latest)
				tl.up(t, b, d, table)
				var versions int
				if err := d.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+table+"_schema").Scan(&versions); err != nil || versions != latest {
					t.Fatalf("versions recorded after Store.Migrate and the tool: %d, %v, want %d", versions, err, latest)
				}
				if v, err := store.Version(ctx); err != nil || v.Current != latest {
					t.Fatalf("Version: %+v, %v", v, err)
				}
				if res, err := store.Do(ctx, req, ok201); err != nil || res.Outcome != idem.Won {
					t.Fatalf("Do after down and up again: %v, %v, want won (the table started afresh)", res.Outcome, err)
				}
			})
		}
	}
}

func ok201(context.Context, *sql.Tx) (idem.Response, error) {
	return idem.Response{Status: 201}, nil
}
