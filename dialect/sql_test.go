package dialect_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"

	moderncsqlite "modernc.org/sqlite"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// TestSQLNilHandles: NewSQLQueryer refuses nil handles, typed nil pointers
// included, with ErrBadTx, naming the handle's type.
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
			q, err := dialect.NewSQLQueryer(tc.q)
			if !errors.Is(err, dialect.ErrBadTx) || q != nil {
				t.Errorf("NewSQLQueryer(%#v) = %v, %v; want nil, ErrBadTx", tc.q, q, err)
			}
			if tc.q != nil && !strings.Contains(err.Error(), tc.name) {
				t.Errorf("NewSQLQueryer(%#v): %v, want it to say %s", tc.q, err, tc.name)
			}
		})
	}
}

// openMemory opens an in-memory SQLite database for one test.
func openMemory(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// TestSQLTx: release runs exactly once however the transaction ends, a
// Rollback after the end does nothing, and statements on an ended
// transaction match ErrTxDone.
func TestSQLTx(t *testing.T) {
	db := openMemory(t)
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
	db := openMemory(t)
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

// otherDriver is a database/sql driver no backend accepts.
type otherDriver struct{ driver.Driver }

// TestCheckSQLDB: a constructor's *sql.DB must not be nil and must come
// from the backend's driver; either refusal wraps ErrInvalidConfig and says
// which.
func TestCheckSQLDB(t *testing.T) {
	db := openMemory(t)
	if err := dialect.CheckSQLDB[*moderncsqlite.Driver]("mydb", db, "modernc.org/sqlite"); err != nil {
		t.Errorf("the backend's own driver: %v", err)
	}
	err := dialect.CheckSQLDB[*otherDriver]("mydb", db, "example.com/other")
	if !errors.Is(err, dialect.ErrInvalidConfig) || !strings.Contains(err.Error(), "mydb: ") || !strings.Contains(err.Error(), "not example.com/other") {
		t.Errorf("another driver: %v, want ErrInvalidConfig naming the backend and the driver it needs", err)
	}
	if err := dialect.CheckSQLDB[*moderncsqlite.Driver]("mydb", nil, "modernc.org/sqlite"); !errors.Is(err, dialect.ErrInvalidConfig) {
		t.Errorf("nil *sql.DB: %v, want ErrInvalidConfig", err)
	}
}

// TestCheckIsolation: the server's default and the levels given pass;
// any other is ErrInvalidConfig.
func TestCheckIsolation(t *testing.T) {
	levels := []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelSerializable}
	for l, ok := range map[sql.IsolationLevel]bool{
		sql.LevelDefault: true, sql.LevelReadCommitted: true, sql.LevelSerializable: true,
		sql.LevelRepeatableRead: false, sql.LevelSnapshot: false,
	} {
		err := dialect.CheckIsolation("mydb", l, levels...)
		if ok != (err == nil) || (err != nil && !errors.Is(err, dialect.ErrInvalidConfig)) {
			t.Errorf("CheckIsolation(%v) = %v, want accepted: %v (else ErrInvalidConfig)", l, err, ok)
		}
	}
}

// TestBeginSQL: with OwnConn the transaction runs on a connection of its
// own, after Setup ran on it; Setup's reset runs once when it ends (also
// when BEGIN fails), and the connection goes back to the pool. Without it
// the transaction has no connection of its own.
func TestBeginSQL(t *testing.T) {
	db := openMemory(t)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (v INTEGER)"); err != nil {
		t.Fatal(err)
	}

	plain, err := dialect.BeginSQL(ctx, db, dialect.SQLBegin{})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Conn() != nil {
		t.Errorf("a transaction without OwnConn has a connection of its own")
	}
	if err := plain.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	var setups, resets int
	setup := func(stmt, undo string) func(context.Context, *sql.Conn) (func(), error) {
		return func(ctx context.Context, conn *sql.Conn) (func(), error) {
			setups++
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return nil, err
			}
			return func() {
				resets++
				if _, err := conn.ExecContext(context.Background(), undo); err != nil {
					t.Errorf("reset: %v", err)
				}
			}, nil
		}
	}
	x, err := dialect.BeginSQL(ctx, db, dialect.SQLBegin{OwnConn: true, Setup: setup("PRAGMA busy_timeout = 1234", "PRAGMA busy_timeout = 5000")})
	if err != nil {
		t.Fatal(err)
	}
	var busy int
	if err := x.Native().QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy); err != nil || busy != 1234 {
		t.Errorf("busy_timeout in the transaction: %d, %v; want Setup's 1234", busy, err)
	}
	if x.Conn() == nil {
		t.Errorf("no connection of its own")
	}
	if err := x.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_ = x.Rollback(ctx)
	if setups != 1 || resets != 1 {
		t.Errorf("Setup ran %d times, reset %d; want once each", setups, resets)
	}

	// Setup leaves a transaction open on the connection, so BEGIN fails;
	// reset still runs, and the connection goes back.
	setups, resets = 0, 0
	if _, err := dialect.BeginSQL(ctx, db, dialect.SQLBegin{OwnConn: true, Setup: setup("BEGIN", "ROLLBACK")}); err == nil {
		t.Fatal("BEGIN inside a transaction succeeded")
	}
	if setups != 1 || resets != 1 {
		t.Errorf("after a failed BEGIN: Setup ran %d times, reset %d; want once each", setups, resets)
	}
	if n := db.Stats().InUse; n != 0 {
		t.Errorf("%d connections still in use, want every one given back", n)
	}
}
