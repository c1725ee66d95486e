package sqlite

import (
	"embed"
	"fmt"

	"github.com/idemkit/idem/dialect"
)

//go:embed migrations/*.sql
var migrations embed.FS

// statements is the SQL for one table.
type statements struct {
	schema                         dialect.Schema
	claim, complete, lookup, purge string
}

// dbNow is SQLite's clock in Unix microseconds. SQLite keeps 'now' fixed
// for the whole of one statement.
const dbNow = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

// now is the store's clock from a parameter, or the database's when NULL.
func now(param string) string { return fmt.Sprintf("COALESCE(%s, %s)", param, dbNow) }

func newStatements(t dialect.Table) *statements {
	n := `"` + t.Name() + `"`
	versions := `"` + t.Index("schema") + `"`
	return &statements{
		schema: dialect.Schema{
			Migrations: dialect.MustLoadMigrations(migrations, "migrations", t),
			// BEGIN IMMEDIATE already serialises writers, migrations included.
			CreateVersionTable: `CREATE TABLE IF NOT EXISTS ` + versions + ` (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`,
			ReadVersion:   `SELECT MAX(version) FROM ` + versions,
			RecordVersion: `INSERT INTO ` + versions + ` (version, name, applied_at) VALUES (?1, ?2, ` + dbNow + `)`,
		},

		// ?1 scope, ?2 key, ?3 fingerprint, ?4 now (NULL: database clock),
		// ?5 retention in microseconds. The upsert's RETURNING yields a row
		// only when this statement wrote the record: a new key, or an
		// expired one taken over.
		claim: `INSERT INTO ` + n + ` AS r (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?1, ?2, ?3, NULL, NULL, NULL, ` + now("?4") + `, ` + now("?4") + ` + ?5)
ON CONFLICT (scope, idem_key) DO UPDATE SET
	fingerprint = excluded.fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE r.expires_at <= excluded.created_at
RETURNING created_at`,

		// ?7 now (NULL: database clock), ?8 retention in microseconds: a
		// completed record lives the retention after its completion.
		complete: `UPDATE ` + n + ` SET status = ?1, header = ?2, body = ?3, expires_at = ` + now("?7") + ` + ?8
WHERE scope = ?4 AND idem_key = ?5 AND fingerprint = ?6 AND status IS NULL`,

		lookup: `SELECT scope, idem_key, fingerprint, status, header, body, created_at, expires_at
FROM ` + n + ` WHERE scope = ?1 AND idem_key = ?2 AND expires_at > ` + now("?3"),

		purge: `DELETE FROM ` + n + ` WHERE (scope, idem_key) IN (
	SELECT scope, idem_key FROM ` + n + ` WHERE expires_at <= ` + now("?1") + ` LIMIT ?2)`,
	}
}
