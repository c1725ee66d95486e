package dialect_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// TestSQLNilHandles: NewSQLQueryer refuses nil handles, typed nil pointers
// included, with ErrBadTx.
func TestSQLNilHandles(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    dialect.SQLHandle
	}{
		{"nil interface", nil},
		{"nil *sql.Tx", (*sql.Tx)(nil)},
		{"nil *sql.DB", (*sql.DB)(nil)},
		{"nil *sql.Conn", (*sql.Conn)(nil)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if q, err := dialect.NewSQLQueryer(tc.q); !errors.Is(err, dialect.ErrBadTx) || q != nil {
				t.Errorf("NewSQLQueryer(%#v) = %v, %v; want nil, ErrBadTx", tc.q, q, err)
			}
		})
	}
}

// TestSQLTx: release runs exactly once however the transaction ends, a
// Rollback after the end does nothing, and statements on an ended
// transaction match ErrTxDone.
func TestSQLTx(t *testing.T) {
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		end  func(*dialect.SQLTx) error
	}{
		{"commit", func(x *dialect.SQLTx) error { return x.Commit(ctx) }},
		{"rollback", func(x *dialect.SQLTx) error { return x.Rollback(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			released := 0
			x := dialect.NewSQLTx(ctx, tx, nil, func() { released++ })
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
			if _, err := x.Exec(ctx, "SELECT 1"); !errors.Is(err, dialect.ErrTxDone) {
				t.Errorf("Exec after %s = %v, want ErrTxDone", tc.name, err)
			}
			if _, err := x.Query(ctx, "SELECT 1"); !errors.Is(err, dialect.ErrTxDone) {
				t.Errorf("Query after %s = %v, want ErrTxDone", tc.name, err)
			}
		})
	}
}

// TestSQLTxCommitAfterContextEnded: when the context the transaction was
// begun with has ended, Commit sends no COMMIT (database/sql would not) and
// reports a known failure, never one commitError would call unknown.
func TestSQLTxCommitAfterContextEnded(t *testing.T) {
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithCancel(t.Context())
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	unknown := func(err error) error { return dialect.Classified(dialect.ErrCommitUnknown, err) }
	x := dialect.NewSQLTx(ctx, tx, unknown, nil)
	cancel()
	err = x.Commit(t.Context())
	if !errors.Is(err, context.Canceled) || errors.Is(err, dialect.ErrCommitUnknown) {
		t.Fatalf("Commit after the context ended = %v, want a known failure wrapping context.Canceled", err)
	}
}
