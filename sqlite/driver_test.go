package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// TestBeginTakesWriteLock: Begin starts an IMMEDIATE transaction, so a
// second writer waits at Begin (up to its wait bound) rather than at its
// first write.
func TestBeginTakesWriteLock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := sqlite.New(t.Context(), openFile(t), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := d.Begin(ctx, dialect.BeginOptions{WaitBound: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	const bound = 100 * time.Millisecond
	start := time.Now()
	second, err := d.Begin(ctx, dialect.BeginOptions{WaitBound: bound})
	elapsed := time.Since(start)
	if err == nil {
		second.Rollback(ctx)
		t.Fatalf("second Begin succeeded while another transaction was begun: not IMMEDIATE")
	}
	if !errors.Is(d.Dialect().Classify(err), idem.ErrLockTimeout) {
		t.Errorf("second Begin = %v, want ErrLockTimeout", err)
	}
	if elapsed < bound/2 || elapsed > bound+3*time.Second {
		t.Errorf("second Begin gave up after %v, want about %v", elapsed, bound)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	third, err := d.Begin(ctx, dialect.BeginOptions{WaitBound: bound})
	if err != nil {
		t.Fatalf("Begin after the holder ended: %v", err)
	}
	third.Rollback(ctx)
}

// TestClassifyErrors maps real SQLite errors by their result codes.
func TestClassifyErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := openFile(t)
	d := sqlite.NewDialect()
	if _, err := db.ExecContext(ctx, "CREATE TABLE t (k TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES ('a')"); err != nil {
		t.Fatal(err)
	}
	conn := func() *sql.Conn {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, tc := range []struct {
		name string
		make func() error
		want error
	}{
		{"duplicate primary key", func() error {
			_, err := db.ExecContext(ctx, "INSERT INTO t VALUES ('a')")
			return err
		}, idem.ErrUniqueViolation},
		{"database held by another writer", func() error {
			a, b := conn(), conn()
			if _, err := a.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
				return err
			}
			defer a.ExecContext(ctx, "ROLLBACK")
			if _, err := b.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
				return err
			}
			_, err := b.ExecContext(ctx, "BEGIN IMMEDIATE")
			return err
		}, idem.ErrLockTimeout},
		{"snapshot older than the last commit", func() error {
			a := conn()
			if _, err := a.ExecContext(ctx, "BEGIN DEFERRED"); err != nil {
				return err
			}
			defer a.ExecContext(ctx, "ROLLBACK")
			var n int
			if err := a.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&n); err != nil {
				return err
			}
			if _, err := db.ExecContext(ctx, "INSERT INTO t VALUES ('b')"); err != nil {
				return err
			}
			_, err := a.ExecContext(ctx, "INSERT INTO t VALUES ('c')")
			return err
		}, idem.ErrSerialization},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.make()
			if err == nil {
				t.Fatal("no error")
			}
			if got := d.Classify(err); !errors.Is(got, tc.want) || !errors.Is(got, err) {
				t.Errorf("Classify(%v) = %v, want %v wrapping the driver's error", err, got, tc.want)
			}
		})
	}
	plain := errors.New("plain")
	if got := d.Classify(plain); got != plain {
		t.Errorf("Classify(plain) = %v, want it unchanged", got)
	}
}

// Begin sets the wait bound as the connection's busy_timeout for the
// transaction only: afterwards the pool's connections have theirs back,
// the DSN's (Open's default, or one the DSN names).
func TestBeginRestoresBusyTimeout(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(path string) string
		want int64 // the pool's busy_timeout, ms
	}{
		{"default", func(path string) string { return path }, sqlite.DefaultBusyTimeout.Milliseconds()},
		{"from the DSN", func(path string) string { return "file:" + path + "?_pragma=busy_timeout(1234)" }, 1234},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db, err := sqlite.Open(tc.dsn(filepath.Join(t.TempDir(), "idem.db")))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			db.SetMaxOpenConns(1) // every statement below uses the connection Do used
			d, err := sqlite.New(t.Context(), db, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			store, err := idem.New(d, idem.Config{WaitBound: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
			var inside int64
			if _, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
				return idem.Response{Status: 200}, tx.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&inside)
			}); err != nil {
				t.Fatal(err)
			}
			if inside != 50 {
				t.Errorf("busy_timeout inside Do = %d ms, want the wait bound's 50", inside)
			}
			var ms int64
			if err := db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
				t.Fatal(err)
			}
			if ms != tc.want {
				t.Fatalf("busy_timeout after Do = %d ms, want the pool's %d ms back", ms, tc.want)
			}
		})
	}
}
