package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"maps"
	"slices"

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
	raiseFloor                   dialect.Query
	lease                        leaseStatements
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

// now is the store's clock from a parameter, or the database's when NULL
// (queries/_parts.sql's "now", for the statements built in Go).
func now(param string) string { return fmt.Sprintf("COALESCE(%s, %s)", param, dbNow) }

func newStatements(t dialect.Table) *statements {
	catalog := dialect.MustLoadQueries(queries, "queries", t, dialect.Question, nil)
	take := func(name string) dialect.Query {
		q, ok := catalog[name]
		if !ok {
			panic(fmt.Sprintf("sqlite: no statement %q in queries/", name))
		}
		delete(catalog, name)
		return q
	}
	versions := `"` + t.Index("schema") + `"`
	s := &statements{
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
		claim:      take("claim"),
		complete:   take("complete"),
		read:       take("read"),
		purge:      take("purge"),
		raiseFloor: take("raise_floor"),
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
	if len(catalog) > 0 {
		panic(fmt.Sprintf("sqlite: statements in queries/ that nothing runs: %v", slices.Sorted(maps.Keys(catalog))))
	}
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
