package postgres

import (
	"database/sql"
	"embed"

	"github.com/idemkit/idem/dialect"
)

//go:embed migrations/*.sql
var migrations embed.FS

// queriesFS is the statement catalog: one statement per file of queries/,
// with named parameters, rendered per table (see dialect.LoadQueries).
//
//go:embed queries/*.sql
var queriesFS embed.FS

// statements is the SQL for one table.
type statements struct {
	schema                                     dialect.Schema
	claim, takeover, complete, completeGuarded dialect.Query
	read, peek, purge                          dialect.Query
	// lockWaitSet and lockWaitRestore bound a takeover's wait.
	lockWaitSet, lockWaitRestore dialect.Query
	// The batch's claim, its read of the keys, and its completion.
	claimBatch, peekBatch, completeBatch, completeBatchGuarded dialect.Query
	// fence is the quoted name of the table's token floor.
	fence string
	lease leaseStatements
}

// leaseStatements are lease mode's statements.
type leaseStatements struct {
	lockWait, insert, stampToken, takeExpired, resume dialect.Query
	extend, step, complete, release                   dialect.Query
	expired                                           dialect.Query
}

// raisingFloor wraps a DELETE ... RETURNING token so that the statement
// also raises the token floor to the largest token it deleted, and returns
// how many rows it deleted: queries/purge.sql for a DELETE built at run
// time (the admin's purge). The UPDATE matches no row (and locks none)
// when nothing deleted held a token above the floor.
func raisingFloor(del, fence string) string {
	return `WITH gone AS (` + del + `),
raised AS (
	UPDATE ` + fence + ` SET max_deleted_token = (SELECT max(token) FROM gone)
	WHERE id = 1 AND max_deleted_token < (SELECT max(token) FROM gone)
)
SELECT count(*) FROM gone`
}

// newStatements loads the catalog for t. Every statement of it has a field;
// a file without one is a bug in this package.
func newStatements(t dialect.Table) *statements {
	catalog := dialect.NewCatalog("postgres", dialect.MustLoadQueries(queriesFS, "queries", t, dialect.Dollar))
	q := catalog.Take
	s := &statements{
		schema: dialect.Schema{
			Migrations:         dialect.MustLoadMigrations(migrations, "migrations", t),
			Lock:               q("schema_lock").SQL,
			CreateVersionTable: q("schema_create_version_table").SQL,
			ReadVersion:        q("schema_read_version").SQL,
			// dialect.Migrate binds version and name in that order.
			RecordVersion: q("schema_record_version").SQL,
		},
		claim:           q("claim"),
		takeover:        q("takeover"),
		complete:        q("complete"),
		completeGuarded: q("complete_guarded"),
		read:            q("read"),
		peek:            q("peek"),
		purge:           q("purge"),
		lockWaitSet:     q("lock_wait_set"),
		lockWaitRestore: q("lock_wait_restore"),

		claimBatch:           q("claim_batch"),
		peekBatch:            q("peek_batch"),
		completeBatch:        q("complete_batch"),
		completeBatchGuarded: q("complete_batch_guarded"),
		fence:                `"` + t.Index("fence") + `"`,
		lease: leaseStatements{
			lockWait:    q("lease_lock_wait"),
			insert:      q("lease_insert"),
			stampToken:  q("lease_stamp_token"),
			takeExpired: q("lease_take_expired"),
			resume:      q("lease_resume"),
			extend:      q("lease_extend"),
			step:        q("lease_step"),
			complete:    q("lease_complete"),
			release:     q("lease_release"),
			expired:     q("lease_expired"),
		},
	}
	catalog.Done()
	return s
}

// bind is q with its arguments from named values. A name q lacks or needs
// is an error wrapping dialect.ErrInvalidConfig: a bug in this package.
func bind(q dialect.Query, named ...sql.NamedArg) (dialect.Statement, error) {
	args, err := q.Args(named...)
	return dialect.Statement{SQL: q.SQL, Args: args}, err
}
