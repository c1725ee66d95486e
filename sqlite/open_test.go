package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // a database/sql driver that is not SQLite

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlite"
)

// Open(":memory:") gives one database to every pooled connection.
func TestOpenMemorySharedByPool(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	a, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := a.ExecContext(ctx, "CREATE TABLE t (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatalf("second connection does not see the first one's table: %v", err)
	}
	if _, err := sqlite.New(t.Context(), db, sqlite.Options{}); err != nil {
		t.Fatalf("New on Open(\":memory:\"): %v", err)
	}

	// Two Opens of ":memory:" are two databases.
	other, err := sqlite.Open(":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, "SELECT x FROM t"); err == nil {
		t.Fatal("a second Open(\":memory:\") sees the first one's table")
	}
}

// A plain ":memory:" pool gives each connection its own database: New
// refuses it, unless the pool has one connection.
func TestNewRefusesPrivateMemoryPool(t *testing.T) {
	db, err := sql.Open("sqlite", ":memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlite.New(t.Context(), db, sqlite.Options{}); !errors.Is(err, sqlite.ErrPrivateMemory) {
		t.Fatalf("New on a plain :memory: pool: %v, want ErrPrivateMemory", err)
	}
	db.SetMaxOpenConns(1)
	if _, err := sqlite.New(t.Context(), db, sqlite.Options{}); err != nil {
		t.Fatalf("New on a one-connection :memory: pool: %v", err)
	}
}

func TestNewRefusesOtherDriver(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://localhost:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := sqlite.New(t.Context(), db, sqlite.Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New on a pgx *sql.DB: %v, want ErrInvalidConfig", err)
	}
	if _, err := sqlite.New(t.Context(), nil, sqlite.Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New(nil): %v, want ErrInvalidConfig", err)
	}
}

func TestOpenRefusesDeferredTransactions(t *testing.T) {
	for _, dsn := range []string{"file:x.db?_txlock=deferred", "x.db?_txlock=exclusive"} {
		if _, err := sqlite.Open(filepath.Join(t.TempDir(), dsn)); err == nil || !strings.Contains(err.Error(), "_txlock") {
			t.Errorf("Open(%q): %v, want an error about _txlock", dsn, err)
		}
	}
	if _, err := sqlite.Open(""); err == nil {
		t.Error("Open(\"\") succeeded")
	}
}

// A claim on a read-only database is refused with ErrBadTx and ErrReadOnly.
func TestClaimOnReadOnlyDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ro.db")
	rw, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	d, err := sqlite.New(t.Context(), rw, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	ro, err := sqlite.Open("file:" + path + "?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	roDriver, err := sqlite.New(t.Context(), ro, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	roStore, err := idem.New(roDriver, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
	_, err = roStore.Do(ctx, req, func(context.Context, *sql.Tx) (idem.Response, error) {
		return idem.Response{Status: 200}, nil
	})
	if !errors.Is(err, idem.ErrReadOnly) || !errors.Is(err, idem.ErrBadTx) {
		t.Fatalf("Do on a read-only database: %v, want ErrReadOnly and ErrBadTx", err)
	}
}
