package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/mysql"
)

// A claim in a read-only transaction is a transaction of the wrong kind:
// ErrBadTx (and ErrReadOnly), and nothing is written.
func TestClaimInReadOnlyTransaction(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := open(t, "")
	store, err := idem.New(newDriver(t, "", mysql.Options{}), idem.Config{Table: "idem_readonly_test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS idem_readonly_test, idem_readonly_test_schema, idem_readonly_test_fence")
	})
	tx, err := db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: "s", Key: "ro", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
	_, err = store.Claim(ctx, tx, req)
	tx.Rollback()
	if !errors.Is(err, idem.ErrBadTx) || !errors.Is(err, idem.ErrReadOnly) {
		t.Fatalf("Claim in a read-only transaction: %v, want ErrBadTx and ErrReadOnly", err)
	}
	if _, err := store.Lookup(ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("after the refused claim, Lookup: %v, want ErrNotFound", err)
	}
}
