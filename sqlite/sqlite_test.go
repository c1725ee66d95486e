package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// openFile opens a fresh database file for one test.
func openFile(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend[*sql.Tx]{
		Name: "sqlite/file",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			d, err := sqlite.New(t.Context(), openFile(t), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		InsertLegacy:  insertLegacy,
		BeginReadOnly: beginReadOnly,
	})
}

// insertLegacy writes rows as the first schema version did: its columns,
// times as Unix microseconds.
var insertLegacy = conformance.LegacyInserter(`INSERT INTO "%s" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, func(t time.Time) any { return t.UnixMicro() })

// beginReadOnly begins a transaction on d's database whose connection
// refuses writes (SQLite has no read-only transactions): every write in it
// fails with SQLITE_READONLY.
func beginReadOnly(t *testing.T, d dialect.Driver[*sql.Tx]) *sql.Tx {
	return conformance.BeginReadOnlySQL(t, d.(*sqlite.Driver).DB(), "PRAGMA query_only = ON")
}
