package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/postgres"
)

// A claim in a read-only transaction is a transaction of the wrong kind:
// ErrBadTx (and ErrReadOnly), and nothing is written.
func TestClaimInReadOnlyTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, db := connect(t)
	req := idem.Request{Scope: "s", Key: "ro", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}

	native, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(native, idem.Config{Table: "idem_readonly_test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP TABLE idem_readonly_test, idem_readonly_test_schema, idem_readonly_test_fence")
	})

	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.Claim(ctx, tx, req)
	tx.Rollback(ctx)
	if !errors.Is(err, idem.ErrBadTx) || !errors.Is(err, idem.ErrReadOnly) {
		t.Fatalf("pgx: Claim in a read-only transaction: %v, want ErrBadTx and ErrReadOnly", err)
	}

	viaSQL, err := postgres.NewSQL(ctx, db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sqlStore, err := idem.New(viaSQL, idem.Config{Table: "idem_readonly_test"})
	if err != nil {
		t.Fatal(err)
	}
	sqlTx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = sqlStore.Claim(ctx, sqlTx, req)
	sqlTx.Rollback()
	if !errors.Is(err, idem.ErrBadTx) || !errors.Is(err, idem.ErrReadOnly) {
		t.Fatalf("database/sql: Claim in a read-only transaction: %v, want ErrBadTx and ErrReadOnly", err)
	}
	if _, err := store.Lookup(ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("after refused claims, Lookup: %v, want ErrNotFound", err)
	}
}

// The driver constructors refuse what they cannot work with.
func TestNewRefusesBadInput(t *testing.T) {
	ctx := t.Context()
	if _, err := postgres.New(ctx, nil, postgres.Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("New(nil): %v, want ErrInvalidConfig", err)
	}
	if _, err := postgres.NewSQL(ctx, nil, postgres.Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("NewSQL(nil): %v, want ErrInvalidConfig", err)
	}
	pool, db := connect(t)
	if _, err := postgres.New(ctx, pool, postgres.Options{Isolation: sql.LevelSnapshot}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("New with snapshot isolation: %v, want ErrInvalidConfig", err)
	}
	if _, err := postgres.NewSQL(ctx, db, postgres.Options{Isolation: sql.LevelLinearizable}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("NewSQL with linearizable isolation: %v, want ErrInvalidConfig", err)
	}
}

// Both drivers give back the handle they were made with (DB) and refuse a
// nil transaction in Wrap with ErrBadTx.
func TestDriverAccessors(t *testing.T) {
	ctx := t.Context()
	pool, db := connect(t)
	native, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	viaSQL, err := postgres.NewSQL(ctx, db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if native.DB() != pool || viaSQL.DB() != db {
		t.Errorf("DB() is not the handle New and NewSQL were given")
	}
	if native.Dialect().Name() != viaSQL.Dialect().Name() {
		t.Errorf("the drivers' dialects differ: %q and %q", native.Dialect().Name(), viaSQL.Dialect().Name())
	}
	if _, err := native.Wrap(nil); !errors.Is(err, idem.ErrBadTx) {
		t.Errorf("pgx Wrap(nil): %v, want ErrBadTx", err)
	}
	if _, err := viaSQL.Wrap(nil); !errors.Is(err, idem.ErrBadTx) {
		t.Errorf("database/sql Wrap(nil): %v, want ErrBadTx", err)
	}
}
