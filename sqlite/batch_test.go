package sqlite_test

import (
	"database/sql"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// keyByKey is a dialect without the batch abilities: only the methods of
// dialect.Dialect, so dialect.ClaimBatch and CompleteBatch fall back to
// Claim and Complete key by key.
type keyByKey struct{ dialect.Dialect }

// keyByKeyDriver is the SQLite driver with its dialect hidden behind
// keyByKey.
type keyByKeyDriver struct{ *sqlite.Driver }

func (d keyByKeyDriver) Dialect() dialect.Dialect { return keyByKey{d.Driver.Dialect()} }

// TestBatchFallback runs the batch cases over the key-by-key fallback,
// which a dialect without dialect.BatchClaimer and BatchCompleter gets.
func TestBatchFallback(t *testing.T) {
	if _, ok := any(keyByKey{}).(dialect.BatchClaimer); ok {
		t.Fatal("keyByKey claims batches itself")
	}
	conformance.RunCases(t, conformance.Backend[*sql.Tx]{
		Name: "sqlite/key-by-key",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			d, err := sqlite.New(t.Context(), openFile(t), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return keyByKeyDriver{d}
		},
	}, conformance.BatchCases[*sql.Tx]())
}
