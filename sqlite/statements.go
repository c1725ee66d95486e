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
	// raiseFloor raises the token floor to ?1 (the largest token a
	// delete removed).
	raiseFloor string
	lease      leaseStatements
}

// leaseStatements are lease mode's statements.
type leaseStatements struct {
	insert, takeExpired, resume     string
	extend, step, complete, release string
	expired                         string
}

// columns are the columns every read of a record returns, in the order
// scanRecord reads them, given the read's clock.
func columns(now string) string {
	return `scope, idem_key, fingerprint, status, header, body, created_at, expires_at, token, lease_until, step, step_data,
	lease_until IS NOT NULL AND lease_until <= ` + now
}

// dbNow is SQLite's clock in Unix microseconds. SQLite keeps 'now' fixed
// for the whole of one statement.
const dbNow = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

// now is the store's clock from a parameter, or the database's when NULL.
func now(param string) string { return fmt.Sprintf("COALESCE(%s, %s)", param, dbNow) }

func newStatements(t dialect.Table) *statements {
	n := `"` + t.Name() + `"`
	versions := `"` + t.Index("schema") + `"`
	fence := `"` + t.Index("fence") + `"`
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
	created_at = excluded.created_at, expires_at = excluded.expires_at,
	token = r.token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE r.expires_at <= excluded.created_at
RETURNING created_at`,

		// ?7 now (NULL: database clock), ?8 retention in microseconds: a
		// completed record lives the retention after its completion.
		complete: `UPDATE ` + n + ` SET status = ?1, header = ?2, body = ?3, expires_at = ` + now("?7") + ` + ?8
WHERE scope = ?4 AND idem_key = ?5 AND fingerprint = ?6 AND status IS NULL`,

		lookup: `SELECT ` + columns(now("?3")) + `
FROM ` + n + ` WHERE scope = ?1 AND idem_key = ?2 AND expires_at > ` + now("?3"),

		// Returns each deleted record's token, for the token floor.
		purge: `DELETE FROM ` + n + ` WHERE (scope, idem_key) IN (
	SELECT scope, idem_key FROM ` + n + ` WHERE expires_at <= ` + now("?1") + ` LIMIT ?2)
RETURNING token`,

		raiseFloor: `UPDATE ` + fence + ` SET max_deleted_token = ?1 WHERE id = 1 AND max_deleted_token < ?1`,

		lease: newLeaseStatements(n, fence),
	}
}

// newLeaseStatements writes lease mode's statements for the quoted table
// n and its token floor fence. Every write that sets lease_until keeps
// expires_at >= lease_until. The write lock taken at BEGIN IMMEDIATE means
// no delete can commit between a statement's read of the floor and its
// write, so the floor is read inline.
func newLeaseStatements(n, fence string) leaseStatements {
	// ?1 scope, ?2 key, ?3 fingerprint, ?4 now, ?5 retention (µs),
	// ?6 lease (µs).
	claimNow := now("?4")
	floor := `COALESCE((SELECT max_deleted_token FROM ` + fence + ` WHERE id = 1), 0)`
	// ?1 scope, ?2 key, ?3 token, ?4 fingerprint, ?5 now, then each
	// statement's own.
	fenceNow := now("?5")
	// A record claimed in one transaction holds no lease (lease_until NULL)
	// and may carry a stale holder's token: fenced writes never take it.
	fenced := `WHERE scope = ?1 AND idem_key = ?2 AND token = ?3 AND fingerprint = ?4 AND status IS NULL AND lease_until IS NOT NULL`
	return leaseStatements{
		insert: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at, token, lease_until)
VALUES (?1, ?2, ?3, NULL, NULL, NULL, ` + claimNow + `, MAX(` + claimNow + ` + ?5, ` + claimNow + ` + ?6), ` + floor + ` + 1, ` + claimNow + ` + ?6)
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING token`,

		takeExpired: `UPDATE ` + n + ` SET fingerprint = ?3, status = NULL, header = NULL, body = NULL,
	created_at = ` + claimNow + `, expires_at = MAX(` + claimNow + ` + ?5, ` + claimNow + ` + ?6),
	token = MAX(token, ` + floor + `) + 1, lease_until = ` + claimNow + ` + ?6, step = NULL, step_data = NULL
WHERE scope = ?1 AND idem_key = ?2 AND expires_at <= ` + claimNow,

		resume: `UPDATE ` + n + ` SET token = token + 1, lease_until = ` + claimNow + ` + ?6,
	expires_at = MAX(expires_at, ` + claimNow + ` + ?6)
WHERE scope = ?1 AND idem_key = ?2 AND status IS NULL AND fingerprint = ?3
	AND lease_until IS NOT NULL AND lease_until <= ` + claimNow + ` AND expires_at > ` + claimNow,

		// ?6 lease (µs). Returns the lease's new end.
		extend: `UPDATE ` + n + ` SET lease_until = ` + fenceNow + ` + ?6, expires_at = MAX(expires_at, ` + fenceNow + ` + ?6) ` + fenced + `
RETURNING lease_until`,

		// ?6 lease (µs), ?7 step, ?8 its data. Returns the lease's new end.
		step: `UPDATE ` + n + ` SET lease_until = ` + fenceNow + ` + ?6, expires_at = MAX(expires_at, ` + fenceNow + ` + ?6),
	step = ?7, step_data = ?8 ` + fenced + `
RETURNING lease_until`,

		// ?6 status, ?7 header, ?8 body, ?9 retention (µs).
		complete: `UPDATE ` + n + ` SET status = ?6, header = ?7, body = ?8, expires_at = ` + fenceNow + ` + ?9, lease_until = NULL ` + fenced,

		release: `UPDATE ` + n + ` SET lease_until = MIN(created_at, ` + fenceNow + `) ` + fenced,

		// ?1 now, ?2 limit.
		expired: `SELECT ` + columns(now("?1")) + ` FROM ` + n + `
WHERE lease_until IS NOT NULL AND lease_until <= ` + now("?1") + ` AND status IS NULL AND expires_at > ` + now("?1") + `
ORDER BY lease_until LIMIT ?2`,
	}
}
