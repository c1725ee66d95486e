package conformance

import (
	"database/sql"
	"database/sql/driver"
	"testing"
)

// BeginReadOnlySQL is a Backend.BeginReadOnly for a database/sql backend:
// it begins a transaction on db that refuses writes, rolled back when t
// ends. With pragma empty it asks for a READ ONLY transaction
// (sql.TxOptions.ReadOnly), which PostgreSQL and MySQL honour. A database
// without read-only transactions gives the statement that makes a
// connection refuse writes ("PRAGMA query_only = ON" on SQLite): the
// transaction then runs on a connection of its own, which is discarded
// afterwards instead of going back to the pool.
func BeginReadOnlySQL(t *testing.T, db *sql.DB, pragma string) *sql.Tx {
	t.Helper()
	if pragma == "" {
		tx, err := db.BeginTx(t.Context(), &sql.TxOptions{ReadOnly: true})
		if err != nil {
			t.Fatalf("conformance: begin a read-only transaction: %v", err)
		}
		t.Cleanup(func() { _ = tx.Rollback() })
		return tx
	}
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatalf("conformance: a connection for a read-only transaction: %v", err)
	}
	// Begin first, then make the connection refuse writes: a database
	// that locks at BEGIN (SQLite's BEGIN IMMEDIATE) would refuse the
	// BEGIN on a connection that refuses writes already.
	tx, err := conn.BeginTx(t.Context(), nil)
	if err != nil {
		_ = conn.Close()
		t.Fatalf("conformance: begin a read-only transaction: %v", err)
	}
	t.Cleanup(func() {
		_ = tx.Rollback()
		// Not back to the pool with writes refused.
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		_ = conn.Close()
	})
	if _, err := tx.ExecContext(t.Context(), pragma); err != nil {
		t.Fatalf("conformance: %s: %v", pragma, err)
	}
	return tx
}
