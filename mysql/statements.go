package mysql

import (
	"embed"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem/dialect"
)

//go:embed migrations/*.sql
var migrations embed.FS

// now is the store's clock (a Unix-microsecond parameter) or, when that is
// NULL, the database's. UTC_TIMESTAMP(6) is fixed for one statement.
const now = `COALESCE(CAST('1970-01-01 00:00:00' AS DATETIME(6)) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6))`

// micros selects a DATETIME(6) column as Unix microseconds.
func micros(col string) string {
	return `TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), ` + col + `)`
}

// expiredAt is the purge condition, with the now parameter.
const expiredAt = `expires_at <= ` + now

// setLockWait saves the session's lock wait timeout and sets the claim's.
const setLockWait = `SET @idem_saved_lock_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = ?`

// restoreLockWait puts the session's lock wait timeout back.
const restoreLockWait = `SET SESSION innodb_lock_wait_timeout = @idem_saved_lock_wait`

// columns are the columns every read of a record returns, in the order
// scanRecord reads them; the last is the read's clock (one now argument),
// against which expiry and the lease's end are judged.
var columns = `scope, idem_key, fingerprint, status, header, body, ` + micros("created_at") + `, ` + micros("expires_at") + `,
	token, ` + micros("lease_until") + `, step, step_data, ` + micros(now)

// statements is the SQL for one table.
type statements struct {
	lease       leaseStatements
	quoted      string
	schema      dialect.Schema
	claim       claimStatements
	complete    string
	read        string
	causalRead  string // read, waiting for the Galera node to catch up
	purgeSelect string
	// purgeDeletes caches purgeDelete by size.
	purgeDeletes sync.Map
	// readFloor reads the token floor, raiseFloor raises it to ? (the
	// largest token a delete removed; the argument twice).
	readFloor, raiseFloor string
}

// purgeDelete returns the DELETE of n keys of a purge batch, made once per
// size (a batch's last chunk may be short). Arguments: scope and key of
// each row. It names only rows the batch's SELECT ... FOR UPDATE SKIP LOCKED
// holds, so it needs no expiry condition, and it must reach them by primary
// key alone: a plain DELETE ... WHERE (scope, idem_key) IN (...) is run as a
// full scan on a small table, and a scan waits for the lock of every row a
// claim holds. So the keys are a derived table joined, first, to the records
// by primary key (eq_ref), whatever the table's size.
func (s *statements) purgeDelete(n int) string {
	if q, ok := s.purgeDeletes.Load(n); ok {
		return q.(string)
	}
	var b strings.Builder
	b.WriteString("DELETE r FROM (")
	for i := range n {
		if i == 0 {
			b.WriteString("SELECT ? AS scope, ? AS idem_key")
		} else {
			b.WriteString(" UNION ALL SELECT ?, ?")
		}
	}
	b.WriteString(") AS k STRAIGHT_JOIN " + s.quoted + " AS r ON r.scope = k.scope AND r.idem_key = k.idem_key")
	q, _ := s.purgeDeletes.LoadOrStore(n, b.String())
	return q.(string)
}

// claimStatements are the statements of a claim that may wait for a lock.
type claimStatements struct {
	insert, lockingRead, takeover string
}

// boundKey names the claim statements of one table and wait bound.
type boundKey struct {
	table   string
	seconds int64
}

// bounded returns the claim statements of t, each running with
// innodb_lock_wait_timeout set to seconds (MariaDB's SET STATEMENT), and
// innodb_snapshot_isolation off where the server has it, made once per
// table and bound.
func (d *mysqlDialect) bounded(t dialect.Table, s *statements, seconds int64) *claimStatements {
	k := boundKey{t.Name(), seconds}
	if c, ok := d.bounds.Load(k); ok {
		return c.(*claimStatements)
	}
	prefix := "SET STATEMENT innodb_lock_wait_timeout=" + strconv.FormatInt(seconds, 10)
	if d.latestLockedReads {
		prefix += ", innodb_snapshot_isolation=OFF"
	}
	prefix += " FOR "
	c, _ := d.bounds.LoadOrStore(k, &claimStatements{
		insert:      prefix + s.claim.insert,
		lockingRead: prefix + s.claim.lockingRead,
		takeover:    prefix + s.claim.takeover,
	})
	return c.(*claimStatements)
}

func newStatements(t dialect.Table) *statements {
	n := "`" + t.Name() + "`"
	versions := "`" + t.Index("schema") + "`"
	fence := "`" + t.Index("fence") + "`"
	// Arguments: now, scope, key.
	read := `SELECT ` + columns + `
FROM ` + n + ` WHERE scope = ? AND idem_key = ?`
	return &statements{
		quoted: n,
		schema: dialect.Schema{
			Migrations: dialect.MustLoadMigrations(migrations, "migrations", t),
			// A named lock of the session: migrations of one table run one
			// at a time across processes. DDL commits on its own here, so
			// a transaction could not hold a lock across it.
			Lock:   `SELECT GET_LOCK('idem migrate ` + t.Name() + `', 60)`,
			Unlock: `SELECT RELEASE_LOCK('idem migrate ` + t.Name() + `')`,
			CreateVersionTable: `CREATE TABLE IF NOT EXISTS ` + versions + ` (
	version    INT          NOT NULL PRIMARY KEY,
	name       VARCHAR(255) NOT NULL,
	applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB`,
			ReadVersion:   `SELECT MAX(version) FROM ` + versions,
			RecordVersion: `INSERT INTO ` + versions + ` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
		},

		claim: claimStatements{
			// Arguments: scope, key, fingerprint, now, now, retention (µs).
			insert: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at)
VALUES (?, ?, ?, ` + now + `, ` + now + ` + INTERVAL ? MICROSECOND)`,

			// Arguments: now, scope, key.
			lockingRead: read + ` LOCK IN SHARE MODE`,

			// Arguments: fingerprint, now, now, retention, scope, key, now.
			takeover: `UPDATE ` + n + ` SET fingerprint = ?, status = NULL, header = NULL, body = NULL,
	created_at = ` + now + `, expires_at = ` + now + ` + INTERVAL ? MICROSECOND,
	token = token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE scope = ? AND idem_key = ? AND expires_at <= ` + now,
		},

		// Arguments: status, header, body, now, retention (µs), scope,
		// key, fingerprint. The record lives the retention after its
		// completion.
		complete: `UPDATE ` + n + ` SET status = ?, header = ?, body = ?, expires_at = ` + now + ` + INTERVAL ? MICROSECOND
WHERE scope = ? AND idem_key = ? AND fingerprint = ? AND status IS NULL`,

		read:       read,
		causalRead: causalPrefix + read,

		// Arguments: now, limit.
		purgeSelect: `SELECT scope, idem_key, token FROM ` + n + ` WHERE ` + expiredAt + `
ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`,

		// A plain read: a consistent read of the latest committed floor,
		// taking no lock.
		readFloor:  `SELECT COALESCE(MAX(max_deleted_token), 0) FROM ` + fence + ` WHERE id = 1`,
		raiseFloor: `UPDATE ` + fence + ` SET max_deleted_token = ? WHERE id = 1 AND max_deleted_token < ?`,

		lease: newLeaseStatements(n),
	}
}

// leaseStatements are lease mode's statements. Their arguments are built
// by the functions of lease.go, which name each placeholder.
type leaseStatements struct {
	insert, stampToken, takeExpired, resume string
	extend, step, complete, release         string
	held, until, expired                    string
}

// newLeaseStatements writes lease mode's statements for the quoted table
// n. Every write that sets lease_until keeps expires_at >= lease_until.
// Single-table UPDATEs assign left to right; no assignment here reads a
// column an earlier one set.
func newLeaseStatements(n string) leaseStatements {
	const fenced = `WHERE scope = ? AND idem_key = ? AND token = ? AND fingerprint = ? AND status IS NULL AND lease_until IS NOT NULL`
	const plus = ` + INTERVAL ? MICROSECOND`
	return leaseStatements{
		// The token is stamped by stampToken once the row is this
		// transaction's (see Leaser).
		insert: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at, token, lease_until)
SELECT ?, ?, ?, c.n, GREATEST(c.n` + plus + `, c.n` + plus + `), 0, c.n` + plus + `
FROM (SELECT ` + now + ` AS n) AS c`,

		// Arguments: the floor, scope, key.
		stampToken: `UPDATE ` + n + ` SET token = GREATEST(token, ?) + 1 WHERE scope = ? AND idem_key = ?`,

		takeExpired: `UPDATE ` + n + ` SET fingerprint = ?, status = NULL, header = NULL, body = NULL, created_at = ` + now + `,
	expires_at = GREATEST(` + now + plus + `, ` + now + plus + `),
	lease_until = ` + now + plus + `, step = NULL, step_data = NULL
WHERE scope = ? AND idem_key = ? AND expires_at <= ` + now,

		resume: `UPDATE ` + n + ` SET token = token + 1, lease_until = ` + now + plus + `,
	expires_at = GREATEST(expires_at, ` + now + plus + `)
WHERE scope = ? AND idem_key = ? AND status IS NULL AND fingerprint = ?
	AND lease_until <= ` + now + ` AND expires_at > ` + now,

		extend: `UPDATE ` + n + ` SET lease_until = ` + now + plus + `, expires_at = GREATEST(expires_at, ` + now + plus + `) ` + fenced,

		step: `UPDATE ` + n + ` SET lease_until = ` + now + plus + `, expires_at = GREATEST(expires_at, ` + now + plus + `),
	step = ?, step_data = ? ` + fenced,

		complete: `UPDATE ` + n + ` SET status = ?, header = ?, body = ?, expires_at = ` + now + plus + `, lease_until = NULL ` + fenced,

		release: `UPDATE ` + n + ` SET lease_until = LEAST(created_at, ` + now + `) ` + fenced,

		// Whether the holder's record is there: after an UPDATE that
		// changed nothing, which go-sql-driver reports as 0 rows unless
		// the DSN sets clientFoundRows.
		held: `SELECT 1 FROM ` + n + ` ` + fenced,

		// The holder's lease end after an extension (the row is locked by
		// the UPDATE before it, so this reads that UPDATE's value).
		until: `SELECT ` + micros("lease_until") + ` FROM ` + n + ` ` + fenced,

		expired: `SELECT ` + columns + ` FROM ` + n + `
WHERE lease_until <= ` + now + ` AND status IS NULL AND expires_at > ` + now + `
ORDER BY lease_until LIMIT ?`,
	}
}
