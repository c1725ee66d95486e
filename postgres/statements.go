package postgres

import (
	"embed"

	"github.com/idemkit/idem/dialect"
)

//go:embed migrations/*.sql
var migrations embed.FS

// setLockTimeout saves the transaction's lock_timeout in a custom setting
// and sets the claim's wait bound, both for this transaction only.
const setLockTimeout = `SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $1, true)`

// restoreLockTimeout puts the caller's lock_timeout back after the claim.
const restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`

// statements is the SQL for one table.
type statements struct {
	schema                                     dialect.Schema
	claim, takeover, complete, completeGuarded string
	read, peek, purge                          string
	// fence is the quoted name of the table's token floor.
	fence string
	lease leaseStatements
}

// leaseStatements are lease mode's statements.
type leaseStatements struct {
	insert, stampToken, takeExpired, resume string
	extend, step, complete, release         string
	expired                                 string
}

// raisingFloor wraps a DELETE ... RETURNING token so that the statement
// also raises the token floor to the largest token it deleted, and returns
// how many rows it deleted. The UPDATE matches no row (and locks none)
// when nothing deleted held a token above the floor.
func raisingFloor(del, fence string) string {
	return `WITH gone AS (` + del + `),
raised AS (
	UPDATE ` + fence + ` SET max_deleted_token = (SELECT max(token) FROM gone)
	WHERE id = 1 AND max_deleted_token < (SELECT max(token) FROM gone)
)
SELECT count(*) FROM gone`
}

// floorOf is the token floor of the quoted fence table.
func floorOf(fence string) string {
	return `COALESCE((SELECT max_deleted_token FROM ` + fence + ` WHERE id = 1), 0)`
}

// micros renders a parameter holding microseconds as an interval; a days
// part would depend on the session's time zone, microseconds do not.
func micros(param string) string { return param + `::bigint * interval '1 microsecond'` }

// clockOf is the store's clock from a parameter, or the database's.
func clockOf(param string) string {
	return `COALESCE(` + param + `::timestamptz, statement_timestamp())`
}

// columns are the columns every read of a record returns, in the order
// scanRecord reads them, qualified by alias (may be ""), with the read's
// clock.
func columns(alias, now string) string {
	p := alias
	if p != "" {
		p += "."
	}
	return p + `scope, ` + p + `idem_key, ` + p + `fingerprint, ` + p + `status, ` + p + `header, ` + p + `body, ` +
		p + `created_at, ` + p + `expires_at, ` + p + `expires_at <= ` + now + `, ` +
		p + `token, ` + p + `lease_until, ` + p + `step, ` + p + `step_data, ` + p + `lease_until <= ` + now
}

func newStatements(t dialect.Table) *statements {
	n := `"` + t.Name() + `"`
	versions := `"` + t.Index("schema") + `"`
	fence := `"` + t.Index("fence") + `"`
	const now = `COALESCE($4::timestamptz, statement_timestamp())`
	const readNow = `COALESCE($3::timestamptz, statement_timestamp())`
	read := `SELECT ` + columns("", readNow) + ` FROM ` + n + ` WHERE scope = $1 AND idem_key = $2`
	// $7 now (NULL: the database's clock), $8 retention in microseconds:
	// a completed record lives the retention after its completion.
	complete := `UPDATE ` + n + ` SET status = $1, header = $2, body = $3,
	expires_at = COALESCE($7::timestamptz, statement_timestamp()) + $8::bigint * interval '1 microsecond'
WHERE scope = $4 AND idem_key = $5 AND fingerprint = $6 AND status IS NULL`
	return &statements{
		schema: dialect.Schema{
			Migrations: dialect.MustLoadMigrations(migrations, "migrations", t),
			// A transaction-scoped advisory lock on the table's name:
			// migrations of one table run one at a time across processes.
			Lock: `SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtext('idem migrate ` + t.Name() + `'))) l`,
			CreateVersionTable: `CREATE TABLE IF NOT EXISTS ` + versions + ` (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp()
)`,
			ReadVersion:   `SELECT max(version) FROM ` + versions,
			RecordVersion: `INSERT INTO ` + versions + ` (version, name) VALUES ($1, $2)`,
		},

		// $1 scope, $2 key, $3 fingerprint, $4 now (NULL: the database's
		// clock), $5 retention in microseconds, $6 the wait bound.
		//
		// The subqueries save the caller's lock_timeout and set the wait
		// bound before the row is inserted, so a wait for a transaction
		// holding the key is bounded (OFFSET 0 keeps them from being
		// merged into the outer query). RETURNING, evaluated only for the
		// inserted row, restores it; after a conflict peek does.
		claim: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at)
SELECT $1::text, $2::text, $3::bytea, ` + now + `, ` + now + ` + $5::bigint * interval '1 microsecond'
FROM (SELECT set_config('lock_timeout', $6, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
	OFFSET 0) bounded
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`,

		takeover: `UPDATE ` + n + ` SET fingerprint = $3, status = NULL, header = NULL, body = NULL,
	created_at = ` + now + `, expires_at = ` + now + ` + $5::bigint * interval '1 microsecond',
	token = token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE scope = $1 AND idem_key = $2 AND expires_at <= ` + now + `
RETURNING true`,

		complete: complete,

		// The same UPDATE, made to fail when it updated no row, so a
		// pipeline that sends COMMIT after it stops before the COMMIT.
		completeGuarded: `WITH completed AS (` + complete + ` RETURNING 1)
SELECT 1 / count(*) FROM completed`,

		// $1 scope, $2 key, $3 now.
		read: read,

		// After a claim that lost: restores the caller's lock_timeout and
		// reads the record the claim lost to. $1 scope, $2 key, $3 now.
		// Always one row; NULLs when there is no record.
		peek: `SELECT ` + columns("r", readNow) + `
FROM (SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true) OFFSET 0) restored
LEFT JOIN ` + n + ` r ON r.scope = $1 AND r.idem_key = $2`,

		purge: raisingFloor(`DELETE FROM `+n+` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM `+n+` WHERE expires_at <= COALESCE($1::timestamptz, statement_timestamp())
	LIMIT $2 FOR UPDATE SKIP LOCKED))
AND expires_at <= COALESCE($1::timestamptz, statement_timestamp())
RETURNING token`, fence),

		fence: fence,
		lease: newLeaseStatements(n, fence),
	}
}

// newLeaseStatements writes lease mode's statements for the quoted table
// n and its token floor fence. Every write that sets lease_until keeps
// expires_at >= lease_until.
func newLeaseStatements(n, fence string) leaseStatements {
	// $1 scope, $2 key, $3 fingerprint, $4 now, $5 retention (µs),
	// $6 lease (µs); resume has no retention: $5 is the lease there.
	now := clockOf("$4")
	// $1 scope, $2 key, $3 token, $4 fingerprint, $5 now, then each
	// statement's own.
	fenceNow := clockOf("$5")
	const fenced = `WHERE scope = $1 AND idem_key = $2 AND token = $3 AND fingerprint = $4 AND status IS NULL AND lease_until IS NOT NULL`
	return leaseStatements{
		// The token is stamped by stampToken once the row is this
		// transaction's: the INSERT's own snapshot may predate the commit
		// of a delete it waited for, and with it a raised floor.
		insert: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at, token, lease_until)
VALUES ($1, $2, $3, ` + now + `, GREATEST(` + now + ` + ` + micros("$5") + `, ` + now + ` + ` + micros("$6") + `), 0, ` + now + ` + ` + micros("$6") + `)
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING true`,

		// $1 scope, $2 key: the record this transaction just inserted.
		stampToken: `UPDATE ` + n + ` SET token = GREATEST(token, ` + floorOf(fence) + `) + 1
WHERE scope = $1 AND idem_key = $2`,

		// The row is visible to this statement's snapshot, so it was
		// inserted after every delete of the key's earlier records had
		// committed, and the snapshot sees the floor they raised.
		takeExpired: `UPDATE ` + n + ` SET fingerprint = $3, status = NULL, header = NULL, body = NULL,
	created_at = ` + now + `, expires_at = GREATEST(` + now + ` + ` + micros("$5") + `, ` + now + ` + ` + micros("$6") + `),
	token = GREATEST(token, ` + floorOf(fence) + `) + 1, lease_until = ` + now + ` + ` + micros("$6") + `, step = NULL, step_data = NULL
WHERE scope = $1 AND idem_key = $2 AND expires_at <= ` + now,

		resume: `UPDATE ` + n + ` SET token = token + 1, lease_until = ` + now + ` + ` + micros("$5") + `,
	expires_at = GREATEST(expires_at, ` + now + ` + ` + micros("$5") + `)
WHERE scope = $1 AND idem_key = $2 AND status IS NULL AND fingerprint = $3
	AND lease_until <= ` + now + ` AND expires_at > ` + now,

		// $6 lease (µs). Returns the lease's new end.
		extend: `UPDATE ` + n + ` SET lease_until = ` + fenceNow + ` + ` + micros("$6") + `,
	expires_at = GREATEST(expires_at, ` + fenceNow + ` + ` + micros("$6") + `) ` + fenced + `
RETURNING lease_until`,

		// $6 lease (µs), $7 step, $8 its data. Returns the lease's new end.
		step: `UPDATE ` + n + ` SET lease_until = ` + fenceNow + ` + ` + micros("$6") + `,
	expires_at = GREATEST(expires_at, ` + fenceNow + ` + ` + micros("$6") + `), step = $7, step_data = $8 ` + fenced + `
RETURNING lease_until`,

		// $6 status, $7 header, $8 body, $9 retention (µs).
		complete: `UPDATE ` + n + ` SET status = $6, header = $7, body = $8,
	expires_at = ` + fenceNow + ` + ` + micros("$9") + `, lease_until = NULL ` + fenced,

		release: `UPDATE ` + n + ` SET lease_until = LEAST(created_at, ` + fenceNow + `) ` + fenced,

		// $1 now, $2 limit.
		expired: `SELECT ` + columns("", clockOf("$1")) + ` FROM ` + n + `
WHERE lease_until <= ` + clockOf("$1") + ` AND status IS NULL AND expires_at > ` + clockOf("$1") + `
ORDER BY lease_until LIMIT $2`,
	}
}
