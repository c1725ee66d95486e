package sqlite

import (
	"context"
	"database/sql"
	"embed"

	"github.com/idemkit/idem/dialect"
)

//go:embed migrations/*.sql
var migrations embed.FS

// queries is the catalog of the lifecycle's and lease mode's statements,
// one per file, with named parameters (@scope, @now, @retention_us, ...):
// times are Unix microseconds, durations microseconds, and a NULL @now is
// the database's clock.
//
//go:embed queries/*.sql
var queries embed.FS

// statements is the SQL for one table.
type statements struct {
	schema                       dialect.Schema
	claim, complete, read, purge dialect.Query
	// completeLate is complete for work that ran past its claim's grace.
	completeLate dialect.Query
	raiseFloor   dialect.Query
	// claimBatch and readBatch claim a batch's keys and read the records
	// it lost to.
	claimBatch, readBatch dialect.Query
	lease                 leaseStatements
}

// leaseStatements are lease mode's statements.
type leaseStatements struct {
	insert, takeExpired, resume     dialect.Query
	extend, step, complete, release dialect.Query
	expired                         dialect.Query
}

// dbNow is SQLite's clock in Unix microseconds. SQLite keeps 'now' fixed
// for the whole of one statement.
const dbNow = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

func newStatements(t dialect.Table) *statements {
	catalog := dialect.NewCatalog("sqlite", dialect.MustLoadQueries(queries, "queries", t, dialect.Question))
	take := catalog.Take
	s := &statements{
		schema: dialect.Schema{
			Migrations:         dialect.MustLoadMigrations(migrations, "migrations", t),
			CreateVersionTable: take("schema_create_version_table").SQL,
			ReadVersion:        take("schema_read_version").SQL,
			// Positional: @version, then @name.
			RecordVersion: take("schema_record_version").SQL,
		},
		claim:        take("claim"),
		complete:     take("complete"),
		completeLate: take("complete_late"),
		read:         take("read"),
		purge:        take("purge"),
		raiseFloor:   take("raise_floor"),
		claimBatch:   take("claim_batch"),
		readBatch:    take("read_batch"),
		lease: leaseStatements{
			insert:      take("lease_insert"),
			takeExpired: take("lease_take_expired"),
			resume:      take("lease_resume"),
			extend:      take("lease_extend"),
			step:        take("lease_step"),
			complete:    take("lease_complete"),
			release:     take("lease_release"),
			expired:     take("lease_expired"),
		},
	}
	catalog.Done()
	return s
}

// query runs stmt prepared, its parameters bound by name (every one of
// stmt's names exactly once).
func query(ctx context.Context, q dialect.Queryer, stmt dialect.Query, named ...sql.NamedArg) (dialect.Rows, error) {
	args, err := stmt.Args(named...)
	if err != nil {
		return nil, err
	}
	return dialect.QueryPrepared(ctx, q, stmt.SQL, args...)
}

// exec runs stmt prepared, its parameters bound by name, and reports how
// many rows it changed.
func exec(ctx context.Context, q dialect.Queryer, stmt dialect.Query, named ...sql.NamedArg) (int64, error) {
	args, err := stmt.Args(named...)
	if err != nil {
		return 0, err
	}
	return dialect.ExecPrepared(ctx, q, stmt.SQL, args...)
}
