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

// backend is the database: the pool, the idem store on it, and the order
// insert in its dialect.
type backend struct {
	name   string // for the log
	db     *sql.DB
	store  *idem.Store[*sql.Tx]
	insert string // takes ref, customer, item; returns the new id
	// lastInsertID: insert has no RETURNING; the id comes from the result.
	lastInsertID bool
}

// The orders table has no unique constraint on ref on purpose: the
// consumer's exactly-once comes from idem, and the test counts the rows.
var schemas = map[string]string{
	"sqlite": `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	ref      TEXT    NOT NULL,
	customer INTEGER NOT NULL,
	item     INTEGER NOT NULL
)`,
	"postgres": `CREATE TABLE IF NOT EXISTS orders (
	id       bigserial PRIMARY KEY,
	ref      text      NOT NULL,
	customer bigint    NOT NULL,
	item     bigint    NOT NULL
)`,
	"mysql": `CREATE TABLE IF NOT EXISTS orders (
	id       BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	ref      VARCHAR(255) NOT NULL,
	customer BIGINT       NOT NULL,
	item     BIGINT       NOT NULL
) ENGINE=InnoDB`,
}

// openStore opens the database dsn names (a SQLite path, postgres:// or
// mysql://), creates the tables if needed and returns the backend.
func openStore(ctx context.Context, dsn string) (b *backend, err error) {
	scheme, _, hasScheme := strings.Cut(dsn, "://")
	var (
		db        *sql.DB
		newDriver func(*sql.DB) (dialect.Driver[*sql.Tx], error)
	)
	b = &backend{insert: `INSERT INTO orders (ref, customer, item) VALUES (?, ?, ?) RETURNING id`}
	switch {
	case scheme == "postgres" || scheme == "postgresql":
		if db, err = sql.Open("pgx", dsn); err != nil {
			return nil, err
		}
		b.name, scheme = "PostgreSQL", "postgres"
		b.insert = `INSERT INTO orders (ref, customer, item) VALUES ($1, $2, $3) RETURNING id`
		newDriver = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return postgres.NewSQL(ctx, db, postgres.Options{}) }
	case scheme == "mysql":
		cfg, err := mysqlConfig(dsn)
		if err != nil {
			return nil, err
		}
		connector, err := mysqldriver.NewConnector(cfg)
		if err != nil {
			return nil, err
		}
		db = sql.OpenDB(connector)
		b.name = "MySQL"
		b.insert, b.lastInsertID = `INSERT INTO orders (ref, customer, item) VALUES (?, ?, ?)`, true
		newDriver = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return mysql.New(ctx, db, mysql.Options{}) }
	case hasScheme:
		return nil, fmt.Errorf("-dsn %s://...: unknown database; use a SQLite path, postgres:// or mysql://", scheme)
	default:
		if db, err = sqlite.Open(strings.TrimPrefix(dsn, "sqlite:")); err != nil {
			return nil, err
		}
		b.name, scheme = "SQLite "+dsn, "sqlite"
		newDriver = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return sqlite.New(ctx, db, sqlite.Options{}) }
	}
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	if err := db.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", b.name, err)
	}
	drv, err := newDriver(db)
	if err != nil {
		return nil, err
	}
	if b.store, err = idem.New(drv, idem.Config{}); err != nil {
		return nil, err
	}
	if err := b.store.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, schemas[scheme]); err != nil {
		return nil, fmt.Errorf("create the orders table: %w", err)
	}
	b.db = db
	return b, nil
}

// insertOrder inserts one order in tx and returns its id.
func (b *backend) insertOrder(ctx context.Context, tx *sql.Tx, ref string, customer, item int64) (int64, error) {
	if b.lastInsertID {
		res, err := tx.ExecContext(ctx, b.insert, ref, customer, item)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	var id int64
	err := tx.QueryRowContext(ctx, b.insert, ref, customer, item).Scan(&id)
	return id, err
}

// mysqlConfig turns mysql://user:password@host:port/database?params into
// the driver's configuration (the query parameters are its DSN parameters).
func mysqlConfig(dsn string) (*mysqldriver.Config, error) {
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
	return cfg, nil
}
