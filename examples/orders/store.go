package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// backend is everything that differs between databases: the pool, the idem
// store on it, and the order statements in the database's dialect.
type backend struct {
	name  string // for the startup log
	db    *sql.DB
	store *idem.Store[*sql.Tx]
	sql   orderSQL
}

// orderSQL is the order table's SQL for one database.
type orderSQL struct {
	schema string
	// insert takes tenant, customer, item, created and returns the new id.
	insert string
	// get takes id, tenant and returns customer, item, created.
	get string
	// lastInsertID: insert has no RETURNING; the id comes from the result.
	lastInsertID bool
}

// insertOrder runs insert in tx and returns the new order's id.
func (q orderSQL) insertOrder(ctx context.Context, tx *sql.Tx, args ...any) (int64, error) {
	if q.lastInsertID {
		res, err := tx.ExecContext(ctx, q.insert, args...)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	var id int64
	err := tx.QueryRowContext(ctx, q.insert, args...).Scan(&id)
	return id, err
}

var sqliteOrders = orderSQL{
	schema: `CREATE TABLE IF NOT EXISTS orders (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	tenant   TEXT    NOT NULL,
	customer INTEGER NOT NULL,
	item     INTEGER NOT NULL,
	created  TEXT    NOT NULL
)`,
	insert: `INSERT INTO orders (tenant, customer, item, created) VALUES (?, ?, ?, ?) RETURNING id`,
	get:    `SELECT customer, item, created FROM orders WHERE id = ? AND tenant = ?`,
}

var postgresOrders = orderSQL{
	schema: `CREATE TABLE IF NOT EXISTS orders (
	id       bigserial PRIMARY KEY,
	tenant   text      NOT NULL,
	customer bigint    NOT NULL,
	item     bigint    NOT NULL,
	created  text      NOT NULL
)`,
	insert: `INSERT INTO orders (tenant, customer, item, created) VALUES ($1, $2, $3, $4) RETURNING id`,
	get:    `SELECT customer, item, created FROM orders WHERE id = $1 AND tenant = $2`,
}

var mysqlOrders = orderSQL{
	schema: `CREATE TABLE IF NOT EXISTS orders (
	id       BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
	tenant   VARCHAR(255) NOT NULL,
	customer BIGINT       NOT NULL,
	item     BIGINT       NOT NULL,
	created  VARCHAR(64)  NOT NULL
) ENGINE=InnoDB`,
	insert:       `INSERT INTO orders (tenant, customer, item, created) VALUES (?, ?, ?, ?)`,
	get:          `SELECT customer, item, created FROM orders WHERE id = ? AND tenant = ?`,
	lastInsertID: true,
}

// openStore opens the database dsn names, creates the tables if needed and
// returns the backend. dsn is a SQLite file path (or sqlite:PATH, or
// ":memory:"); postgres:// and mysql:// URLs are where the other backends
// get added.
func openStore(ctx context.Context, dsn string) (*backend, error) {
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
	return newBackend(ctx, name, db, sqliteOrders, func(db *sql.DB) (dialect.Driver[*sql.Tx], error) {
		return sqlite.New(ctx, db, sqlite.Options{})
	})
}

// newBackend makes the store on db with the driver newDriver returns and
// creates the idem and order tables. It closes db when it fails.
func newBackend(ctx context.Context, name string, db *sql.DB, q orderSQL, newDriver func(*sql.DB) (dialect.Driver[*sql.Tx], error)) (b *backend, err error) {
	defer func() {
		if err != nil {
			db.Close()
		}
	}()
	drv, err := newDriver(db)
	if err != nil {
		return nil, err
	}
	store, err := idem.New(drv, idem.Config{})
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, q.schema); err != nil {
		return nil, fmt.Errorf("create the orders table: %w", err)
	}
	return &backend{name: name, db: db, store: store, sql: q}, nil
}

// openPostgres opens a postgres:// URL with pgx's database/sql driver.
func openPostgres(ctx context.Context, dsn string) (*backend, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	return newBackend(ctx, "PostgreSQL at "+redact(dsn), db, postgresOrders, func(db *sql.DB) (dialect.Driver[*sql.Tx], error) {
		return postgres.NewSQL(ctx, db, postgres.Options{})
	})
}

// openMySQL opens a mysql://user:password@host:port/database?params URL with
// go-sql-driver/mysql (the query parameters are the driver's DSN parameters).
func openMySQL(ctx context.Context, dsn string) (*backend, error) {
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
	return newBackend(ctx, "MySQL at "+redact(dsn), db, mysqlOrders, func(db *sql.DB) (dialect.Driver[*sql.Tx], error) {
		return mysql.New(ctx, db, mysql.Options{})
	})
}

// redact hides the password of a database URL for the log.
func redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
