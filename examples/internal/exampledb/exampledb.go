// Package exampledb opens the example services' databases from one -dsn
// flag: a SQLite path, a postgres:// URL or a mysql:// URL, each with the
// idem backend for it.
package exampledb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// Flavor says which SQL the example's own tables need.
type Flavor int

const (
	// SQLite: ? placeholders, INTEGER PRIMARY KEY, RETURNING.
	SQLite Flavor = iota + 1
	// PostgreSQL: $n placeholders, RETURNING.
	PostgreSQL
	// MySQL (and MariaDB): ? placeholders, no RETURNING.
	MySQL
)

// DB is an opened database and the idem driver on it.
type DB struct {
	// Name describes it for logs, with no password.
	Name string
	// SQL is the pool the example's own statements use.
	SQL *sql.DB
	// Driver is the idem backend on SQL.
	Driver dialect.Driver[*sql.Tx]
	// Flavor is the database family.
	Flavor Flavor
}

// Open opens the database dsn names: a SQLite file path (or sqlite:PATH,
// or ":memory:"), a postgres:// URL (pgx's database/sql driver) or a
// mysql://user:password@host:port/database?params URL (go-sql-driver; the
// query parameters are the driver's DSN parameters). It closes what it
// opened when it fails.
func Open(ctx context.Context, dsn string) (*DB, error) {
	scheme, _, hasScheme := strings.Cut(dsn, "://")
	switch {
	case scheme == "postgres" || scheme == "postgresql":
		return openPostgres(ctx, dsn)
	case scheme == "mysql":
		return openMySQL(ctx, dsn)
	case hasScheme:
		return nil, fmt.Errorf("-dsn %s://...: unknown database; use a SQLite path, postgres:// or mysql://", scheme)
	}
	path := strings.TrimPrefix(dsn, "sqlite:")
	db, err := sqlite.Open(path)
	if err != nil {
		return nil, err
	}
	name := "SQLite in memory"
	if path != ":memory:" {
		abs, err := filepath.Abs(path)
		if err != nil {
			abs = path
		}
		name = "SQLite file " + abs
	}
	d, err := sqlite.New(ctx, db, sqlite.Options{})
	return done(&DB{Name: name, SQL: db, Flavor: SQLite}, d, err)
}

func openPostgres(ctx context.Context, dsn string) (*DB, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	d, err := postgres.NewSQL(ctx, db, postgres.Options{})
	return done(&DB{Name: "PostgreSQL at " + Redact(dsn), SQL: db, Flavor: PostgreSQL}, d, err)
}

func openMySQL(ctx context.Context, dsn string) (*DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("-dsn: %w", err)
	}
	cfg := mysqldriver.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	if len(u.Query()) > 0 {
		if cfg, err = mysqldriver.ParseDSN(cfg.FormatDSN() + "?" + u.RawQuery); err != nil {
			return nil, fmt.Errorf("-dsn parameters: %w", err)
		}
	}
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(connector)
	d, err := mysql.New(ctx, db, mysql.Options{})
	return done(&DB{Name: "MySQL at " + Redact(dsn), SQL: db, Flavor: MySQL}, d, err)
}

// done finishes Open: the driver, or the database closed and the error.
func done(db *DB, d dialect.Driver[*sql.Tx], err error) (*DB, error) {
	if err != nil {
		db.SQL.Close()
		return nil, err
	}
	db.Driver = d
	return db, nil
}

// Redact hides the password of a database URL for logs.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
