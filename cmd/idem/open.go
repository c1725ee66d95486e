package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// target is the store a command works on and the database behind it.
type target struct {
	store *idem.Store[*sql.Tx]
	db    *sql.DB
	// where names the database for messages, without a password.
	where string
}

func (t *target) Close() error { return t.db.Close() }

// openTarget opens the database dsn names and makes a store on table with
// cfg. dsn is a SQLite file path (or sqlite:PATH), a postgres:// or
// postgresql:// URL, or a mysql://user:password@host:port/database URL
// whose query holds go-sql-driver/mysql parameters.
func openTarget(ctx context.Context, dsn string, cfg idem.Config) (*target, error) {
	if dsn == "" {
		return nil, usageError("-dsn is required (or set IDEM_DSN): a SQLite path, postgres://... or mysql://...")
	}
	var (
		db    *sql.DB
		where string
		err   error
		newD  func(*sql.DB) (dialect.Driver[*sql.Tx], error)
	)
	scheme, _, hasScheme := strings.Cut(dsn, "://")
	switch {
	case scheme == "postgres" || scheme == "postgresql":
		where = "PostgreSQL at " + redact(dsn)
		db, err = sql.Open("pgx", dsn)
		newD = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return postgres.NewSQL(ctx, db, postgres.Options{}) }
	case scheme == "mysql":
		where = "MySQL at " + redact(dsn)
		db, err = openMySQL(dsn)
		newD = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return mysql.New(ctx, db, mysql.Options{}) }
	case hasScheme:
		return nil, usageError(fmt.Sprintf("-dsn %s://...: unknown database; use a SQLite path, postgres:// or mysql://", scheme))
	default:
		path := strings.TrimPrefix(dsn, "sqlite:")
		where = "SQLite file " + path
		db, err = sqlite.Open(path)
		newD = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return sqlite.New(ctx, db, sqlite.Options{}) }
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", where, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to %s: %w", where, err)
	}
	d, err := newD(db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	store, err := idem.New(d, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &target{store: store, db: db, where: where}, nil
}

// openMySQL opens a mysql://user:password@host:port/database?params URL.
func openMySQL(dsn string) (*sql.DB, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, usageError("-dsn: " + err.Error())
	}
	cfg := mysqldriver.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	if len(u.Query()) > 0 {
		if cfg, err = mysqldriver.ParseDSN(cfg.FormatDSN() + "?" + u.RawQuery); err != nil {
			return nil, usageError("-dsn parameters: " + err.Error())
		}
	}
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

// redact hides the password of a database URL.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
