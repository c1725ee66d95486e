package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

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
		InsertLegacy: insertLegacy,
	})
}

// insertLegacy writes rows as the first schema version did: its columns,
// times as Unix microseconds, NULL status, header and body while pending.
func insertLegacy(ctx context.Context, q dialect.Queryer, table string, rows []conformance.LegacyRecord) error {
	for _, r := range rows {
		var status, header, body any
		if r.Status != nil {
			status, header, body = *r.Status, []byte{}, r.Body
		}
		_, err := q.Exec(ctx, `INSERT INTO "`+table+`" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, r.Scope, r.Key, r.Fingerprint, status, header, body, r.CreatedAt.UnixMicro(), r.ExpiresAt.UnixMicro())
		if err != nil {
			return err
		}
	}
	return nil
}
