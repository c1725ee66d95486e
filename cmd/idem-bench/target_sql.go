package main

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// Helpers of the targets on database/sql.

func sqlExec(db *sql.DB) execFunc {
	return func(ctx context.Context, s string, args ...any) error {
		_, err := db.ExecContext(ctx, s, args...)
		return err
	}
}

// sqlSizes reads the size of each table and its indexes with sizeQuery (one
// argument, the table name; two columns, table and index bytes), after
// running refresh (formatted with the table name) when it is not empty.
func sqlSizes(db *sql.DB, refresh, sizeQuery string) func(ctx context.Context, tables ...string) ([]relSize, error) {
	return func(ctx context.Context, tables ...string) ([]relSize, error) {
		var out []relSize
		for _, tbl := range tables {
			if refresh != "" {
				if _, err := db.ExecContext(ctx, fmt.Sprintf(refresh, tbl)); err != nil {
					return nil, err
				}
			}
			r := relSize{table: tbl}
			err := db.QueryRowContext(ctx, sizeQuery, tbl).Scan(&r.tableBytes, &r.indexBytes)
			if err == nil {
				err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+tbl).Scan(&r.rows)
			}
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
}

func sqlInsert(orders, placeholders string) func(ctx context.Context, tx *sql.Tx) error {
	q := `INSERT INTO ` + orders + ` (customer, item_id) VALUES (` + placeholders + `)`
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, customer, itemID)
		return err
	}
}

// sqlBulkLoad loads n completed records into table with multi-row INSERTs
// of rowsPer rows (prepared once), perTx rows to a transaction, on one
// connection, calling progress after each transaction. values renders the
// placeholders of one row; args appends a row's arguments.
func sqlBulkLoad(ctx context.Context, db *sql.DB, table string, n int64, rowsPer, perTx int,
	values string, args func(dst []any, r *scaleRow) []any, progress func(int64)) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	stmtFor := map[int]*sql.Stmt{}
	defer func() {
		for _, s := range stmtFor {
			s.Close()
		}
	}()
	prepare := func(rows int) (*sql.Stmt, error) {
		if s := stmtFor[rows]; s != nil {
			return s, nil
		}
		q := `INSERT INTO ` + table + ` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES ` +
			strings.Repeat(values+", ", rows-1) + values
		s, err := conn.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		stmtFor[rows] = s
		return s, nil
	}
	var row scaleRow
	now := nowForLoad()
	buf := make([]any, 0, rowsPer*8)
	for from := int64(0); from < n; from += int64(perTx) {
		to := min(from+int64(perTx), n)
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		for i := from; i < to; {
			k := int(min(int64(rowsPer), to-i))
			s, err := prepare(k)
			if err != nil {
				tx.Rollback()
				return err
			}
			buf = buf[:0]
			for range k {
				row.fill(i, n, now)
				buf = args(buf, &row)
				i++
			}
			if _, err := tx.StmtContext(ctx, s).ExecContext(ctx, buf...); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		progress(to)
	}
	return nil
}
