package mysql

import (
	"embed"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemkit/idem/dialect"
)

//go:embed migrations/*.sql
var migrations embed.FS

// queries is the statement catalog: one statement per file, named by the
// file (queries/claim.sql is "claim"), with named parameters (@scope,
// @now, ...) that every call site binds by name (dialect.Query.Args). The
// parts they share are in queries/_parts.sql. Only the purge's DELETE,
// whose length varies with its batch, is built here (purgeDelete).
//
//go:embed queries/*.sql
var queries embed.FS

// now is the store's clock (a Unix-microseconds parameter, ?) or, when that
// is NULL, the database's: queries/_parts.sql's "now", for the admin
// statements built with squirrel.
var now = dialect.MustCompilePart(queries, "queries", `{{template "now"}}`, dialect.Question)

// micros selects a DATETIME(6) column as Unix microseconds: the "micros"
// part of queries/_parts.sql, for the admin statements.
func micros(col string) string {
	return `TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), ` + col + `)`
}

// statements is the SQL for one table.
type statements struct {
	lease    leaseStatements
	quoted   string
	schema   dialect.Schema
	claim    claimStatements
	complete dialect.Query
	read     dialect.Query
	// causalRead is read, waiting for the Galera node to catch up.
	causalRead dialect.Query
	purge      dialect.Query
	// purgeDeletes caches purgeDelete by size.
	purgeDeletes sync.Map
	// floorRead reads the token floor, floorRaise raises it to @token.
	floorRead, floorRaise dialect.Query
	// lockWaitSet and lockWaitRestore bound a MySQL session's lock waits
	// around a claim.
	lockWaitSet, lockWaitRestore dialect.Query
	// peekBatch and claimBatch are a batch claim's statements, whose
	// derived table of keys batchKeys writes (see batch.go).
	peekBatch, claimBatch, completeBatch dialect.Query
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
	claim, peek, takeover dialect.Query
}

// boundKey names the claim statements of one table and wait bound, the
// bound in the unit waitBound gives.
type boundKey struct {
	table string
	bound int64
}

// bounded returns the claim statements of t, each bounded by wait
// (waitBound), made once per table and bound.
func (d *mysqlDialect) bounded(t dialect.Table, s *statements, wait time.Duration) *claimStatements {
	bound, n := d.waitBound(wait, true)
	k := boundKey{t.Name(), n}
	if c, ok := d.bounds.Load(k); ok {
		return c.(*claimStatements)
	}
	c, _ := d.bounds.LoadOrStore(k, &claimStatements{
		claim:    bound(s.claim.claim),
		peek:     bound(s.claim.peek),
		takeover: bound(s.claim.takeover),
	})
	return c.(*claimStatements)
}

// waitBound returns what bounds one statement's lock wait by wait, where
// the server can bound a single statement (perStatementWait), and the
// bound in its unit:
//
//   - on MariaDB, a SET STATEMENT innodb_lock_wait_timeout=N FOR before
//     it, in whole seconds, and when latest is set with
//     innodb_snapshot_isolation off where the server has it (the claim's
//     statements: a loser reads the latest committed record);
//   - behind vtgate, a QUERY_TIMEOUT_MS=N directive after its first word
//     (vitess.go): N milliseconds, the bound rounded up to whole seconds
//     as on MySQL. vttablet ends a statement that runs longer, and in a
//     transaction kills its connection, so the transaction ends too (3024,
//     or 1317 when vtgate's own deadline fires first: ErrLockTimeout).
func (d *mysqlDialect) waitBound(wait time.Duration, latest bool) (bound func(dialect.Query) dialect.Query, n int64) {
	secs := lockWaitSeconds(wait)
	if d.vitess {
		ms := secs * 1000
		directive := "/*vt+ QUERY_TIMEOUT_MS=" + strconv.FormatInt(ms, 10) + " */"
		return func(q dialect.Query) dialect.Query {
			q.SQL = afterFirstWord(q.SQL, directive)
			return q
		}, ms
	}
	prefix := "SET STATEMENT innodb_lock_wait_timeout=" + strconv.FormatInt(secs, 10)
	if latest && d.latestLockedReads {
		prefix += ", innodb_snapshot_isolation=OFF"
	}
	prefix += " FOR "
	return func(q dialect.Query) dialect.Query { return prefixed(prefix, q) }, secs
}

// prefixed is q run under prefix, a SET STATEMENT ... FOR that takes no
// parameter.
func prefixed(prefix string, q dialect.Query) dialect.Query {
	q.SQL = prefix + q.SQL
	return q
}

// afterFirstWord puts a Vitess comment directive after the statement's
// first word (INSERT, SELECT, UPDATE: every statement of the catalog
// begins with its verb), the only place vtgate reads one.
func afterFirstWord(query, directive string) string {
	i := strings.IndexAny(query, " \n\t")
	if i < 0 {
		return query + " " + directive
	}
	return query[:i] + " " + directive + query[i:]
}

func newStatements(t dialect.Table) *statements {
	catalog := dialect.NewCatalog("mysql", dialect.MustLoadQueries(queries, "queries", t, dialect.Question))
	get := catalog.Take
	read := get("read")
	s := &statements{
		quoted: "`" + t.Name() + "`",
		schema: dialect.Schema{
			Migrations:         dialect.MustLoadMigrations(migrations, "migrations", t),
			Lock:               get("schema_lock").SQL,
			Unlock:             get("schema_unlock").SQL,
			CreateVersionTable: get("schema_create_version_table").SQL,
			ReadVersion:        get("schema_read_version").SQL,
			// Positional: @version, then @name.
			RecordVersion: get("schema_record_version").SQL,
		},
		claim: claimStatements{
			claim:    get("claim"),
			peek:     get("peek"),
			takeover: get("takeover"),
		},
		complete:        get("complete"),
		read:            read,
		causalRead:      prefixed(causalPrefix, read),
		purge:           get("purge"),
		floorRead:       get("floor_read"),
		floorRaise:      get("raise_floor"),
		lockWaitSet:     get("lock_wait_set"),
		lockWaitRestore: get("lock_wait_restore"),
		peekBatch:       get("peek_batch"),
		claimBatch:      get("claim_batch"),
		completeBatch:   get("complete_batch"),
		lease: leaseStatements{
			insert:      get("lease_insert"),
			stampToken:  get("lease_stamp_token"),
			takeExpired: get("lease_take_expired"),
			resume:      get("lease_resume"),
			extend:      get("lease_extend"),
			step:        get("lease_step"),
			complete:    get("lease_complete"),
			release:     get("lease_release"),
			held:        get("lease_held"),
			until:       get("lease_until"),
			expired:     get("lease_expired"),
		},
	}
	catalog.Done()
	return s
}

// leaseStatements are lease mode's statements (queries/lease_*.sql). Every
// write that sets lease_until keeps expires_at >= lease_until.
type leaseStatements struct {
	insert, stampToken, takeExpired, resume dialect.Query
	extend, step, complete, release         dialect.Query
	held, until, expired                    dialect.Query
}
