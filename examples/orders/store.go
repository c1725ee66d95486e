package main

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/internal/exampledb"
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

// openStore opens the database dsn names (see exampledb.Open), creates the
// idem and order tables if needed and returns the backend.
func openStore(ctx context.Context, dsn string) (b *backend, err error) {
	db, err := exampledb.Open(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.SQL.Close()
		}
	}()
	q := map[exampledb.Flavor]orderSQL{
		exampledb.SQLite:     sqliteOrders,
		exampledb.PostgreSQL: postgresOrders,
		exampledb.MySQL:      mysqlOrders,
	}[db.Flavor]
	store, err := idem.New(db.Driver, idem.Config{})
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := db.SQL.ExecContext(ctx, q.schema); err != nil {
		return nil, fmt.Errorf("create the orders table: %w", err)
	}
	return &backend{name: db.Name, db: db.SQL, store: store, sql: q}, nil
}
