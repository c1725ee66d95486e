package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlite"
)

// TestSQLNilHandles: idem.SQL refuses nil handles, typed nil pointers
// included, with ErrBadTx.
func TestSQLNilHandles(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    idem.SQLQueryer
	}{
		{"nil interface", nil},
		{"nil *sql.Tx", (*sql.Tx)(nil)},
		{"nil *sql.DB", (*sql.DB)(nil)},
		{"nil *sql.Conn", (*sql.Conn)(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if q, err := idem.SQL(tc.q); !errors.Is(err, idem.ErrBadTx) || q != nil {
				t.Errorf("SQL(%#v) = %v, %v; want nil, ErrBadTx", tc.q, q, err)
			}
		})
	}
}

// TestSQLTxn: release runs exactly once however the transaction ends, a
// Rollback after the end does nothing, and statements on an ended
// transaction match ErrTxDone.
func TestSQLTxn(t *testing.T) {
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		end  func(*idem.SQLTxn) error
	}{
		{"commit", func(x *idem.SQLTxn) error { return x.Commit(ctx) }},
		{"rollback", func(x *idem.SQLTxn) error { return x.Rollback(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			released := 0
			x := idem.NewSQLTxn(tx, func() { released++ })
			if x.Native() != tx {
				t.Errorf("Native() is not the *sql.Tx")
			}
			if _, err := x.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if err := tc.end(x); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if err := x.Rollback(ctx); err != nil {
				t.Errorf("Rollback after %s = %v, want nil", tc.name, err)
			}
			_ = x.Commit(ctx)
			if released != 1 {
				t.Errorf("release ran %d times, want 1", released)
			}
			if _, err := x.Exec(ctx, "SELECT 1"); !errors.Is(err, idem.ErrTxDone) {
				t.Errorf("Exec after %s = %v, want ErrTxDone", tc.name, err)
			}
			if _, err := x.Query(ctx, "SELECT 1"); !errors.Is(err, idem.ErrTxDone) {
				t.Errorf("Query after %s = %v, want ErrTxDone", tc.name, err)
			}
		})
	}
}
