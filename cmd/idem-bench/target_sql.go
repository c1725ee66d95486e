package main

import (
	"context"
	"database/sql"
)

// Helpers of the targets on database/sql.

func sqlExec(db *sql.DB) execFunc {
	return func(ctx context.Context, s string, args ...any) error {
		_, err := db.ExecContext(ctx, s, args...)
		return err
	}
}

// sqlSize weighs table with sizeQuery (one argument, the table name; two
// columns, table and index bytes) and counts its rows.
func sqlSize(ctx context.Context, db *sql.DB, table, sizeQuery string) (r relSize, err error) {
	err = db.QueryRowContext(ctx, sizeQuery, table).Scan(&r.tableBytes, &r.indexBytes)
	if err == nil {
		err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table).Scan(&r.rows)
	}
	return r, err
}

func sqlInsert(orders, placeholders string) func(ctx context.Context, tx *sql.Tx) error {
	q := `INSERT INTO ` + orders + ` (customer, item_id) VALUES (` + placeholders + `)`
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, customer, itemID)
		return err
	}
}
